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
from tempoconf.store import AppliedReport, Store

__all__ = [
    "APPLIED_RETENTION",
    "PendingApplied",
    "flush_applied",
    "record_applied_reports",
]

APPLIED_RETENTION = timedelta(days=7)
"""Clients that have not reported an apply for this long are forgotten (as clients seen)."""

logger = logging.getLogger(__name__)


class PendingApplied:
    """Apply reports received since the last flush, per config, in the order received (the
    store merges a client's several reports: its newest success, and a failure after it)."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], list[AppliedReport]] = {}

    def add(self, namespace: str, path: str, report: AppliedReport) -> None:
        self._pending.setdefault((namespace, path), []).append(report)

    def take(self) -> dict[tuple[str, str], list[AppliedReport]]:
        """The reports received since the last call; recording goes on into a fresh dict."""
        pending, self._pending = self._pending, {}
        return pending


async def flush_applied(pending: PendingApplied, store: Store) -> int:
    """Write the apply reports received since the last flush; returns how many. A config whose
    write fails is logged and skipped (its clients report again at their next change)."""
    batches = pending.take()
    if not batches:
        return 0

    def write() -> int:
        written = 0
        for (namespace, path), reports in batches.items():
            try:
                store.record_applied(namespace, path, reports)
            except Exception as exc:  # the store may be down: keep serving, try the next config
                logger.warning(
                    "cannot record %d apply reports of %s/%s: %s",
                    len(reports),
                    namespace,
                    path,
                    exc,
                )
                continue
            written += len(reports)
        return written

    return await asyncio.to_thread(write)


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
