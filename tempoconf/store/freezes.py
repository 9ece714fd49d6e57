"""Freezes of a namespace (tempoconf.gates.freezes): start, end, the active one, the recent ones.

At most one active freeze per namespace: `start_freeze` looks for one in its write transaction
(SQLite takes the write lock at BEGIN; PostgreSQL takes a transaction-scoped advisory lock on the
namespace first), so two concurrent starts never both succeed.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, Row, insert, or_, select, text, update

from tempoconf.gates.freezes import Freeze, describe_freeze
from tempoconf.store._base import StoreBase, aware, row_record
from tempoconf.store.tables import NamespaceFreeze, table

__all__ = ["FREEZE", "FreezeActiveError", "FreezesMixin", "NotFrozenError"]

FREEZE = table(NamespaceFreeze)
# Advisory-lock keys of freezes: this prefix in the high 32 bits, the namespace's CRC in the low.
_PG_FREEZE_LOCK_PREFIX = 0x66727A00  # "frz\0"


class FreezeActiveError(RuntimeError):
    """The namespace is frozen already: a second freeze is refused (end the active one first)."""

    def __init__(self, active: Freeze) -> None:
        self.active = active
        super().__init__(
            f"{describe_freeze(active)}; end it first (`tempoconf freeze end --namespace "
            f"{active.namespace}`) to start another"
        )


class NotFrozenError(LookupError):
    """`freeze end` of a namespace that has no active freeze."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        super().__init__(f"namespace {namespace} is not frozen")


def _freeze(row: Row[tuple[object, ...]]) -> Freeze:
    return row_record(Freeze, row, by=row.started_by, end_reason=row.end_reason or "")


class FreezesMixin(StoreBase):
    """Freezes of namespaces (a part of Store)."""

    def _active_freeze(self, conn: Connection, namespace: str, now: datetime) -> Freeze | None:
        row = conn.execute(
            select(FREEZE)
            .where(
                FREEZE.c.namespace == namespace,
                FREEZE.c.ended_at.is_(None),
                or_(FREEZE.c.until.is_(None), FREEZE.c.until > now),
            )
            .order_by(FREEZE.c.id.desc())
            .limit(1)
        ).first()
        return _freeze(row) if row is not None else None

    def active_freeze(self, namespace: str) -> Freeze | None:
        """The namespace's active freeze, or None."""
        with self._read() as conn:
            return self._active_freeze(conn, namespace, self.now())

    def active_freezes(self, namespaces: Sequence[str] | None = None) -> list[Freeze]:
        """The active freeze of each of `namespaces` that has one (None: of every namespace), by
        namespace: one query, however many namespaces."""
        if namespaces is not None and not namespaces:
            return []
        query = select(FREEZE).where(
            FREEZE.c.ended_at.is_(None), or_(FREEZE.c.until.is_(None), FREEZE.c.until > self.now())
        )
        if namespaces is not None:
            query = query.where(FREEZE.c.namespace.in_(sorted(set(namespaces))))
        with self._read() as conn:
            rows = conn.execute(query.order_by(FREEZE.c.id)).all()
        # At most one is active per namespace (start_freeze); were there more, the newest wins,
        # as in active_freeze.
        newest = {row.namespace: row for row in rows}
        return [_freeze(newest[namespace]) for namespace in sorted(newest)]

    def start_freeze(
        self, namespace: str, *, reason: str, by: str, until: datetime | None = None
    ) -> Freeze:
        """Freeze `namespace` (until `until`, or until ended); FreezeActiveError when it is
        frozen already, ValueError when `until` is not in the future."""
        now = self.now()
        if until is not None and aware(until, "until") <= now:
            raise ValueError(f"until {until.isoformat()} is not in the future")
        with self._write() as conn:
            if conn.dialect.name == "postgresql":
                key = (_PG_FREEZE_LOCK_PREFIX << 32) | zlib.crc32(namespace.encode())
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
            active = self._active_freeze(conn, namespace, now)
            if active is not None:
                raise FreezeActiveError(active)
            result = conn.execute(
                insert(FREEZE)
                .values(
                    namespace=namespace,
                    reason=reason,
                    started_by=by,
                    started_at=now,
                    until=until,
                    end_reason="",
                )
                .returning(FREEZE.c.id)
            )
            freeze_id = result.scalar_one()
        return Freeze(
            id=freeze_id, namespace=namespace, reason=reason, by=by, started_at=now, until=until
        )

    def end_freeze(self, namespace: str, *, by: str, reason: str = "") -> Freeze:
        """End the namespace's active freeze now; NotFrozenError when it has none."""
        now = self.now()
        with self._write() as conn:
            active = self._active_freeze(conn, namespace, now)
            if active is None:
                raise NotFrozenError(namespace)
            conn.execute(
                update(FREEZE)
                .where(FREEZE.c.id == active.id)
                .values(ended_at=now, ended_by=by, end_reason=reason)
            )
        active.ended_at, active.ended_by, active.end_reason = now, by, reason
        return active

    def list_freezes(self, namespace: str | None = None, *, limit: int = 50) -> list[Freeze]:
        """Freezes newest first (active and ended), of one namespace or of all."""
        query = select(FREEZE).order_by(FREEZE.c.id.desc()).limit(max(limit, 0))
        if namespace is not None:
            query = query.where(FREEZE.c.namespace == namespace)
        with self._read() as conn:
            return [_freeze(row) for row in conn.execute(query).all()]
