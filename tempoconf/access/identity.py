"""Who a request is: an operator (`Principal`) or a fleet's client (`ClientPrincipal`), and what
each may do where."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from tempoconf.access.roles import Grant, NamespaceMatcher, Role

__all__ = ["EVERY_CLIENT", "ClientPrincipal", "Principal", "PrincipalKind"]


class PrincipalKind(StrEnum):
    SINGLE_TEAM = "single-team"
    """No policy file: an admin token (named or not) may do everything, as before policies."""
    TOKEN = "token"
    """A static token of the policy's `tokens`."""
    OIDC = "oidc"
    """A bearer JWT from the policy's OpenID provider."""


@dataclass(frozen=True)
class Principal:
    """An operator: `name` (audit rows, approvals; verified unless `verified` is False) and
    the grants that say what they may do where (None: everything, the single-team mode)."""

    name: str
    kind: PrincipalKind
    grants: tuple[Grant, ...] | None
    verified: bool = True

    def may(self, role: Role, namespace: str) -> bool:
        if self.grants is None:
            return True
        return any(grant.gives(role, namespace) for grant in self.grants)

    def roles_in(self, namespace: str) -> frozenset[Role]:
        if self.grants is None:
            return frozenset(Role)
        held: set[Role] = set()
        for grant in self.grants:
            if grant.covers(namespace):
                held |= grant.roles
        return frozenset(held)


@dataclass(frozen=True)
class ClientPrincipal:
    """A fleet's client: `namespaces` it may read and report in (None: every namespace, when
    no policy file or no client token is set)."""

    name: str
    namespaces: tuple[str, ...] | None
    _matches: NamespaceMatcher | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        matcher = NamespaceMatcher(self.namespaces) if self.namespaces is not None else None
        object.__setattr__(self, "_matches", matcher)

    def reads(self, namespace: str) -> bool:
        return self._matches is None or self._matches(namespace)


EVERY_CLIENT = ClientPrincipal("", None)
"""The client of the single-team mode: every namespace."""
