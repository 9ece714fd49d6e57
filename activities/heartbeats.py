"""Heartbeats for the store activities, so a worker lost in the middle of a write costs seconds.

A store activity has no progress to report, only that its worker lives: while it runs (its store
call in a thread, waiting on a lock, say), `StoreHeartbeats` heartbeats every
`STORE_HEARTBEAT_EVERY_SECONDS`. The workflow gives these activities a short heartbeat timeout, so
Temporal retries an attempt whose worker died within that timeout instead of at the
start-to-close timeout; a slow write on a live worker keeps heartbeating and is never cut short by
it. Activities that heartbeat their own progress (the health checks: their details are what a
retry resumes from) are left alone, and so is any activity started without a heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from tempoconf.rollout import activity_io

__all__ = [
    "HEARTBEAT_THROTTLE",
    "STORE_ACTIVITIES",
    "STORE_HEARTBEAT_EVERY_SECONDS",
    "StoreHeartbeats",
]

STORE_ACTIVITIES = frozenset(
    {
        activity_io.PREPARE_ACTIVITY,
        activity_io.PUBLISH_STAGE_ACTIVITY,
        activity_io.RENEW_LEASES_ACTIVITY,
        activity_io.RECORD_TRANSITION_ACTIVITY,
        activity_io.PROMOTE_ACTIVITY,
        activity_io.REVERT_ACTIVITY,
        activity_io.CHECK_FREEZE_ACTIVITY,
        activity_io.CHECK_APPLIED_ACTIVITY,
    }
)
"""The activities whose work is store calls (and Temporal lookups), with no progress of their own."""

STORE_HEARTBEAT_EVERY_SECONDS = 2.5
"""How often a running store activity heartbeats, the first once it has run that long: a store
call that returns sooner (nearly all of them) sends none. Each beat is an RPC that Temporal
persists; beating at once sent one for every store activity (200 concurrent rollouts, 4,000 of
their 4,400 activities: the dev server's CPU for the run fell from 91 to 84 s without them).
A quarter of the 10 s heartbeat timeout the workflow gives these activities: three beats can
come late before a live worker's attempt is retried. The beats come from the worker's event
loop, which 200 concurrent rollouts on a loaded 2-core machine held up for seconds; with a 5 s
timeout such a run had 43 to 93 of its 4,400 activities retried for a late beat."""

HEARTBEAT_THROTTLE = timedelta(seconds=1)
"""The worker's `max_heartbeat_throttle_interval` (cli.worker.worker_options): a beat is sent on
within a second, not at the SDK's default of 80% of the timeout."""


async def _beat(every: float) -> None:
    while True:
        await asyncio.sleep(every)
        activity.heartbeat()


class _StoreHeartbeatsInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.activity_type not in STORE_ACTIVITIES or not info.heartbeat_timeout:
            return await self.next.execute_activity(input)
        beating = asyncio.create_task(_beat(STORE_HEARTBEAT_EVERY_SECONDS))
        try:
            return await self.next.execute_activity(input)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating


class StoreHeartbeats(Interceptor):
    """Worker interceptor: the store activities heartbeat while they run (see the module)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _StoreHeartbeatsInbound(next)
