"""What clients applied: the version each client last reported as applied (written, and its
reload succeeded), and the error of its last failed apply (`POST /v1/reports` with `applied`).

Read by a stage's `min_applied` gate (activities/applied.py) and `tempoconf clients
--not-applied`. Written in batches by the API (api/applied.py), like the clients seen polling.
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import delete, select

from tempoconf.canonical import canonical_json
from tempoconf.store._base import StoreBase, aware, config_is, row_record, upsert_newer
from tempoconf.store.records import AppliedReport, AppliedState
from tempoconf.store.tables import ClientApplied, table

__all__ = ["APPLIED", "AppliedMixin"]

APPLIED = table(ClientApplied)


class AppliedMixin(StoreBase):
    """Applied versions per (namespace, path, client) (a part of Store)."""

    def record_applied(self, namespace: str, path: str, reports: list[AppliedReport]) -> None:
        """Upsert what clients reported applying, in one transaction. A success sets the applied
        version and clears the error; a failure keeps the last applied version and sets the error.
        A row only moves forward: a report older than the stored one changes nothing. Not a
        client-visible change: revision is not bumped."""
        newest: dict[str, AppliedReport] = {}
        success: dict[str, AppliedReport] = {}
        for report in sorted(reports, key=lambda report: report.at):
            newest[report.client] = report  # PostgreSQL refuses one row twice per statement
            if report.error is None:
                success[report.client] = report
        if not newest:
            return
        rows = []
        for client, report in newest.items():
            # A failure keeps the last success (this batch's, else the stored one: coalesce).
            applied = success.get(client)
            rows.append(
                {
                    "namespace": namespace,
                    "path": path,
                    "client": client,
                    "version": applied.version if applied is not None else None,
                    "applied_at": aware(applied.at, "at") if applied is not None else None,
                    "error": report.error,
                    "error_version": report.version if report.error is not None else None,
                    "reported_at": aware(report.at, "at"),
                    "channel": report.channel,
                    "labels": canonical_json(dict(report.labels)),
                }
            )
        with self._write() as conn:
            upsert_newer(conn, APPLIED, rows, newer="reported_at", kept=("version", "applied_at"))

    def applied_states(
        self, namespace: str, path: str, *, since: datetime | None = None
    ) -> list[AppliedState]:
        """What each client of the config last reported applying (those that reported at or after
        `since`, when given), sorted by client id."""
        scope = [*config_is(APPLIED, namespace, path)]
        if since is not None:
            scope.append(APPLIED.c.reported_at >= aware(since, "since"))
        with self._read(consistent=True) as conn:
            rows = conn.execute(select(APPLIED).where(*scope).order_by(APPLIED.c.client)).all()
        return [row_record(AppliedState, row, labels=json.loads(row.labels)) for row in rows]

    def prune_applied(self, older_than: datetime) -> int:
        """Forget clients whose last applied report is older than `older_than`; returns how many."""
        cutoff = aware(older_than, "older_than")
        with self._write() as conn:
            return int(conn.execute(delete(APPLIED).where(APPLIED.c.reported_at < cutoff)).rowcount)
