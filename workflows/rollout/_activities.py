"""The rollout's activities, one typed function each: its input dataclass in, its output dataclass
out, and its options (timeouts, retry policy, heartbeat) here and nowhere else.

Each is scheduled by name (tempoconf.rollout.activity_io): workflows never import the activities. A
function that awaits schedules its activity in its first step, as a direct
`workflow.execute_activity` did, so the order of the commands a run issues is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from tempoconf.gates.applied_gate import AppliedGate
    from tempoconf.rollout.activity_io import (
        CHECK_APPLIED_ACTIVITY,
        CHECK_FREEZE_ACTIVITY,
        CHECK_HEALTH_ACTIVITY,
        INVALID_REQUEST_ERROR,
        NOTIFY_ACTIVITY,
        PREPARE_ACTIVITY,
        PROMOTE_ACTIVITY,
        PUBLISH_STAGE_ACTIVITY,
        RECORD_TRANSITION_ACTIVITY,
        RENEW_LEASES_ACTIVITY,
        REVERT_ACTIVITY,
        ROLLOUT_RUNNING_ERROR,
        WATCH_HEALTH_ACTIVITY,
        CheckAppliedInput,
        CheckFreezeInput,
        CheckFreezeResult,
        CheckHealthInput,
        GatedConfig,
        NotifyInput,
        PrepareInput,
        PromoteInput,
        PublishStageInput,
        PublishStageResult,
        RecordTransitionsInput,
        RenewLeasesInput,
        RenewLeasesResult,
        RevertInput,
        RevertResult,
        WatchHealthInput,
        WatchHealthResult,
    )
    from tempoconf.rollout.plan import RolloutPlan
    from tempoconf.rollout.progress import HealthReport


# Store writes are short; a store outage is retried with backoff rather than failing the rollout.
STORE_WRITE_TIMEOUT = timedelta(seconds=30)
# Store activities heartbeat every second while they run (activities.heartbeats): a worker lost in
# the middle of one is noticed within this and the activity retried on another worker, in seconds
# instead of at STORE_WRITE_TIMEOUT; a slow write on a live worker keeps heartbeating.
# Timeouts are not part of a replay's check: runs started before this replay as they were.
STORE_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# Retries of store work back off to this and no further: a rollout resumes within ~5 s of the
# store's return (at 30 s it took up to 27 s), at one attempt per 5 s per rollout while it is down.
# Unlimited attempts: the revert (the emergency path) retries until it succeeds, and the hold's
# health watch, which resumes from its heartbeat, for as long as the hold lasts (a worker deploy
# during a week-long hold is one more attempt, not a failure).
STORE_RETRY_CAP = timedelta(seconds=5)
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=STORE_RETRY_CAP,
)
# Prepare gives up (and the workflow fails) after a bounded number of attempts: an operator is
# waiting on the CLI for it, and the lock it may hold is released by the revert that follows.
# 12 attempts at the 5 s cap keep its window for a store outage at ~45 s, as before the cap.
PREPARE_RETRY = replace(
    STORE_RETRY,
    maximum_attempts=12,
    non_retryable_error_types=[INVALID_REQUEST_ERROR, ROLLOUT_RUNNING_ERROR],
)
# Webhooks: a few tries, then given up; they never hold up or fail the rollout.
WEBHOOK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
WEBHOOK_TIMEOUT = timedelta(seconds=10)
# A check's own retries happen inside the activity; the activity is retried only for worker loss.
HEALTH_CHECK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
# Health activities heartbeat every few seconds: a lost worker is noticed this soon, not at the
# start-to-close timeout (which for the hold's watch is the whole hold).
HEALTH_HEARTBEAT_TIMEOUT = timedelta(seconds=10)


@dataclass(frozen=True)
class _Options:
    """How an activity runs: how long an attempt may take, how it is retried, and how soon a
    silent one (its worker lost) is given up (None: it does not heartbeat)."""

    start_to_close_timeout: timedelta
    retry_policy: RetryPolicy
    heartbeat_timeout: timedelta | None = None


_STORE = _Options(STORE_WRITE_TIMEOUT, STORE_RETRY, STORE_HEARTBEAT_TIMEOUT)
_PREPARE = replace(_STORE, retry_policy=PREPARE_RETRY)
_WEBHOOK = _Options(WEBHOOK_TIMEOUT, WEBHOOK_RETRY)

_Result = TypeVar("_Result")


def gated_configs(plan: RolloutPlan) -> list[GatedConfig]:
    """The configs a gate activity looks at: a changeset's every config; none for a single config
    (the input's own namespace and path say which)."""
    return [GatedConfig(*config) for config in plan.configs()] if plan.changes else []


async def _execute(
    activity: str, arg: Any, result_type: type[_Result] | None, options: _Options, summary: str
) -> _Result:
    result: _Result = await workflow.execute_activity(
        activity,
        arg,
        result_type=result_type,
        start_to_close_timeout=options.start_to_close_timeout,
        heartbeat_timeout=options.heartbeat_timeout,
        retry_policy=options.retry_policy,
        summary=summary,
    )
    return result


async def prepare(arg: PrepareInput, *, summary: str) -> RolloutPlan:
    return await _execute(PREPARE_ACTIVITY, arg, RolloutPlan, _PREPARE, summary)


async def check_freeze(arg: CheckFreezeInput, *, summary: str) -> CheckFreezeResult:
    return await _execute(CHECK_FREEZE_ACTIVITY, arg, CheckFreezeResult, _STORE, summary)


async def publish_stage(arg: PublishStageInput, *, summary: str) -> PublishStageResult:
    return await _execute(PUBLISH_STAGE_ACTIVITY, arg, PublishStageResult, _STORE, summary)


async def check_applied(arg: CheckAppliedInput, *, summary: str) -> AppliedGate:
    # A read: a store outage holds the gate, never passes it.
    return await _execute(CHECK_APPLIED_ACTIVITY, arg, AppliedGate, _STORE, summary)


async def renew_leases(arg: RenewLeasesInput, *, summary: str) -> RenewLeasesResult:
    return await _execute(RENEW_LEASES_ACTIVITY, arg, RenewLeasesResult, _STORE, summary)


async def record_transitions(arg: RecordTransitionsInput, *, summary: str) -> None:
    await _execute(RECORD_TRANSITION_ACTIVITY, arg, None, _STORE, summary)


async def promote(arg: PromoteInput, *, summary: str) -> None:
    await _execute(PROMOTE_ACTIVITY, arg, None, _STORE, summary)


async def revert(arg: RevertInput, *, summary: str) -> RevertResult:
    return await _execute(REVERT_ACTIVITY, arg, RevertResult, _STORE, summary)


async def check_health(
    arg: CheckHealthInput, *, start_to_close_timeout: timedelta, summary: str
) -> HealthReport:
    options = _Options(start_to_close_timeout, HEALTH_CHECK_RETRY, HEALTH_HEARTBEAT_TIMEOUT)
    return await _execute(CHECK_HEALTH_ACTIVITY, arg, HealthReport, options, summary)


def watch_health(
    arg: WatchHealthInput, *, start_to_close_timeout: timedelta, summary: str
) -> workflow.ActivityHandle[WatchHealthResult]:
    """Started, not awaited: it runs beside the hold's timer, which cancels it (TRY_CANCEL: the
    rollout moves on at once; the checks only read, so an attempt that runs on changes nothing)."""
    return workflow.start_activity(
        WATCH_HEALTH_ACTIVITY,
        arg,
        result_type=WatchHealthResult,
        start_to_close_timeout=start_to_close_timeout,
        heartbeat_timeout=HEALTH_HEARTBEAT_TIMEOUT,
        retry_policy=STORE_RETRY,
        cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
        summary=summary,
    )


def notify(arg: NotifyInput, *, summary: str) -> workflow.ActivityHandle[None]:
    """Started, not awaited: a slow webhook never holds a stage."""
    return workflow.start_activity(
        NOTIFY_ACTIVITY,
        arg,
        start_to_close_timeout=_WEBHOOK.start_to_close_timeout,
        retry_policy=_WEBHOOK.retry_policy,
        summary=summary,
    )
