"""What clients report applying (`POST /v1/reports` with `applied`), written to the store in
batches like the clients seen polling (api/seen.py): the report route records it in memory (one
dict assignment), `record_applied_reports` upserts it every few seconds in a thread, so a report
never waits for that write. The gate on applied versions reads it (activities/applied.py).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from tempoconf.api.pending import PendingWrites, flush_every
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
"""Apply reports kept between two flushes (and while the store is down); past that, the oldest
are dropped and counted (`PendingApplied.dropped`): memory stays bounded under a flood."""

AppliedKey = tuple[str, str, str, bool]
"""(namespace, path, client, a success): the store keeps a client's newest success and a failure
after it, so its newest success and its newest failure are all a flush needs."""


class PendingApplied(PendingWrites[AppliedKey, AppliedReport]):
    """Apply reports received and not written yet (api/pending.py)."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        super().__init__(limit)

    def add_report(self, namespace: str, path: str, report: AppliedReport) -> None:
        self.add((namespace, path, report.client, report.error is None), report)


async def flush_applied(pending: PendingApplied, store: Store) -> int:
    """Write the apply reports pending; returns how many. A config whose write fails (the store
    is down) is logged and its reports stay pending for the next flush: a client reports an
    apply once per change, so a lost report would leave it a straggler."""
    dropped = pending.newly_dropped()
    if dropped:
        logger.warning(
            "dropped the %d oldest apply reports not written yet: more than %d pending",
            dropped,
            pending.limit,
        )
    batch = pending.snapshot()
    if not batch:
        return 0
    configs: dict[tuple[str, str], dict[AppliedKey, AppliedReport]] = {}
    for key, report in batch.items():
        configs.setdefault((key[0], key[1]), {})[key] = report

    def write() -> tuple[int, dict[AppliedKey, AppliedReport]]:
        written = 0
        done: dict[AppliedKey, AppliedReport] = {}
        for (namespace, path), reports in configs.items():
            try:
                store.record_applied(namespace, path, list(reports.values()))
            except Exception as exc:  # the store may be down: keep serving, try the next config
                if refused_data(exc):  # retrying cannot help (checked at the edge: not expected)
                    logger.warning(
                        "dropped %d apply reports of %s/%s: the store refuses them: %s",
                        len(reports),
                        namespace,
                        path,
                        exc,
                    )
                    done.update(reports)
                    continue
                logger.warning(
                    "cannot record %d apply reports of %s/%s (kept for the next try): %s",
                    len(reports),
                    namespace,
                    path,
                    exc,
                )
                continue
            written += len(reports)
            done.update(reports)
        return written, done

    written, done = await asyncio.to_thread(write)
    pending.forget_written(done)  # on the loop's thread, as add() always is
    return written


async def record_applied_reports(
    pending: PendingApplied,
    store: Store,
    *,
    stop: asyncio.Event,
    interval: float = SEEN_FLUSH_INTERVAL,
) -> None:
    """Flush every `interval` seconds until `stop` is set, then once more."""
    await flush_every(
        lambda: flush_applied(pending, store), stop=stop, interval=interval, what="apply reports"
    )
