"""What clients tell and show the store: health reports, and the clients seen polling."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from sqlalchemy import and_, delete, func, insert, select

from tempoconf.canonical import canonical_json
from tempoconf.store._base import (
    REPORT,
    SEEN,
    StoreBase,
    aware,
    config_is,
    row_record,
    upsert_newer,
)
from tempoconf.store.records import ReportTotals, SeenClient

__all__ = ["ClientsMixin"]


class ClientsMixin(StoreBase):
    """Client health reports and clients seen (a part of Store)."""

    # -- client health reports ---------------------------------------------------------------------
    def add_report(
        self,
        namespace: str,
        path: str,
        *,
        client: str,
        version: str,
        ok: int,
        failed: int,
        error: str | None = None,
        received_at: datetime | None = None,
        channel: str | None = None,
        labels: Mapping[str, str] | None = None,
        latency_count: int = 0,
        latency_sum_ms: float = 0.0,
    ) -> None:
        """Store one client's health report (received_at defaults to now). `channel`/`labels`:
        the identity the client polls with; a report naming neither has no identity of its own
        (see report_totals). `latency_count`/`latency_sum_ms`: how many operations the client
        timed and their durations added up, in milliseconds (0 and 0.0: no latency reported).
        Not a client-visible change: revision is not bumped."""
        if ok < 0 or failed < 0:
            raise ValueError(f"report counts must not be negative (ok={ok}, failed={failed})")
        _check_latency(latency_count, latency_sum_ms)
        at = aware(received_at, "received_at") if received_at is not None else self.now()
        named = channel is not None or labels is not None
        with self._write() as conn:
            conn.execute(
                insert(REPORT).values(
                    namespace=namespace,
                    path=path,
                    version=version,
                    client=client,
                    ok=ok,
                    failed=failed,
                    error=error or None,
                    received_at=at,
                    channel=channel,
                    labels=canonical_json(dict(labels or {})) if named else None,
                    latency_count=latency_count,
                    latency_sum_ms=float(latency_sum_ms),
                )
            )

    def report_totals(self, namespace: str, path: str, *, since: datetime) -> list[ReportTotals]:
        """Per client, version and reported identity: the sums of the config's reports received at
        or after `since`, with the identity the client last polled with (client_seen) beside it,
        sorted by client and version. Which of them belong to a stage's cohort is the health
        check's business (tempoconf.rollout.health_verdicts)."""
        scope = (*config_is(REPORT, namespace, path), REPORT.c.received_at >= aware(since, "since"))
        keys = (REPORT.c.client, REPORT.c.version, REPORT.c.channel, REPORT.c.labels)
        grouped = (
            select(
                *keys,
                func.coalesce(func.sum(REPORT.c.ok), 0).label("ok"),
                func.coalesce(func.sum(REPORT.c.failed), 0).label("failed"),
                func.count().label("reports"),
                func.coalesce(func.sum(REPORT.c.latency_count), 0).label("latency_count"),
                func.coalesce(func.sum(REPORT.c.latency_sum_ms), 0.0).label("latency_sum_ms"),
            )
            .where(*scope)
            .group_by(*keys)
            .subquery()
        )
        seen = and_(*config_is(SEEN, namespace, path), SEEN.c.client == grouped.c.client)
        with self._read(consistent=True) as conn:
            rows = conn.execute(
                select(
                    grouped,
                    SEEN.c.channel.label("seen_channel"),
                    SEEN.c.labels.label("seen_labels"),
                )
                .select_from(grouped.outerjoin(SEEN, seen))
                .order_by(grouped.c.client, grouped.c.version, grouped.c.channel, grouped.c.labels)
            ).all()
        return [
            ReportTotals(
                client=row.client,
                version=row.version,
                ok=int(row.ok),
                failed=int(row.failed),
                reports=int(row.reports),
                channel=row.channel,
                labels=json.loads(row.labels) if row.labels is not None else None,
                seen_channel=row.seen_channel,
                seen_labels=json.loads(row.seen_labels) if row.seen_labels is not None else None,
                latency_count=int(row.latency_count),
                latency_sum_ms=float(row.latency_sum_ms),
            )
            for row in rows
        ]

    def prune_reports(self, older_than: datetime) -> int:
        """Delete reports received before `older_than`; returns how many."""
        cutoff = aware(older_than, "older_than")
        with self._write() as conn:
            return int(conn.execute(delete(REPORT).where(REPORT.c.received_at < cutoff)).rowcount)

    # -- clients seen ------------------------------------------------------------------------------
    def record_seen_clients(self, namespace: str, path: str, clients: list[SeenClient]) -> None:
        """Upsert the clients the API saw polling a config, in one transaction. A row only moves
        forward: an entry older than the stored one changes nothing, so last_seen never goes back.
        Not a client-visible change: revision is not bumped."""
        latest: dict[str, SeenClient] = {}
        for seen in clients:
            kept = latest.get(seen.client)
            if kept is None or seen.last_seen >= kept.last_seen:
                # PostgreSQL refuses to upsert one row twice in one statement.
                latest[seen.client] = seen
        if not latest:
            return
        rows = [
            {
                "namespace": namespace,
                "path": path,
                "client": seen.client,
                "channel": seen.channel,
                "labels": canonical_json(dict(seen.labels)),
                "last_seen": aware(seen.last_seen, "last_seen"),
                "last_version": seen.last_version,
            }
            for seen in latest.values()
        ]
        with self._write() as conn:
            upsert_newer(conn, SEEN, rows, newer="last_seen", kept=("last_version",))

    def recent_clients(self, namespace: str, path: str, *, since: datetime) -> list[SeenClient]:
        """Clients seen polling the config at or after `since`, and clients that only sent health
        reports on it since then (with the identity their newest report named; channel None and
        labels {} when it named none), each once, sorted by client id. A client found in both keeps
        its polled identity and version, and the later of the two times."""
        cutoff = aware(since, "since")
        with self._read(consistent=True) as conn:
            polled = conn.execute(
                select(SEEN).where(*config_is(SEEN, namespace, path), SEEN.c.last_seen >= cutoff)
            ).all()
            scope = (*config_is(REPORT, namespace, path), REPORT.c.received_at >= cutoff)
            newest = (
                select(REPORT.c.client, func.max(REPORT.c.received_at).label("at"))
                .where(*scope)
                .group_by(REPORT.c.client)
                .subquery()
            )
            # The newest report of each client (its version); a tie on the time picks either.
            reported = conn.execute(
                select(
                    REPORT.c.client,
                    REPORT.c.version,
                    REPORT.c.received_at,
                    REPORT.c.channel,
                    REPORT.c.labels,
                )
                .join(
                    newest,
                    and_(REPORT.c.client == newest.c.client, REPORT.c.received_at == newest.c.at),
                )
                .where(*scope)
            ).all()
        clients = {
            row.client: row_record(SeenClient, row, labels=json.loads(row.labels)) for row in polled
        }
        for row in reported:
            known = clients.get(row.client)
            if known is None:
                clients[row.client] = SeenClient(
                    client=row.client,
                    channel=row.channel,
                    labels=json.loads(row.labels) if row.labels is not None else {},
                    last_seen=row.received_at,
                    last_version=row.version,
                )
            elif row.received_at > known.last_seen:
                clients[row.client] = replace(known, last_seen=row.received_at)
        return [clients[client] for client in sorted(clients)]

    def prune_seen_clients(self, older_than: datetime) -> int:
        """Forget clients last seen before `older_than`; returns how many."""
        cutoff = aware(older_than, "older_than")
        with self._write() as conn:
            return int(conn.execute(delete(SEEN).where(SEEN.c.last_seen < cutoff)).rowcount)


def _check_latency(count: int, sum_ms: float) -> None:
    """ValueError unless the latency figures are a count and a finite sum, neither negative, and
    a sum above 0 comes with a count (no timed operation has no duration)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"report latency_count must be an int >= 0, not {count!r}")
    if (
        isinstance(sum_ms, bool)
        or not isinstance(sum_ms, (int, float))
        or not math.isfinite(sum_ms)
        or sum_ms < 0
    ):
        raise ValueError(f"report latency_sum_ms must be a finite number >= 0, not {sum_ms!r}")
    if sum_ms > 0 and count == 0:
        raise ValueError(
            f"report latency_sum_ms={sum_ms!r} with latency_count=0: a sum needs timed operations"
        )
