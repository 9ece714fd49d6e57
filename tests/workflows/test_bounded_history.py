"""A rollout's history stays bounded: a stage costs the same events whatever its hold's length or
its checks' interval, and what still grows (lease renewals over weeks) is cut by continue-as-new,
with the lock, the leases, the status and the audit trail carried across.

A Temporal server does not skip time while an activity runs, and the hold's interval checks run
in one activity for the whole hold: a day of checks every 15 s would take a day. The day-long
test gives that activity a clock that runs its schedule in seconds (`FastClock`); the workflow's
own timers skip time as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.testing._timeskipping import TimeSkipper, TimeSkippingConfig

from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE
from tests.fixtures.services import http_judge
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.store.helpers import snapshot_of
from tests.workflows.test_rollout import NAMESPACE, example_request, make_stable, unique_path

EVENT_BUDGET = 10_000
"""Temporal warns from 10,240 events in a run and terminates the run at 51,200."""


class FastClock:
    """The system clock, moved forward by every sleep at once: a day of checks every 15 s runs
    in seconds (each check still runs for real, against the store)."""

    def __init__(self) -> None:
        self._ahead = 0.0

    def now(self) -> float:
        return time.time() + self._ahead

    async def sleep(self, seconds: float) -> None:
        self._ahead += seconds
        await asyncio.sleep(0)


@dataclass
class Rollouts:
    """A worker of its own (a fast health clock, a low continue-as-new bound) and its store."""

    client: Client
    store: Store
    task_queue: str

    async def start(self, request: dict[str, Any]) -> WorkflowHandle[Any, Any]:
        return await self.client.start_workflow(
            WORKFLOW_TYPE,
            request,
            id=f"rollout-bounded-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
        )


def _skipper(env: WorkflowEnvironment) -> Client:
    # Weeks of half-hourly lease renewals are hundreds of skips: more than the server's default 200.
    return TimeSkipper(env.client, config=TimeSkippingConfig(max_session_skip_count=5000)).client


@contextlib.asynccontextmanager
async def _rollouts(
    temporal_env: WorkflowEnvironment, tmp_path: Path, *, continue_as_new_after_events: int
) -> AsyncIterator[Rollouts]:
    from tempoconf.cli.worker import build_worker

    store = Store(f"sqlite:///{tmp_path / 'tempoconf.db'}", migrate=True)
    task_queue = f"tempoconf-bounded-{uuid.uuid4().hex[:8]}"
    worker = build_worker(
        temporal_env.client,
        store,
        task_queue=task_queue,
        continue_as_new_after_events=continue_as_new_after_events,
        health_clock=FastClock(),
    )
    async with worker:
        yield Rollouts(_skipper(temporal_env), store, task_queue)
    store.close()


@pytest_asyncio.fixture
async def rollouts(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Rollouts]:
    async with _rollouts(temporal_env, tmp_path, continue_as_new_after_events=1000) as made:
        yield made


@pytest_asyncio.fixture
async def short_runs(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Rollouts]:
    """Runs cut at 300 events: a day of half-hourly renewals spans several runs, and a task that
    replays its run's history (a worker restarted, a run evicted from the cache) stays cheap."""
    async with _rollouts(temporal_env, tmp_path, continue_as_new_after_events=300) as made:
        yield made


async def runs_of(handle: WorkflowHandle[Any, Any]) -> list[list[Any]]:
    """The history events of each run of the rollout's chain, first run first."""
    client = handle._client
    chain: list[list[Any]] = []
    run_id: str | None = handle.first_execution_run_id or handle.run_id
    while run_id:
        events = [
            event
            async for event in client.get_workflow_handle(
                handle.id, run_id=run_id
            ).fetch_history_events()
        ]
        chain.append(events)
        last = events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else None
        )
    return chain


async def result_within_budget(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    """The rollout's result; fails as soon as a run of it has more events than the budget (a
    history that grows with the hold would take minutes to get there, then hours to finish)."""
    result = asyncio.ensure_future(rollout_result(handle))
    try:
        while not result.done():
            description = await handle._client.get_workflow_handle(handle.id).describe()
            assert description.history_length < EVENT_BUDGET, (
                f"run {description.run_id} has {description.history_length} events"
            )
            await asyncio.wait({result}, timeout=1.0)
        return await result
    finally:
        result.cancel()


def activities_named(events: list[Any], name: str) -> list[Any]:
    return [
        event
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == name
    ]


def completed_result(events: list[Any], scheduled: Any) -> Any:
    for event in events:
        attributes = event.activity_task_completed_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and attributes.scheduled_event_id == scheduled.event_id
        ):
            return json.loads(attributes.result.payloads[0].data)
    raise AssertionError(f"activity {scheduled.event_id} did not complete")


def _scheduled_event_id(event: Any) -> int:
    """The activity an activity's end event is about."""
    for attributes in (
        event.activity_task_completed_event_attributes,
        event.activity_task_failed_event_attributes,
        event.activity_task_canceled_event_attributes,
        event.activity_task_timed_out_event_attributes,
    ):
        if attributes.scheduled_event_id:
            return int(attributes.scheduled_event_id)
    return 0


def first_run_id(handle: WorkflowHandle[Any, Any]) -> str:
    run_id = handle.first_execution_run_id or handle.run_id
    assert run_id
    return run_id


# -- a stage's cost does not grow with its hold ---------------------------------------------------


@pytest.mark.soak
async def test_a_day_long_hold_checked_every_15s_is_promoted_within_the_event_budget(
    rollouts: Rollouts,
) -> None:
    path = unique_path()
    check = {"kind": "reports", "max_error_ratio": 0.1, "interval": "15s", "on_no_data": "pass"}
    handle = await rollouts.start(
        example_request(
            path,
            stages=[{"channel": "canary", "cooldown": "24h", "expiration": "1h"}],
            health=[check],
        )
    )
    result = await result_within_budget(handle)
    assert result["outcome"] == "promoted", result
    chain = await runs_of(handle)
    assert all(len(events) < EVENT_BUDGET for events in chain), [len(e) for e in chain]
    # Every check of the day ran (in the watch, on its fast clock): 24 h / 15 s of them.
    (watch,) = [w for events in chain for w in activities_named(events, "watch_stage_health")]
    events = next(events for events in chain if watch in events)
    assert completed_result(events, watch)["rounds"] >= 5700


def hold_timer_seconds(events: list[Any]) -> float:
    """The longest durable timer of the run: the hold's (lease renewals are half an hour apart)."""
    return max(
        event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
        for event in events
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    )


async def test_a_stage_costs_the_same_events_for_a_15s_and_a_30s_hold(
    rollout_harness: RolloutHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked every second, on the real clock: the watch runs through each hold for real."""
    check = {"kind": "reports", "max_error_ratio": 0.1, "interval": "1s", "on_no_data": "pass"}
    # Each round of the reports check reads the config's reports once: the rounds of each hold,
    # counted where the check reads them (a cancelled watch returns no result to count them in).
    store = rollout_harness.store
    reads: Counter[str] = Counter()
    read_reports = store.report_totals

    def counted(namespace: str, path: str, *, since: datetime) -> Any:
        reads[path] += 1
        return read_reports(namespace, path, since=since)

    monkeypatch.setattr(store, "report_totals", counted)

    async def a_hold(seconds: int) -> tuple[int, float, int]:
        path = unique_path()
        handle = await rollout_harness.start(
            example_request(
                path, stages=[{"channel": "canary", "cooldown": f"{seconds}s"}], health=[check]
            )
        )
        assert (await rollout_result(handle))["outcome"] == "promoted"
        (events,) = await runs_of(handle)
        return len(events), hold_timer_seconds(events), reads[path]

    (short, short_timer, short_reads), (long, long_timer, long_reads) = await asyncio.gather(
        a_hold(15), a_hold(30)
    )
    assert abs(long - short) <= 6, (short, long)  # a handful: heartbeat and timer timing
    # The holds lasted their cooldowns: the timer is set to the time left once the hold's first
    # store write is done (generous: a loaded machine's write takes seconds).
    assert 15 / 2 < short_timer <= 15 and 30 / 2 < long_timer <= 30, (short_timer, long_timer)
    # The watch checked through each hold, about once a second (the end-of-hold check is one more
    # read): not just once, and twice as often in the hold twice as long.
    assert short_reads >= 15 / 2 and long_reads >= 30 / 2, (short_reads, long_reads)
    assert long_reads > short_reads, (short_reads, long_reads)


# -- a halt during a long hold ------------------------------------------------------------------


async def test_a_halt_during_a_long_hold_reverts_at_once(rollout_harness: RolloutHarness) -> None:
    """The halt does not wait for the watch's check in flight (the judge takes 3 s to answer)."""
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    with http_judge() as judge:
        check = {"kind": "http", "url": judge + "/slow", "timeout": "10s", "interval": "1s"}
        handle = await rollout_harness.start(
            example_request(path, stages=[{"channel": "canary", "cooldown": "24h"}], health=[check])
        )

        async def watching() -> bool:
            description = await handle.describe()
            return any(
                pending.activity_type.name == "watch_stage_health"
                for pending in description.raw_description.pending_activities
            )

        await eventually(watching, what="the hold's interval checks to run")
        await handle.signal("halt", {"reason": "wrong value", "by": "oncall"})
        result = await rollout_result(handle)
    assert result["outcome"] == "halted", result
    assert store.get_stable(NAMESPACE, path).version == stable
    assert store.get_rollout(NAMESPACE, path) is None and store.get_lock(NAMESPACE, path) is None
    (events,) = await runs_of(handle)
    (watch,) = activities_named(events, "watch_stage_health")
    (revert,) = activities_named(events, "revert_rollout")
    ended = {
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
    }
    before_revert = [event for event in events if event.event_id < revert.event_id]
    # Cancelled in the workflow task that saw the halt, with the revert scheduled at once: not
    # after the watch acknowledged the cancellation (or finished its check).
    assert any(
        event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
        and event.activity_task_cancel_requested_event_attributes.scheduled_event_id
        == watch.event_id
        for event in before_revert
    )
    assert not [
        event
        for event in before_revert
        if event.event_type in ended and _scheduled_event_id(event) == watch.event_id
    ]


# -- weeks: continue-as-new --------------------------------------------------------------------


@pytest.mark.soak
# Weeks of half-hourly renewals are hundreds of time skips, each a round of workflow tasks: minutes
# on a loaded machine, past the suite's 5-minute limit.
@pytest.mark.timeout(900)
async def test_a_fourteen_day_rollout_with_hour_leases_keeps_them_across_runs(
    short_runs: Rollouts,
) -> None:
    rollouts = short_runs
    store = rollouts.store
    path = unique_path()
    handle = await rollouts.start(
        example_request(
            path,
            stages=[
                {"channel": "canary", "cooldown": "168h", "expiration": "1h"},
                {"percentile": 50, "cooldown": "168h", "expiration": "1h"},
            ],
        )
    )
    result = await result_within_budget(handle)
    assert result["outcome"] == "promoted", result
    chain = await runs_of(handle)
    assert len(chain) > 2 and all(len(events) < EVENT_BUDGET for events in chain)

    # Every lease write (the publishes, then the renewals), in workflow time: within each run no
    # gap longer than half a lease, so a one-hour lease never came near lapsing. (The time-skipping
    # server moves a continued run's clock on at its start, by the time its chain skipped so far:
    # a jump no real clock makes. The run then renews first thing, its lease being due.)
    # The workflow clock also runs while a task is in flight, in real time (a task that replays its
    # run's history takes seconds on a loaded machine). A minute of slack is still half an hour
    # short of the lease lapsing.
    first_task = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    for number, events in enumerate(chain):
        times = [event.event_time.ToDatetime() for event in events]
        writes = sorted(
            event.event_time.ToDatetime()
            for name in ("publish_stage", "renew_leases")
            for event in activities_named(events, name)
        )
        started = next(
            event.event_time.ToDatetime() for event in events if event.event_type == first_task
        )
        ended = times[-1]
        if number == len(chain) - 1:
            # The last run promotes: the lease only has to last until the promotion.
            ended = activities_named(events, "promote_version")[0].event_time.ToDatetime()
        marks = [started, *writes, ended] if number else [*writes, ended]
        gaps = [later - earlier for earlier, later in zip(marks, marks[1:], strict=False)]
        assert max(gaps) <= timedelta(minutes=31), (number, max(gaps))
    began = chain[0][0].event_time.ToDatetime()
    promoted_at = activities_named(chain[-1], "promote_version")[0].event_time.ToDatetime()
    assert promoted_at - began >= timedelta(days=14)

    # The status and the audit trail read as one rollout: every transition once, in order.
    progress = await handle.query("status", result_type=dict)
    assert progress["state"] == "promoted" and progress["outcome"] == "promoted"
    assert [t["to_state"] for t in progress["history"] if t["kind"] == "transition"] == [
        "publishing",
        "holding",
        "publishing",
        "holding",
        "promoting",
        "promoted",
    ]
    audit = [
        e.action
        for e in store.history(NAMESPACE, path)
        if e.action.startswith("rollout.") and e.action != "rollout.command"
    ]
    assert audit[-6:] == [
        "rollout.publishing",
        "rollout.holding",
        "rollout.publishing",
        "rollout.holding",
        "rollout.promoting",
        "rollout.promoted",
    ]
    description = await handle._client.get_workflow_handle(handle.id).describe()
    attributes = {key.name: value for key, value in description.typed_search_attributes}
    assert attributes["TempoconfState"] == "promoted" and attributes["TempoconfPath"] == path


async def test_a_continued_rollout_keeps_its_lock_and_renews_its_leases(
    short_runs: Rollouts,
) -> None:
    rollouts = short_runs
    store = rollouts.store
    path = unique_path()
    handle = await rollouts.start(
        example_request(
            path,
            stages=[{"channel": "canary", "cooldown": "48h", "expiration": "1h", "manual": True}],
        )
    )
    latest = rollouts.client.get_workflow_handle(handle.id)

    async def continued_and_awaiting_approval() -> dict[str, Any]:
        try:
            progress = await latest.query("status", result_type=dict)
        except RPCError as error:
            # A query that reaches the new run before its first task ("Workflow task is not
            # scheduled yet"): not yet.
            raise AssertionError(f"not queryable yet: {error}") from error
        assert progress["state"] == "awaiting_approval", progress["state"]
        assert (await latest.describe()).run_id != first_run_id(handle)
        return progress

    await eventually(
        continued_and_awaiting_approval,
        what="the rollout to continue as new and await approval",
        timeout=120,
    )
    # The lock is the rollout's (its first run's id) and a second rollout is refused: the reclaim
    # does not take a continued run for an ended one.
    lock = store.get_lock(NAMESPACE, path)
    assert lock is not None and lock.run_id == first_run_id(handle)
    rival = await rollouts.start(example_request(path, value={"max_connections": 1}))
    with pytest.raises(WorkflowFailureError) as refused:
        await rival.result()
    assert isinstance(refused.value.cause, ApplicationError)
    assert refused.value.cause.type == "RolloutAlreadyRunning"

    # A later run's renewal reached the store: its stage's lease is one that such a run wrote.
    async def renewed_by_a_later_run() -> bool:
        snapshot = snapshot_of(store, NAMESPACE, path)
        assert snapshot is not None and len(snapshot.stages) == 1
        written = {
            datetime.fromisoformat(completed_result(events, renewal)["expires_at"]["0"])
            for events in (await runs_of(handle))[1:]
            for renewal in activities_named(events, "renew_leases")
            if any(
                event.activity_task_completed_event_attributes.scheduled_event_id
                == renewal.event_id
                for event in events
            )
        }
        return snapshot.stages[0].expires_at in written

    await eventually(renewed_by_a_later_run, what="a renewal by a continued run in the store")

    await latest.execute_update("approve", {"by": "oncall"})
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted", result
    assert store.get_lock(NAMESPACE, path) is None
    assert store.get_stable(NAMESPACE, path).version == result["version"]
