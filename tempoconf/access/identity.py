"""Who a request is: an operator (`Principal`) or a fleet's client (`ClientPrincipal`), and what
each may do where.

Identities live in spaces, decided here (tempoconf.rollout.identities says how they compare): a
static token's (the policy's `tokens`, the named admin tokens) is its bare name, `bob`; an OpenID
identity is `oidc:` and its `identity_claim`, `oidc:bob`. So an OpenID `bob` and a token `bob`
are two approvers and two actors in the audit log. (Audit rows written before named an OpenID
identity bare; they read as they were written.)"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from tempoconf.access.roles import Grant, NamespaceMatcher, Role
from tempoconf.rollout.identities import identity_subject, in_space, normal_person

__all__ = [
    "EVERY_CLIENT",
    "OIDC_SPACE",
    "ClientPrincipal",
    "Principal",
    "PrincipalKind",
    "normal_emails",
    "oidc_identity",
]

OIDC_SPACE = "oidc"
"""The space of OpenID identities: `oidc:<identity_claim>`."""


def oidc_identity(subject: str) -> str:
    """The identity of an OpenID subject (its `identity_claim`): `oidc:bob`."""
    return in_space(OIDC_SPACE, subject)


def normal_emails(emails: Iterable[str]) -> tuple[str, ...]:
    """`emails` as four eyes compare them (case folded, a `+tag` dropped), once each, in order."""
    return tuple(dict.fromkeys(normal_person(email) for email in emails if email.strip()))


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
    emails: tuple[str, ...] = ()
    """What the policy gives a token, or a verified OpenID `email` claim (normalised): four eyes
    refuse an approver whose email is the author's or the starter's."""

    def answers_to(self, claim: str) -> bool:
        """Whether a body's `by` (or `started_by`) names this caller: its identity, or, for an
        OpenID identity, its subject without the space (as before spaces: `bob` for `oidc:bob`)."""
        if claim == self.name:
            return True
        return self.kind == PrincipalKind.OIDC and claim == identity_subject(self.name)

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
