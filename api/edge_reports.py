"""`ReportRelay`: the health and apply reports an edge's clients POST, forwarded upstream in batches.

A report is accepted at once (202) and queued; every `interval` seconds the queue is sent upstream
(`POST /v1/reports`, a few at a time over one keep-alive connection). Reports of the same client,
config, version and identity queued within one interval are merged into one (their `ok`,
`failed`, `latency_count` and `latency_sum_ms` added up; the last error text kept): what the
health checks compute from them, error ratios, mean latencies and reporting clients per cohort, is
the same, and a fleet's reports cost the upstream one
request per client per interval at most. While the upstream is unreachable the queue is kept, up
to `max_pending` reports (then new ones are dropped and counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from tempoconf.backoff import Backoff

__all__ = ["DEFAULT_FLUSH_INTERVAL", "DEFAULT_MAX_PENDING", "ReportRelay", "RelayCounts"]

DEFAULT_FLUSH_INTERVAL = 1.0
"""Seconds between two batches sent upstream."""
DEFAULT_MAX_PENDING = 100_000
"""Distinct reports kept while the upstream is unreachable."""
_CONCURRENCY = 8
"""Reports of one batch in flight at once."""

logger = logging.getLogger(__name__)

_Key = tuple[Any, ...]
_LATENCY_FIELDS = ("latency_count", "latency_sum_ms")


@dataclass
class RelayCounts:
    """What the relay did, for /metrics."""

    forwarded: int = 0
    refused: int = 0
    """Answered 4xx by the upstream (its verdict is final: the report is dropped)."""
    dropped: int = 0
    """Not kept: the queue was full."""


def _key(report: dict[str, Any]) -> _Key:
    labels = report.get("labels") or {}
    return (
        report["namespace"],
        report["path"],
        report["client"],
        report["version"],
        report.get("channel"),
        tuple(sorted(labels.items())),
        report.get("applied"),
        report.get("apply_error"),
    )


class ReportRelay:
    """Queue reports (`add`), send them upstream in batches (`running()`)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        interval: float = DEFAULT_FLUSH_INTERVAL,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self._http = http
        self._interval = interval
        self._max_pending = max_pending
        self._pending: dict[_Key, dict[str, Any]] = {}
        self.counts = RelayCounts()
        self.last_error: BaseException | None = None
        """Why the last report that could not be sent was not (kept for the log)."""

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, report: dict[str, Any]) -> bool:
        """Queue one validated report (the JSON body, defaults filled); False if dropped."""
        key = _key(report)
        queued = self._pending.get(key)
        if queued is not None:
            queued["ok"] += report["ok"]
            queued["failed"] += report["failed"]
            for field in _LATENCY_FIELDS:
                # Both or neither (ReportBody): a merged report carries them if either did.
                if field in report:
                    queued[field] = queued.get(field, 0) + report[field]
            if report.get("error") is not None:
                queued["error"] = report["error"]
            return True
        if len(self._pending) >= self._max_pending:
            self.counts.dropped += 1
            return False
        self._pending[key] = dict(report)
        return True

    async def forward(self, report: dict[str, Any]) -> httpx.Response:
        """Send one report upstream now and return its answer (httpx.HTTPError if unreachable)."""
        return await self._http.post("/v1/reports", json=report, timeout=10.0)

    async def flush(self) -> bool:
        """Send every queued report; True if the upstream took (or refused) all of them. What could
        not be sent is queued again, merged with what arrived meanwhile."""
        batch, self._pending = self._pending, {}
        if not batch:
            return True
        semaphore = asyncio.Semaphore(_CONCURRENCY)
        failed: list[dict[str, Any]] = []

        async def send(report: dict[str, Any]) -> None:
            async with semaphore:
                try:
                    response = await self.forward(report)
                except httpx.HTTPError as exc:
                    failed.append(report)
                    self.last_error = exc
                    return
            if response.status_code >= 500 or response.status_code in (401, 408, 429):
                failed.append(report)  # the upstream (or our token) may recover: keep it
                self.last_error = RuntimeError(f"upstream answered {response.status_code}")
            elif response.status_code >= 400:
                self.counts.refused += 1
                logger.warning(
                    "edge: the upstream refused a report (%s): %s",
                    response.status_code,
                    response.text[:200],
                )
            else:
                self.counts.forwarded += 1

        await asyncio.gather(*(send(report) for report in batch.values()))
        for report in failed:
            self.add(report)
        return not failed

    async def run(self) -> None:
        """Flush every interval, backing off while the upstream fails, until cancelled."""
        backoff = Backoff(base=self._interval, cap=max(self._interval, 30.0))
        while True:
            await asyncio.sleep(self._interval)
            if await self.flush():
                if backoff.failures:
                    logger.info("edge: reports reach the upstream again")
                backoff.reset()
            else:
                if not backoff.failures:
                    logger.warning(
                        "edge: cannot forward reports upstream (%d queued): %s",
                        self.pending,
                        self.last_error,
                    )
                await asyncio.sleep(backoff.next())

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ReportRelay]:
        """Forward in the background while inside; on exit, one last flush (bounded)."""
        task = asyncio.create_task(self.run(), name="tempoconf-edge-reports")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            with contextlib.suppress(Exception, TimeoutError):
                async with asyncio.timeout(5.0):
                    await self.flush()
