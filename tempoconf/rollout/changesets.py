"""Changesets: several configs rolled out by one rollout (docs/contract.md, Changesets).

A changeset is named by the set of its configs, in any order: `changeset_id` is the first 16 hex
characters of the SHA-256 of its configs' `namespace/path` lines, sorted and joined by newlines.
Its workflow id (what `tempoconf rollout start` uses) and its bucketing key are both
`changeset:<changeset_id>`, so every percentile stage of a changeset puts a client in the same
bucket for all of its configs: it gets all the new values or none.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = [
    "CHANGESET_PREFIX",
    "change_event_key",
    "changeset_id",
    "changeset_key",
    "changeset_workflow_id",
]

CHANGESET_PREFIX = "changeset:"


def changeset_id(configs: Iterable[tuple[str, str]]) -> str:
    """16 hex characters naming the set of (namespace, path) configs (their order does not count)."""
    lines = sorted({f"{namespace}/{path}" for namespace, path in configs})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def changeset_key(configs: Iterable[tuple[str, str]]) -> str:
    """`changeset:<changeset_id>`: what a changeset's percentile stages bucket by, in place of a
    config's path (bucket(changeset_key, client_id), tempoconf.resolution.bucketing)."""
    return CHANGESET_PREFIX + changeset_id(configs)


def changeset_workflow_id(configs: Iterable[tuple[str, str]]) -> str:
    """The workflow id the tempoconf CLI gives a changeset (any id works for the engine): the
    same as its bucketing key."""
    return changeset_key(configs)


def change_event_key(base: str, namespace: str, path: str, *, changeset: bool) -> str:
    """The audit idempotency key of one config's row of a step: a single config's step keeps the
    step's key (`run:publish:0`), a changeset's adds the config (`run:publish:0@ns/path`), since a
    key is unique across the whole audit log."""
    return f"{base}@{namespace}/{path}" if changeset else base
