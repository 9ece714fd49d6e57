"""The access policy file (`TEMPOCONF_ACCESS_FILE`): who may do what, in which namespaces.

    {"tokens":  [{"name": "alice", "secret_sha256": "<hex>",
                  "grants": [{"namespaces": ["team-a", "team-a-*"], "roles": ["operator"]}]}],
     "clients": [{"name": "fleet-a", "secret_sha256": "<hex>", "namespaces": ["team-a"]}],
     "scrapers": [{"name": "prometheus", "secret_sha256": "<hex>"}],
     "oidc":    {"issuer": "https://…", "audience": "tempoconf",
                 "identity_claim": "sub", "groups_claim": "groups"},
     "groups":  {"sre": [{"namespaces": ["*"], "roles": ["operator", "approver"]}]},
     "signing_key": "signing.pem"}

Secrets are kept only as SHA-256 digests. A presented secret is hashed, then looked up by its
digest and confirmed with a constant-time comparison: what a lookup's timing could tell is
about the digest of a guess, which says nothing of any secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from jsonschema import Draft202012Validator

from tempoconf.access.oidc_settings import OidcSettings
from tempoconf.access.roles import Grant, Role, namespace_pattern_problem
from tempoconf.problems import Problem, json_pointer

__all__ = [
    "POLICY_SCHEMA",
    "AccessPolicy",
    "ClientEntry",
    "PolicyError",
    "ScraperEntry",
    "TokenEntry",
    "load_policy",
    "parse_policy",
    "secret_digest",
]

_NAMESPACES = {
    "type": "array",
    "minItems": 1,
    "items": {"type": "string", "minLength": 1, "maxLength": 63},
}
_GRANTS = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["namespaces", "roles"],
        "properties": {
            "namespaces": _NAMESPACES,
            "roles": {
                "type": "array",
                "minItems": 1,
                "items": {"enum": [role.value for role in Role]},
            },
        },
    },
}
_NAME = {"type": "string", "pattern": r"^[A-Za-z0-9@._+-]{1,200}$"}
# The emails a token's holder goes by: four eyes refuse them as approvers of a change whose
# author (or starter) has one of them (tempoconf.rollout.identities).
_EMAILS = {
    "type": "array",
    "maxItems": 20,
    "items": {"type": "string", "maxLength": 254, "pattern": r"^[^@\s<>]+@[^@\s<>]+$"},
}
_SECRET = {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}
POLICY_SCHEMA: Mapping[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "tempoconf access policy",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "tokens": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "secret_sha256", "grants"],
                "properties": {
                    "name": _NAME,
                    "secret_sha256": _SECRET,
                    "grants": _GRANTS,
                    "emails": _EMAILS,
                },
            },
        },
        "clients": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "secret_sha256", "namespaces"],
                "properties": {"name": _NAME, "secret_sha256": _SECRET, "namespaces": _NAMESPACES},
            },
        },
        "scrapers": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "secret_sha256"],
                "properties": {"name": _NAME, "secret_sha256": _SECRET},
            },
        },
        "oidc": {
            "type": "object",
            "additionalProperties": False,
            "required": ["issuer", "audience"],
            "properties": {
                "issuer": {"type": "string", "pattern": "^https?://[^\\s]+$"},
                "audience": {"type": "string", "minLength": 1},
                "identity_claim": {"type": "string", "minLength": 1},
                "groups_claim": {"type": "string", "minLength": 1},
                "key_refresh_seconds": {"type": "number", "minimum": 0, "maximum": 86400},
            },
        },
        "groups": {"type": "object", "additionalProperties": _GRANTS},
        "signing_key": {"type": "string", "minLength": 1},
    },
}
_VALIDATOR = Draft202012Validator(POLICY_SCHEMA)


def secret_digest(secret: str | bytes) -> bytes:
    """SHA-256 of a presented secret (what the policy keeps of it, as hex)."""
    return hashlib.sha256(secret.encode() if isinstance(secret, str) else secret).digest()


@dataclass(frozen=True)
class TokenEntry:
    """An operator's (or a CI job's) static token."""

    name: str
    digest: bytes = field(repr=False)
    grants: tuple[Grant, ...]
    emails: tuple[str, ...] = ()
    """The emails its holder goes by (four eyes: not the author's)."""


@dataclass(frozen=True)
class ClientEntry:
    """A fleet's client token: reads and reports in `namespaces` only."""

    name: str
    digest: bytes = field(repr=False)
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class ScraperEntry:
    """A monitoring system's token: `GET /metrics` only. Metrics name every namespace's configs
    and versions, so a scraper is a kind of its own, opening nothing else."""

    name: str
    digest: bytes = field(repr=False)


@dataclass(frozen=True)
class AccessPolicy:
    source: Path
    tokens: tuple[TokenEntry, ...] = ()
    clients: tuple[ClientEntry, ...] = ()
    scrapers: tuple[ScraperEntry, ...] = ()
    oidc: OidcSettings | None = None
    groups: Mapping[str, tuple[Grant, ...]] = field(default_factory=dict)
    signing_key: Path | None = None
    """The Ed25519 private key (PEM) the API signs the commands it sends with."""

    _tokens: Mapping[bytes, TokenEntry] = field(init=False, repr=False, compare=False)
    _clients: Mapping[bytes, ClientEntry] = field(init=False, repr=False, compare=False)
    _scrapers: Mapping[bytes, ScraperEntry] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tokens", {entry.digest: entry for entry in self.tokens})
        object.__setattr__(self, "_clients", {entry.digest: entry for entry in self.clients})
        object.__setattr__(self, "_scrapers", {entry.digest: entry for entry in self.scrapers})

    def token(self, secret: bytes) -> TokenEntry | None:
        """The operator token whose secret this is."""
        return _match(self._tokens, secret)

    def client(self, secret: bytes) -> ClientEntry | None:
        """The client token whose secret this is."""
        return _match(self._clients, secret)

    def scraper(self, secret: bytes) -> ScraperEntry | None:
        """The scraper token whose secret this is."""
        return _match(self._scrapers, secret)

    def group_grants(self, groups: Iterable[str]) -> tuple[Grant, ...]:
        """What the policy's `groups` give to a member of `groups` (unknown groups: nothing)."""
        return tuple(grant for group in groups for grant in self.groups.get(group, ()))


_Entry = TypeVar("_Entry", TokenEntry, ClientEntry, ScraperEntry)


def _match(entries: Mapping[bytes, _Entry], secret: bytes) -> _Entry | None:
    digest = secret_digest(secret)
    found = entries.get(digest)
    if found is None or not hmac.compare_digest(found.digest, digest):
        return None
    return found


class PolicyError(ValueError):
    """The policy file cannot be used; every problem is listed with its place in the file."""

    def __init__(self, source: Path, problems: Iterable[Problem | str]) -> None:
        self.source = source
        self.problems = [str(problem) for problem in problems]
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(
            f"invalid access policy {source} ({len(self.problems)} problem(s)):\n{lines}"
        )


def load_policy(path: Path) -> AccessPolicy:
    """The policy in `path`; PolicyError when it cannot be read, is not JSON, or is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PolicyError(path, [f"cannot read it: {error}"]) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise PolicyError(
            path, [f"not JSON: {error.msg} at line {error.lineno}, column {error.colno}"]
        ) from None
    return parse_policy(raw, source=path)


def parse_policy(raw: Any, *, source: Path) -> AccessPolicy:
    problems = [
        Problem(json_pointer(error.absolute_path), error.message)
        for error in sorted(_VALIDATOR.iter_errors(raw), key=lambda e: list(e.absolute_path))
    ]
    if problems:
        raise PolicyError(source, problems)
    problems += _namespace_problems(raw)
    problems += _duplicates(raw)
    if (raw.get("tokens") or "oidc" in raw) and "signing_key" not in raw:
        problems.append(
            Problem(
                "/signing_key",
                "required when the policy names operators (tokens or oidc): the Ed25519 private "
                "key (PEM, e.g. `openssl genpkey -algorithm ed25519 -out signing.pem`) the API "
                "signs approvals with, the same file for every API replica; a path relative to "
                "this file",
            )
        )
    if problems:
        raise PolicyError(source, problems)
    oidc = raw.get("oidc")
    key = raw.get("signing_key")
    return AccessPolicy(
        source=source,
        tokens=tuple(
            TokenEntry(
                entry["name"],
                bytes.fromhex(entry["secret_sha256"]),
                _grants(entry["grants"]),
                tuple(entry.get("emails", ())),
            )
            for entry in raw.get("tokens", ())
        ),
        clients=tuple(
            ClientEntry(
                entry["name"], bytes.fromhex(entry["secret_sha256"]), tuple(entry["namespaces"])
            )
            for entry in raw.get("clients", ())
        ),
        scrapers=tuple(
            ScraperEntry(entry["name"], bytes.fromhex(entry["secret_sha256"]))
            for entry in raw.get("scrapers", ())
        ),
        oidc=OidcSettings(**oidc) if oidc is not None else None,
        groups={name: _grants(grants) for name, grants in raw.get("groups", {}).items()},
        signing_key=(source.parent / key) if key is not None else None,
    )


def _grants(raw: list[dict[str, Any]]) -> tuple[Grant, ...]:
    return tuple(Grant.of(grant["namespaces"], map(Role, grant["roles"])) for grant in raw)


def _namespace_problems(raw: Mapping[str, Any]) -> list[Problem]:
    places: list[tuple[tuple[str | int, ...], list[str]]] = []
    for index, entry in enumerate(raw.get("tokens", ())):
        for number, grant in enumerate(entry["grants"]):
            places.append((("tokens", index, "grants", number, "namespaces"), grant["namespaces"]))
    for index, entry in enumerate(raw.get("clients", ())):
        places.append((("clients", index, "namespaces"), entry["namespaces"]))
    for group, grants in raw.get("groups", {}).items():
        for number, grant in enumerate(grants):
            places.append((("groups", group, number, "namespaces"), grant["namespaces"]))
    return [
        Problem(json_pointer((*place, position)), problem)
        for place, patterns in places
        for position, pattern in enumerate(patterns)
        if (problem := namespace_pattern_problem(pattern)) is not None
    ]


def _duplicates(raw: Mapping[str, Any]) -> list[Problem]:
    """Two entries with one name (audit rows could not tell them apart) or one secret (which
    would it be?)."""
    problems: list[Problem] = []
    secrets: dict[str, str] = {}
    for kind in ("tokens", "clients", "scrapers"):
        names: set[str] = set()
        for index, entry in enumerate(raw.get(kind, ())):
            here = json_pointer((kind, index))
            if entry["name"] in names:
                problems.append(
                    Problem(here + "/name", f"{entry['name']!r} is named twice in {kind}")
                )
            names.add(entry["name"])
            secret = entry["secret_sha256"].lower()
            if secret in secrets:
                problems.append(
                    Problem(here + "/secret_sha256", f"the same secret as {secrets[secret]}")
                )
            secrets.setdefault(secret, here)
    return problems
