"""The change log: the configs each revision changed (table config_change), so a reader holding
the snapshots of one revision reloads only the configs changed since (docs/architecture.md, Data
flow). `bump_revision` (engine.py) writes it; it keeps the last CHANGE_LOG_RETENTION revisions.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, insert, select, update

from tempoconf.store.tables import ConfigChange, StoreRevision, table

__all__ = [
    "CHANGE_LOG_PRUNE_EVERY",
    "CHANGE_LOG_RETENTION",
    "changed_since",
    "read_change_floor",
    "record_changes",
]

CHANGE_LOG_RETENTION = 10_000
"""Revisions the change log keeps (read at each prune: tests set it lower). A reader further
behind than this reloads every snapshot."""

CHANGE_LOG_PRUNE_EVERY = 100
"""Every this many revisions, the bump that reaches one prunes the log (a few hundred rows)."""

_CHANGE = table(ConfigChange)
_REVISION = table(StoreRevision)


def record_changes(conn: Connection, revision: int, keys: Sequence[tuple[str, str]]) -> None:
    """Log `keys` (namespace, path) as changed at `revision`, in the bump's transaction; now and
    then prune what fell out of the window and raise the floor."""
    conn.execute(
        insert(_CHANGE),
        [{"revision": revision, "namespace": namespace, "path": path} for namespace, path in keys],
    )
    floor = revision - CHANGE_LOG_RETENTION
    if revision % CHANGE_LOG_PRUNE_EVERY == 0 and floor > 0:
        conn.execute(delete(_CHANGE).where(_CHANGE.c.revision <= floor))
        # The revision row is this transaction's already (the bump updated it): no other writer
        # moves the floor meanwhile.
        conn.execute(
            update(_REVISION)
            .where(_REVISION.c.id == 1, _REVISION.c.change_floor < floor)
            .values(change_floor=floor)
        )


def read_change_floor(conn: Connection) -> tuple[int, int]:
    """(revision, floor) as the caller's transaction sees them: the log holds every change in
    (floor, revision]."""
    row = conn.execute(
        select(_REVISION.c.revision, _REVISION.c.change_floor).where(_REVISION.c.id == 1)
    ).one()
    return int(row.revision), int(row.change_floor)


def changed_since(conn: Connection, since: int) -> tuple[int, set[tuple[str, str]]] | None:
    """The current revision and the configs changed after `since`, read in the caller's
    transaction (a consistent one: the revision and the rows from the same snapshot). None when
    the log cannot say: `since` was pruned (below the floor), is ahead of the store (another or
    a reset database), or a revision in between logged no config (a writer of a tempoconf from
    before the log, still running during an upgrade)."""
    revision, floor = read_change_floor(conn)
    if since < floor or since > revision:
        return None
    rows = conn.execute(
        select(_CHANGE.c.revision, _CHANGE.c.namespace, _CHANGE.c.path).where(
            _CHANGE.c.revision > since, _CHANGE.c.revision <= revision
        )
    ).all()
    if len({row.revision for row in rows}) != revision - since:
        return None
    return revision, {(row.namespace, row.path) for row in rows}
