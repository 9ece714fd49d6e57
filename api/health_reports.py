"""Health reports (`POST /v1/reports`) into the store: written at once, as the health checks read
them; while the store is down, kept in memory (api/pending.py) and written by a flush once it is
back, with the time they were received. So a 202 always means the report will be counted. When
too many are kept, a report is refused with 503 and `Retry-After` instead: the SDK and the agent
send it again later (never a 202 that is then lost)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tempoconf.api.pending import PendingWrites, flush_every
from tempoconf.api.seen import SEEN_FLUSH_INTERVAL
from tempoconf.store import Store, refused_data

__all__ = [
    "MAX_UNWRITTEN_REPORTS",
    "REPORT_RETRY_AFTER_SECONDS",
    "ReceivedReport",
    "UnwrittenReports",
    "flush_reports",
    "record_unwritten_reports",
    "store_report",
]

MAX_UNWRITTEN_REPORTS = 100_000
"""Health reports kept while the store is down; past that, reports are refused with 503."""
REPORT_RETRY_AFTER_SECONDS = 5
"""`Retry-After` of a report refused because too many are waiting for the store."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReceivedReport:
    """One health report as `Store.add_report` takes it, stamped with when it was received."""

    namespace: str
    path: str
    client: str
    version: str
    ok: int
    failed: int
    received_at: datetime
    error: str | None = None
    channel: str | None = None
    labels: Mapping[str, str] | None = None
    latency_count: int = 0
    latency_sum_ms: float = 0.0


@dataclass(eq=False)
class UnwrittenReports:
    """Health reports received while the store was down, oldest first (each its own key)."""

    pending: PendingWrites[int, ReceivedReport] = field(
        default_factory=lambda: PendingWrites(MAX_UNWRITTEN_REPORTS)
    )
    _numbers: itertools.count[int] = field(default_factory=itertools.count)
    one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Where the store takes one write at a time (SQLite), reports wait their turn here rather
    than in the store's lock: once one write has failed, those behind it are kept at once
    instead of each waiting out the busy timeout (5 s apiece)."""

    def keep(self, report: ReceivedReport) -> bool:
        """Keep `report` for a later flush; False when full (the caller refuses it: 503)."""
        if self.pending.full:
            return False
        self.pending.add(next(self._numbers), report)
        return True


def _write(store: Store, report: ReceivedReport) -> None:
    store.add_report(
        report.namespace,
        report.path,
        client=report.client,
        version=report.version,
        ok=report.ok,
        failed=report.failed,
        error=report.error,
        received_at=report.received_at,
        channel=report.channel,
        labels=report.labels,
        latency_count=report.latency_count,
        latency_sum_ms=report.latency_sum_ms,
    )


async def store_report(store: Store, unwritten: UnwrittenReports, report: ReceivedReport) -> bool:
    """Write `report`, or keep it for a later flush when the store is down (or reports are
    already waiting for it: they stay in order, and the request does not wait on a dead store).
    False when it can be neither: the caller refuses it."""
    serial = store.dialect == "sqlite"
    async with unwritten.one_at_a_time if serial else contextlib.nullcontext():
        if not unwritten.pending:
            try:
                await asyncio.to_thread(_write, store, report)
                return True
            except Exception as exc:
                if refused_data(exc):  # writing it again fails again: the caller's 500, as before
                    raise
                logger.warning(
                    "cannot write a health report of %s/%s now (kept for the next try): %s",
                    report.namespace,
                    report.path,
                    exc,
                )
        return unwritten.keep(report)


async def flush_reports(unwritten: UnwrittenReports, store: Store) -> int:
    """Write the health reports kept while the store was down, oldest first, until one fails
    (the store still down: the rest stay for the next flush); returns how many were written."""
    batch = unwritten.pending.snapshot()
    if not batch:
        return 0

    def write() -> tuple[int, dict[int, ReceivedReport]]:
        written = 0
        done: dict[int, ReceivedReport] = {}
        for number, report in batch.items():
            try:
                _write(store, report)
            except Exception as exc:
                if refused_data(exc):
                    logger.warning(
                        "dropped a health report of %s/%s: the store refuses it: %s",
                        report.namespace,
                        report.path,
                        exc,
                    )
                    done[number] = report
                    continue
                logger.warning(
                    "cannot write %d health reports (kept for the next try): %s",
                    len(batch) - len(done),
                    exc,
                )
                break
            done[number] = report
            written += 1
        return written, done

    written, done = await asyncio.to_thread(write)
    unwritten.pending.forget_written(done)
    return written


async def record_unwritten_reports(
    unwritten: UnwrittenReports,
    store: Store,
    *,
    stop: asyncio.Event,
    interval: float = SEEN_FLUSH_INTERVAL,
) -> None:
    """Flush every `interval` seconds until `stop` is set, then once more."""
    await flush_every(
        lambda: flush_reports(unwritten, store), stop=stop, interval=interval, what="health reports"
    )
    if unwritten.pending:
        logger.warning(
            "%d health reports not written: the store is unreachable", len(unwritten.pending)
        )
