"""The audit log: every change recorded with who, why and when (writes elsewhere add their own
rows in their transaction; this is the log read as a whole and events recorded on their own)."""

from __future__ import annotations

import json
from typing import Unpack

from sqlalchemy import select

from tempoconf.store._base import AUDIT, StoreBase, config_is, row_record, write_audit
from tempoconf.store.records import AuditEntry, AuditEvent

__all__ = ["AuditMixin"]


class AuditMixin(StoreBase):
    """Recording events and reading a config's history (a part of Store)."""

    # -- audit -------------------------------------------------------------------------------------
    def record_event(self, namespace: str, path: str, **event: Unpack[AuditEvent]) -> bool:
        """Append to the audit log; False (nothing written) when event_key was recorded before."""
        with self._write() as conn:
            return write_audit(conn, namespace, path, at=self.now(), **event)

    def history(self, namespace: str, path: str, *, limit: int = 100) -> list[AuditEntry]:
        """Audit log of a config, oldest first (the last `limit` entries)."""
        with self._read() as conn:
            rows = conn.execute(
                select(AUDIT)
                .where(*config_is(AUDIT, namespace, path))
                .order_by(AUDIT.c.id.desc())
                .limit(max(limit, 0))
            ).all()
        return [
            row_record(AuditEntry, row, details=json.loads(row.details)) for row in reversed(rows)
        ]
