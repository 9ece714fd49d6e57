"""Roles, and grants of them in namespaces (`team-a`, `team-a-*`, `*`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import translate

__all__ = ["Grant", "NamespaceMatcher", "Role", "namespace_pattern_problem"]


class Role(StrEnum):
    """What an operator may do in a namespace (docs/how-to/access.md, Roles)."""

    VIEWER = "viewer"
    """Read: rollouts' state, plans' context, history, versions, schemas, clients, freezes."""
    OPERATOR = "operator"
    """Start, plan and steer rollouts (halt, bypass, advance, pause, resume), roll back."""
    APPROVER = "approver"
    """Approve a manual stage."""
    ADMIN = "admin"
    """Set schemas, start and end freezes; and everything the other roles may."""

    @property
    def includes(self) -> frozenset[Role]:
        """The roles this one holds too: every role reads; admin holds them all. An operator
        does not approve (four eyes: who starts is not who approves, unless granted both)."""
        if self is Role.ADMIN:
            return frozenset(Role)
        return frozenset({self, Role.VIEWER})


# A namespace (tempoconf.paths) with `*` standing for any run of characters.
_PATTERN = re.compile(r"[a-z0-9*][a-z0-9._*-]{0,62}")


def namespace_pattern_problem(pattern: str) -> str | None:
    if not _PATTERN.fullmatch(pattern):
        return (
            f"{pattern!r} is not a namespace or a pattern of them: lower-case letters, digits, "
            "'.', '_', '-', and '*' for any run of characters (e.g. 'team-a', 'team-a-*', '*')"
        )
    return None


class NamespaceMatcher:
    """Whether a namespace matches one of `patterns`: the exact names in a set, the patterns with
    `*` in one compiled expression (asked on every poll under a policy: no per-call work)."""

    __slots__ = ("_exact", "_wild")

    def __init__(self, patterns: Iterable[str]) -> None:
        patterns = tuple(patterns)
        self._exact = frozenset(pattern for pattern in patterns if "*" not in pattern)
        wild = [translate(pattern) for pattern in patterns if "*" in pattern]
        self._wild = re.compile("|".join(wild)) if wild else None

    def __call__(self, namespace: str) -> bool:
        return namespace in self._exact or (
            self._wild is not None and self._wild.match(namespace) is not None
        )


@dataclass(frozen=True)
class Grant:
    """`roles` (each with the roles it includes) in the namespaces `namespaces` match."""

    namespaces: tuple[str, ...]
    roles: frozenset[Role]
    covers: NamespaceMatcher = field(init=False, repr=False, compare=False)
    """Whether the grant covers a namespace."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "covers", NamespaceMatcher(self.namespaces))

    @classmethod
    def of(cls, namespaces: Iterable[str], roles: Iterable[Role]) -> Grant:
        held: set[Role] = set()
        for role in roles:
            held |= role.includes
        return cls(tuple(namespaces), frozenset(held))

    def gives(self, role: Role, namespace: str) -> bool:
        return role in self.roles and self.covers(namespace)
