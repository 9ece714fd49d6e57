"""What clients report applying (`POST /v1/reports` with `applied`), written to the store in
batches like the clients seen polling (api/seen.py): the report route records it in memory (one
dict assignment), `record_applied_reports` upserts it every few seconds in a thread, so a report
never waits for that write. The gate on applied versions reads it (activities/applied.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from tempoconf.api.seen import SEEN_FLUSH_INTERVAL
from tempoconf.store import AppliedReport, Store, refused_data

__all__ = [
    "APPLIED_RETENTION",
    "MAX_PENDING",
    "PendingApplied",
    "flush_applied",
    "record_applied_reports",
]

APPLIED_RETENTION = timedelta(days=7)
"""Clients that have not reported an apply for this long are forgotten (as clients seen)."""

logger = logging.getLogger(__name__)


MAX_PENDING = 100_000
"""Apply reports kept between two flushes (and while the store is down); past that, new ones are
dropped and counted (`PendingApplied.dropped`): memory stays bounded under a flood."""


class PendingApplied:
    """Apply reports received since the last flush, per config, in the order received (the
    store merges a client's several reports: its newest success, and a failure after it)."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self._pending: dict[tuple[str, str], list[AppliedReport]] = {}
        self._count = 0
        self._limit = limit
        self.dropped = 0

    def add(self, namespace: str, path: str, report: AppliedReport) -> None:
        if self._count >= self._limit:
            self.dropped += 1
            return
        self._pending.setdefault((namespace, path), []).append(report)
        self._count += 1

    def take(self) -> dict[tuple[str, str], list[AppliedReport]]:
        """The reports received since the last call; recording goes on into a fresh dict."""
        pending, self._pending, self._count = self._pending, {}, 0
        return pending


async def flush_applied(pending: PendingApplied, store: Store) -> int:
    """Write the apply reports received since the last flush; returns how many. A config whose
    write fails (the store is down) is logged and kept for the next flush: a client reports an
    apply once per change, so a lost report would leave it a straggler."""
    batches = pending.take()
    if not batches:
        return 0

    def write() -> tuple[int, dict[tuple[str, str], list[AppliedReport]]]:
        written = 0
        failed: dict[tuple[str, str], list[AppliedReport]] = {}
        for (namespace, path), reports in batches.items():
            try:
                store.record_applied(namespace, path, reports)
            except Exception as exc:  # the store may be down: keep serving, try the next config
                if refused_data(exc):  # retrying cannot help (checked at the edge: not expected)
                    logger.warning(
                        "dropped %d apply reports of %s/%s: the store refuses them: %s",
                        len(reports),
                        namespace,
                        path,
                        exc,
                    )
                    continue
                logger.warning(
                    "cannot record %d apply reports of %s/%s (kept for the next try): %s",
                    len(reports),
                    namespace,
                    path,
                    exc,
                )
                failed[(namespace, path)] = reports
                continue
            written += len(reports)
        return written, failed

    written, failed = await asyncio.to_thread(write)
    for (namespace, path), reports in failed.items():  # on the loop's thread, as add() always is
        for report in reports:
            pending.add(namespace, path, report)
    return written


async def record_applied_reports(
    pending: PendingApplied,
    store: Store,
    *,
    stop: asyncio.Event,
    interval: float = SEEN_FLUSH_INTERVAL,
) -> None:
    """Flush every `interval` seconds until `stop` is set, then once more (stopped by an event,
    not by cancellation: a flush cut off mid-write would lose its batch)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        try:
            await flush_applied(pending, store)
        except Exception:  # a bug, not the store (handled per config): log it, keep the loop
            logger.exception("cannot flush the apply reports")
