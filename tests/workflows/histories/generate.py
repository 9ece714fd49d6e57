"""Regenerate the workflow histories that tests/workflows/test_replay.py replays: one command,

    .venv/bin/python -m tests.workflows.histories.generate [SCENARIO ...]

from the repository's root. It starts the venv's Temporal dev server (time skipping where a
scenario allows it), the real worker (`build_worker`) and a SQLite store in a temporary directory,
runs each scenario (all of them, or those named) to its end and saves the history of every run of
its workflow as `<scenario>.json` next to this file; the later runs of a continue-as-new chain as
`<scenario>.run2.json`, `<scenario>.run3.json`, ... Holds are short and checks few, so the folder
stays small and the replay test fast.

A scenario is an async function registered with `@scenario`; it gets a `Bench` (the worker's
clients and store) and returns the handle of the workflow whose history is saved (set-up
rollouts, such as the one that gives a config its first stable version, are not saved).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError
from temporalio.testing import WorkflowEnvironment

from tempoconf.access.signing import CommandSigner
from tempoconf.canonical import version_id
from tempoconf.rollout.outcomes import await_rollout_ending
from tempoconf.store.store import Store
from tempoconf.temporal.names import FREEZE_ENDED_SIGNAL, WORKFLOW_TYPE
from tests.fixtures.services import http_judge, webhook_receiver
from tests.fixtures.temporal import rollout_result, start_test_server
from tests.fixtures.waiting import eventually

HISTORIES = Path(__file__).resolve().parent
NAMESPACE = "default"
STABLE_VALUE = {"is_debug": False, "max_connections": 1000}
NEW_VALUE = {"is_debug": False, "max_connections": 2000}
NEW_VERSION = version_id(NEW_VALUE)
TASK_QUEUE = "tempoconf-replay-histories"
CLOSED = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}


def history_file(scenario: str, run: int, folder: Path = HISTORIES) -> Path:
    """Where run `run` (1, 2, ... along a continue-as-new chain) of a scenario is saved."""
    return folder / (f"{scenario}.json" if run == 1 else f"{scenario}.run{run}.json")


def scenario_of(file: Path) -> str:
    """The scenario a saved history belongs to (`halt_holding.run2.json` -> `halt_holding`)."""
    return file.name.split(".", 1)[0]


def workflow_id_of(scenario: str) -> str:
    return f"replay-{scenario}"


# -- the bench: what every scenario runs on --------------------------------------------------------


@dataclass
class Bench:
    """The server's clients, the worker's store and its SQLite file; one scenario at a time."""

    skipping: Client
    """Workflows started with this client skip time (a hold ends as soon as nothing else runs)."""
    realtime: Client
    """Workflows started with this client run on the real clock (for those steered mid-hold)."""
    store: Store
    database: Path
    scenario: str = ""

    @property
    def path(self) -> str:
        """The config the scenario rolls out (one per scenario: no scenario sees another's lock)."""
        return f"replay/{self.scenario.replace('_', '-')}"

    async def start(
        self,
        request: dict[str, Any],
        *,
        real_clock: bool = False,
        workflow_id: str | None = None,
        **options: Any,
    ) -> WorkflowHandle[Any, Any]:
        client = self.realtime if real_clock else self.skipping
        return await client.start_workflow(
            WORKFLOW_TYPE,
            request,
            id=workflow_id or workflow_id_of(self.scenario),
            task_queue=TASK_QUEUE,
            **options,
        )

    async def make_stable(self, value: dict[str, Any], setup: int = 1) -> str:
        """A version made stable by a stageless rollout (a set-up run, not saved)."""
        handle = await self.start(
            {"path": self.path, "value": value, "author": "setup"},
            workflow_id=f"{workflow_id_of(self.scenario)}-setup-{setup}",
        )
        result = await rollout_result(handle)
        assert result["outcome"] == "promoted", result
        return str(result["version"])

    def request(self, **fields: Any) -> dict[str, Any]:
        """A rollout of NEW_VALUE to this scenario's config; `fields` add to or replace its own."""
        return {
            "path": self.path,
            "namespace": NAMESPACE,
            "value": NEW_VALUE,
            "default_cooldown_time": "1h",
            "default_expiration_time": "1h",
            "stages": [{"channel": "canary"}, {"percentile": 10}],
            "author": "alice@example.com",
            "message": f"replay scenario {self.scenario}",
            **fields,
        }

    @contextmanager
    def store_writes_blocked(self) -> Iterator[None]:
        """Hold SQLite's write lock: activities that write to the store wait for it meanwhile (the
        store's busy timeout, then their retries), so the workflow stays in the step awaiting them."""
        connection = sqlite3.connect(self.database, isolation_level=None, timeout=30)
        try:
            connection.execute("BEGIN IMMEDIATE")
            yield
            connection.execute("COMMIT")
        finally:
            connection.close()


async def status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    return await handle.query("status", result_type=dict)


async def reach(handle: WorkflowHandle[Any, Any], state: str, *, stage_index: int = 0) -> None:
    """Wait until the rollout is in `state` at `stage_index`."""

    async def there() -> bool:
        progress = await status(handle)
        assert (progress["state"], progress["stage_index"]) == (state, stage_index), (
            progress["state"],
            progress["stage_index"],
        )
        return True

    await eventually(there, what=f"{handle.id} to be {state} at stage index {stage_index}")


async def outcome(handle: WorkflowHandle[Any, Any], expected: str) -> WorkflowHandle[Any, Any]:
    result = await rollout_result(handle)
    assert result["outcome"] == expected, result
    return handle


async def ends_with(handle: WorkflowHandle[Any, Any], error: type[BaseException]) -> None:
    try:
        await handle.result()
    except WorkflowFailureError as failure:
        assert isinstance(failure.cause, error), failure.cause
    else:
        raise AssertionError(f"{handle.id} ended without the {error.__name__} it should have")


# -- the scenarios ---------------------------------------------------------------------------------

Scenario = Callable[[Bench], Awaitable[WorkflowHandle[Any, Any]]]
SCENARIOS: dict[str, Scenario] = {}
# Far above any other scenario's history, so only `continue_as_new` reaches it.
CONTINUE_AS_NEW_AFTER_EVENTS = 300


def scenario(function: Scenario) -> Scenario:
    """Register a scenario under its function's name."""
    SCENARIOS[function.__name__] = function
    return function


@scenario
async def direct_promotion(bench: Bench) -> WorkflowHandle[Any, Any]:
    handle = await bench.start({"path": bench.path, "value": NEW_VALUE, "stages": []})
    return await outcome(handle, "promoted")


@scenario
async def staged_promotion(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Two holds that end on their own, a webhook delivered at each state change."""
    await bench.make_stable(STABLE_VALUE)
    with webhook_receiver() as receiver:
        handle = await bench.start(
            bench.request(
                stages=[{"channel": "canary", "cooldown": "1m"}, {"percentile": 10}],
                default_cooldown_time="2m",
                webhooks=[f"{receiver.url}/hook"],
            )
        )
        return await outcome(handle, "promoted")


@scenario
async def refused_request(bench: Bench) -> WorkflowHandle[Any, Any]:
    """A request prepare refuses: the workflow fails at once."""
    handle = await bench.start(bench.request(stages=[{"percentile": 101}]))
    await ends_with(handle, ApplicationError)
    return handle


@scenario
async def prepare_failed(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Prepare fails past its retries (the store refuses the rollout's row after the lock was
    taken): what it took is released and the trail ends `rollout.failed` (patch
    `prepare-failure-audited`)."""
    await bench.make_stable(STABLE_VALUE)
    connection = sqlite3.connect(bench.database)
    try:
        connection.execute(
            "CREATE TRIGGER refuse_rollout BEFORE INSERT ON rollout "
            "BEGIN SELECT RAISE(ABORT, 'the disk is on fire'); END"
        )
        connection.commit()
        handle = await bench.start(bench.request())
        await ends_with(handle, ApplicationError)
    finally:
        connection.execute("DROP TRIGGER IF EXISTS refuse_rollout")
        connection.commit()
        connection.close()
    return handle


@scenario
async def halt_preparing(bench: Bench) -> WorkflowHandle[Any, Any]:
    """The halt arrives with the start (signal-with-start), before prepare has run."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(),
        start_signal="halt",
        start_signal_args=[{"reason": "wrong value", "by": "erin"}],
    )
    return await outcome(handle, "halted")


@scenario
async def halt_publishing(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Halted while it publishes stage 2. Once stage 1's hold is in the audit log, the store's
    writes are held back: the next one is stage 2's `publishing`, so the rollout waits there (its
    3 s hold ends on its own) until the halt is in."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary", "cooldown": "3s"}, {"percentile": 10}]),
        real_clock=True,
    )

    def hold_audited() -> bool:
        actions = [entry.action for entry in bench.store.history(NAMESPACE, bench.path)]
        return "rollout.holding" in actions

    await eventually(hold_audited, what=f"the hold of {handle.id} in the audit log")
    with bench.store_writes_blocked():
        await reach(handle, "publishing", stage_index=1)
        await handle.signal("halt", {"reason": "wrong value"})
        await eventually(
            lambda: _halt_requested(handle), what=f"{handle.id} to note the halt request"
        )
    return await outcome(handle, "halted")


async def _halt_requested(handle: WorkflowHandle[Any, Any]) -> bool:
    history = (await status(handle))["history"]
    return any(row["reason"].startswith("halt requested") for row in history)


@scenario
async def halt_holding(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(bench.request(), real_clock=True)
    await reach(handle, "holding")
    await handle.execute_update("halt", {"reason": "error rate up", "by": "erin"})
    return await outcome(handle, "halted")


@scenario
async def halt_checking_health(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Halted while a slow end-of-hold check runs (the judge answers after 3 s)."""
    await bench.make_stable(STABLE_VALUE)
    with http_judge() as judge:
        checks = [{"kind": "http", "url": judge + "/slow", "timeout": "10s", "attempts": 1}]
        handle = await bench.start(
            bench.request(stages=[{"channel": "canary", "cooldown": "1m"}], health=checks)
        )
        await reach(handle, "checking_health")
        await handle.execute_update("halt", {"reason": "error rate up"})
        return await outcome(handle, "halted")


@scenario
async def halt_awaiting_approval(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary", "cooldown": "0s", "manual": True}]),
        real_clock=True,  # skipped time would renew leases ahead of the clock while it waits
    )
    await reach(handle, "awaiting_approval")
    await handle.execute_update("halt", {"reason": "graphs look wrong", "by": "carol"})
    return await outcome(handle, "halted")


@scenario
async def halt_paused(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Paused during its hold, then halted by the plain signal (as the Temporal CLI sends it)."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(bench.request(), real_clock=True)
    await reach(handle, "holding")
    await handle.execute_update("pause", {"reason": "investigating", "by": "bob"})
    await handle.signal("halt", {"reason": "it was bad after all"})
    return await outcome(handle, "halted")


@scenario
async def unhealthy_revert(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Interval checks see no data during the hold (not yet a failure); the end-of-hold check,
    still without data, fails: reverted. (A short hold: time does not skip while the hold's
    interval-check activity runs.)"""
    await bench.make_stable(STABLE_VALUE)
    checks = [{"kind": "reports", "max_error_ratio": 0.1, "interval": "1s"}]
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary", "cooldown": "3s"}], health=checks)
    )
    return await outcome(handle, "reverted")


@scenario
async def unhealthy_revert_in_hold(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Failing reports arrive during an hour's hold: an interval check reverts it at once."""
    await bench.make_stable(STABLE_VALUE)
    checks = [{"kind": "reports", "max_error_ratio": 0.1, "interval": "1s"}]
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary"}], health=checks), real_clock=True
    )
    await reach(handle, "holding")
    for number in range(2):
        bench.store.add_report(
            NAMESPACE,
            bench.path,
            client=f"canary-{number}",
            version=NEW_VERSION,
            ok=1,
            failed=9,
            error="timeouts to the db",
            channel="canary",
            labels={},
        )
    return await outcome(handle, "reverted")


@scenario
async def inconclusive_extension(bench: Bench) -> WorkflowHandle[Any, Any]:
    """A sequential judge (issue 29) on thin evidence: inconclusive at the hold's end (cut short
    by advance), the hold extended for 2 s and re-checked, then passed by after_extension."""
    await bench.make_stable(STABLE_VALUE)
    judge = {
        "sequential": {
            "max_increase": 0.01,
            "on_inconclusive": "extend",
            "max_extension": "2s",
            "after_extension": "pass",
        }
    }
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary"}], health=[{"kind": "reports", "judge": judge}]),
        real_clock=True,
    )
    await reach(handle, "holding")
    stable = version_id(STABLE_VALUE)
    for client, version, channel in [
        ("canary-0", NEW_VERSION, "canary"),
        ("host-0", stable, None),
        ("host-1", stable, None),
    ]:
        bench.store.add_report(
            NAMESPACE,
            bench.path,
            client=client,
            version=version,
            ok=20,
            failed=0,
            channel=channel,
            labels={},
        )
    await handle.execute_update("advance")
    return await outcome(handle, "promoted")


@scenario
async def bypass(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(bench.request(), real_clock=True)
    await reach(handle, "holding")
    await handle.execute_update("bypass", {"reason": "hotfix for an outage", "by": "oncall"})
    return await outcome(handle, "bypassed")


@scenario
async def approval(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary", "cooldown": "0s", "manual": True}]),
        real_clock=True,  # skipped time would renew leases ahead of the clock while it waits
    )
    await reach(handle, "awaiting_approval")
    await handle.execute_update("approve", {"reason": "graphs are flat", "by": "carol"})
    return await outcome(handle, "promoted")


@scenario
async def applied_gate(bench: Bench) -> WorkflowHandle[Any, Any]:
    """A stage with `min_applied`: one canary of two applied the version, so the gate rechecks
    until its apply timeout, holds (`on_apply_timeout: hold`), and an operator advances."""
    from tempoconf.store import AppliedReport

    stable = await bench.make_stable(STABLE_VALUE)
    now = bench.store.now()
    bench.store.record_applied(
        NAMESPACE,
        bench.path,
        [
            AppliedReport("canary-1", NEW_VERSION, now, channel="canary"),
            AppliedReport("canary-2", stable, now, error="reload: exit 3", channel="canary"),
        ],
    )
    stage = {"channel": "canary", "cooldown": "0s", "min_applied": 1}
    handle = await bench.start(
        bench.request(stages=[{**stage, "apply_timeout": "5s", "on_apply_timeout": "hold"}]),
        real_clock=True,  # skipped time would renew leases ahead of the clock while it is held
    )
    await reach(handle, "apply_timed_out")
    await handle.execute_update("advance", {"reason": "canary-2 is retired", "by": "dave"})
    return await outcome(handle, "promoted")


@scenario
async def pause_resume(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Paused during a 1 s hold, which ends while paused; the stage moves on at resume."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary", "cooldown": "1s"}]), real_clock=True
    )
    await reach(handle, "holding")
    await handle.execute_update("pause", {"reason": "investigating a dashboard", "by": "bob"})

    async def hold_over() -> bool:
        progress = await status(handle)
        return progress["hold_deadline"] is None and progress["paused"]

    await eventually(hold_over, what=f"the paused hold of {handle.id} to end")
    await handle.execute_update("resume", {"reason": "dashboard ok", "by": "bob"})
    return await outcome(handle, "promoted")


@scenario
async def hold_timers_fire(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Two holds that end on their timers, the first paused and resumed meanwhile (as the soak's
    `approve` rollouts were). tests/workflows/test_query_after_restart.py cuts it after each
    timer's firing: what a restarted worker replays to answer a query (RolloutRun.clock)."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(
            stages=[{"channel": "canary", "cooldown": "3s"}, {"percentile": 10, "cooldown": "1s"}]
        ),
        real_clock=True,
    )
    await reach(handle, "holding")
    await handle.execute_update("pause", {"reason": "a dashboard", "by": "bob"})
    await handle.execute_update("resume", {"reason": "dashboard ok", "by": "bob"})
    return await outcome(handle, "promoted")


@scenario
async def cancel(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Cancelled during its hold (as from the Web UI): reverted, then ended as cancelled."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(bench.request(), real_clock=True)
    await reach(handle, "holding")
    await handle.cancel()
    await ends_with(handle, CancelledError)
    return handle


@scenario
async def lapse_after_terminate(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Terminated during its hold: nothing reverts, the stage's lease lapses in the store."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary", "expiration": "1m"}]), real_clock=True
    )
    await reach(handle, "holding")
    await handle.terminate("operator pulled the plug")
    await ends_with(handle, TerminatedError)
    return handle


@scenario
async def rollback(bench: Bench) -> WorkflowHandle[Any, Any]:
    """An earlier version (`version`, no value) made stable again through a stage."""
    first = await bench.make_stable(STABLE_VALUE, setup=1)
    await bench.make_stable(NEW_VALUE, setup=2)
    handle = await bench.start(
        {
            "path": bench.path,
            "version": first,
            "stages": [{"channel": "canary", "cooldown": "1m"}],
            "author": "oncall",
            "message": "roll back: connection storms",
        }
    )
    return await outcome(handle, "promoted")


@scenario
async def strategy_expansion(bench: Bench) -> WorkflowHandle[Any, Any]:
    """A linear strategy without explicit stages: stages 50% and 100%."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(stages=[], strategy={"linear": {"step": 50, "every": "1m"}})
    )
    await outcome(handle, "promoted")
    names = [stage["name"] for stage in (await status(handle))["stages"]]
    assert names == ["50%", "100%"], names
    return handle


# A day's hold with one-hour leases renews 48 times; the worker here continues a run as new past
# CONTINUE_AS_NEW_AFTER_EVENTS events, so the chain has several runs, each saved.
@scenario
async def continue_as_new(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary", "cooldown": "24h", "expiration": "1h"}])
    )
    await outcome(handle, "promoted")  # result() follows the chain to its last run
    latest = await bench.skipping.get_workflow_handle(handle.id).describe()
    assert latest.run_id != handle.first_execution_run_id, "the rollout never continued as new"
    return handle


@scenario
async def changeset_halt(bench: Bench) -> WorkflowHandle[Any, Any]:
    """A changeset of two configs (issue 13): both locked and published at 50 % in one
    transaction each step, held, then halted: both reverted."""
    other = f"{bench.path}-2"
    setup = await bench.start(
        {
            "namespace": NAMESPACE,
            "changes": [
                {"path": bench.path, "value": STABLE_VALUE},
                {"path": other, "value": STABLE_VALUE},
            ],
            "author": "setup",
        },
        workflow_id=f"{workflow_id_of(bench.scenario)}-setup-1",
    )
    await outcome(setup, "promoted")
    handle = await bench.start(
        {
            "namespace": NAMESPACE,
            "changes": [
                {"path": bench.path, "value": NEW_VALUE},
                {"path": other, "value": {"is_debug": False, "max_connections": 3000}},
            ],
            "default_cooldown_time": "1h",
            "default_expiration_time": "1h",
            "stages": [{"percentile": 50}],
            "author": "alice@example.com",
            "message": f"replay scenario {bench.scenario}",
        },
        real_clock=True,
    )
    await reach(handle, "holding")
    await handle.execute_update("halt", {"reason": "the pair misbehaves", "by": "erin"})
    return await outcome(handle, "halted")


@scenario
async def window_wait(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Change windows: the canary is published inside a window, the 10% stage waits on a durable
    timer for the next one (`waiting_for_window`), then widens (patch `change-windows-and-freezes`)."""
    await bench.make_stable(STABLE_VALUE)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    every_day = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]

    def window(start: datetime, end: datetime) -> dict[str, Any]:
        return {
            "days": every_day,
            "from": f"{start:%H:%M}",
            "to": f"{end:%H:%M}",
            "timezone": "UTC",
        }

    handle = await bench.start(
        bench.request(
            stages=[{"channel": "canary", "cooldown": "30m"}, {"percentile": 10, "cooldown": "1m"}],
            # Leases longer than the wait: few renewals, so a short history and a quick scenario.
            default_expiration_time="8h",
            windows=[
                window(now - timedelta(minutes=10), now + timedelta(minutes=20)),
                window(now + timedelta(hours=3), now + timedelta(hours=4)),
            ],
        )
    )
    return await outcome(handle, "promoted")


@scenario
async def frozen_halt(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Freezes: a new rollout in a frozen namespace waits (`frozen`, looked at again on a timer)
    and a halt goes through meanwhile."""
    namespace = "replay-frozen"
    bench.store.start_freeze(namespace, reason="replay freeze", by="replay")
    try:
        handle = await bench.start(
            bench.request(namespace=namespace, stages=[{"channel": "canary"}]), real_clock=True
        )
        await reach(handle, "frozen", stage_index=0)
        await handle.signal("halt", {"reason": "not during the freeze", "by": "oncall"})
        return await outcome(handle, "halted")
    finally:
        bench.store.end_freeze(namespace, by="replay")


@scenario
async def freeze_ended_signal(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Freezes: a frozen rollout told `freeze_ended` while the freeze still holds looks, waits
    on; told again once it ended, looks again at once (the timer to its next look cancelled)
    and is promoted."""
    namespace = "replay-freeze-ended"
    bench.store.start_freeze(namespace, reason="replay freeze", by="replay")
    try:
        handle = await bench.start(
            bench.request(namespace=namespace, stages=[{"channel": "canary", "cooldown": "1s"}]),
            real_clock=True,
        )
        await reach(handle, "frozen", stage_index=0)
        await handle.signal(FREEZE_ENDED_SIGNAL, "another-namespace")

        async def looked_twice() -> bool:
            looks: dict[int, bool] = {}  # scheduled event id -> completed
            async for event in handle.fetch_history_events():
                scheduled = event.activity_task_scheduled_event_attributes
                if scheduled.activity_type.name == "check_freeze":
                    looks[event.event_id] = False
                completed = event.activity_task_completed_event_attributes
                if completed.scheduled_event_id in looks:
                    looks[completed.scheduled_event_id] = True
            assert sum(looks.values()) >= 2, looks
            return True

        await eventually(looked_twice, what=f"{handle.id} to look again, still frozen")
    finally:
        bench.store.end_freeze(namespace, by="replay")
    await handle.signal(FREEZE_ENDED_SIGNAL, namespace)
    return await outcome(handle, "promoted")


@scenario
async def four_eyes_approvals(bench: Bench) -> WorkflowHandle[Any, Any]:
    """A stage with two approvals bound to the plan's digest: a stale digest and the author are
    refused (validator: nothing in the history), a repeated approver's signal is noted, bob and
    carol approve, promoted."""
    await bench.make_stable(STABLE_VALUE)
    request = bench.request(
        stages=[
            {"channel": "canary", "cooldown": "0s", "manual": True, "approvals": {"required": 2}}
        ]
    )
    handle = await bench.start(request, real_clock=True)  # waits for approvals: see `approval`
    await reach(handle, "awaiting_approval")
    digest = (await status(handle))["digest"]
    for refused in (
        {"by": "bob", "digest": "sha256:" + "0" * 32},
        {"by": "alice", "digest": digest},
    ):
        try:
            await handle.execute_update("approve", refused)
        except WorkflowUpdateFailedError:
            pass
        else:
            raise AssertionError(f"approve {refused} was not refused")
    await handle.execute_update("approve", {"by": "bob", "digest": digest, "reason": "diff ok"})
    await handle.signal("approve", {"by": "bob", "digest": digest})
    await handle.execute_update("approve", {"by": "carol", "digest": digest, "reason": "lgtm"})
    return await outcome(handle, "promoted")


@scenario
async def changeset_approvals(bench: Bench) -> WorkflowHandle[Any, Any]:
    """A changeset of two configs whose one stage needs two approvals bound to the plan's digest
    (issue 25): bob and carol approve with the running rollout's digest, both configs promoted.
    Saved first from a worker that predates the patches `changeset-plan-digest` and
    `search-attribute-paths` (its digest and search attributes as they were then)."""
    other = f"{bench.path}-2"
    handle = await bench.start(
        {
            "namespace": NAMESPACE,
            "changes": [
                {"path": bench.path, "value": NEW_VALUE},
                {"path": other, "value": {"is_debug": False, "max_connections": 3000}},
            ],
            "default_cooldown_time": "1h",
            "default_expiration_time": "1h",
            "stages": [
                {"percentile": 50, "cooldown": "0s", "manual": True, "approvals": {"required": 2}}
            ],
            "author": "alice@example.com",
            "message": f"replay scenario {bench.scenario}",
        },
        real_clock=True,
    )
    await reach(handle, "awaiting_approval")
    digest = (await status(handle))["digest"]
    await handle.execute_update("approve", {"by": "bob", "digest": digest, "reason": "diff ok"})
    await handle.execute_update("approve", {"by": "carol", "digest": digest, "reason": "lgtm"})
    return await outcome(handle, "promoted")


# Signed approvals (docs/contract.md, Signed approvals): one key per generation, in the plan.
APPROVAL_SIGNER = CommandSigner.generate()


async def signed_approve(handle: WorkflowHandle[Any, Any], by: str) -> dict[str, Any]:
    """An approve of the stage awaiting approval, signed as the API signs it for this run: bound
    to the run and the stage with a nonce when the run's status names `approval_run`, else in
    the form of the runs before patch `approvals-bound-to-run-and-stage`."""
    progress = await status(handle)
    digest = progress["digest"]
    now = datetime.now(UTC)
    if progress.get("approval_run"):
        signed = APPROVAL_SIGNER.sign_bound(
            by,
            handle.id,
            "approve",
            digest,
            rollout_run=progress["approval_run"],
            stage_index=progress["stage_index"],
            at=now,
        )
        return {"by": by, "digest": digest, **signed}
    signature, signed_at = APPROVAL_SIGNER.sign(by, handle.id, "approve", digest, now)
    return {"by": by, "digest": digest, "signature": signature, "signed_at": signed_at}


@scenario
async def signed_approvals(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Two manual stages of a rollout with an `approval_key`: stage 1's signed approval is taken
    from its update and sent again as a signal while stage 2 awaits approval. Saved from a worker
    that predates patch `approvals-bound-to-run-and-stage`: the signature names neither run nor
    stage, so the replayed approval moved stage 2 on (the hole issue 41 closed); that run keeps
    taking it on replay. Run by a worker of today, the replay is ignored and noted, and a fresh
    approval of stage 2 follows (as `signed_approvals_bound` records)."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(
            stages=[
                {"channel": "canary", "cooldown": "0s", "manual": True},
                {"percentile": 10, "cooldown": "0s", "manual": True},
            ],
            approval_key=APPROVAL_SIGNER.public_key,
        ),
        real_clock=True,  # a signature is judged on the workflow's clock
    )
    await reach(handle, "awaiting_approval")
    captured = await signed_approve(handle, "bob")
    await handle.execute_update("approve", captured)
    await reach(handle, "awaiting_approval", stage_index=1)
    await handle.signal("approve", captured)

    async def replay_handled() -> bool:
        progress = await status(handle)
        last = progress["history"][-1]["reason"]
        return progress["state"] != "awaiting_approval" or last.startswith("approve ignored")

    await eventually(replay_handled, what=f"{handle.id} to take or note the replayed approval")
    if (await status(handle))["state"] == "awaiting_approval":
        await handle.execute_update("approve", await signed_approve(handle, "carol"))
    return await outcome(handle, "promoted")


@scenario
async def signed_approvals_bound(bench: Bench) -> WorkflowHandle[Any, Any]:
    """As `signed_approvals`, on a worker with patch `approvals-bound-to-run-and-stage`: stage
    1's approval names the run, the stage and a nonce; sent again at stage 2 it is refused
    (update: nothing in the history) and ignored (signal: noted); stage 2 takes a fresh one."""
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(
        bench.request(
            stages=[
                {"channel": "canary", "cooldown": "0s", "manual": True},
                {"percentile": 10, "cooldown": "0s", "manual": True},
            ],
            approval_key=APPROVAL_SIGNER.public_key,
        ),
        real_clock=True,
    )
    await reach(handle, "awaiting_approval")
    assert (await status(handle))["approval_run"], "this worker does not bind approvals"
    captured = await signed_approve(handle, "bob")
    await handle.execute_update("approve", captured)
    await reach(handle, "awaiting_approval", stage_index=1)
    try:
        await handle.execute_update("approve", captured)
    except WorkflowUpdateFailedError:
        pass
    else:
        raise AssertionError("stage 1's approval was taken at stage 2")
    await handle.signal("approve", captured)

    async def replay_noted() -> bool:
        last = (await status(handle))["history"][-1]["reason"]
        return last.startswith("approve ignored: this signed approval was given for stage 1")

    await eventually(replay_noted, what=f"{handle.id} to note the replayed approval")
    await handle.execute_update("approve", await signed_approve(handle, "carol"))
    return await outcome(handle, "promoted")


@scenario
async def four_eyes_identities(bench: Bench) -> WorkflowHandle[Any, Any]:
    """Patch `four-eyes-normalised-identities`: the author `Mallory <mallory@example.com>`
    approving as `mallory+x@example.com` is ignored (a signal, noted); the token `bob` and the
    OpenID `oidc:bob` are two approvers: promoted."""
    await bench.make_stable(STABLE_VALUE)
    request = bench.request(
        stages=[
            {"channel": "canary", "cooldown": "0s", "manual": True, "approvals": {"required": 2}}
        ],
        author="Mallory <mallory@example.com>",
    )
    handle = await bench.start(request, real_clock=True)
    await reach(handle, "awaiting_approval")
    digest = (await status(handle))["digest"]
    await handle.signal("approve", {"by": "mallory+x@example.com", "digest": digest})

    async def noted() -> bool:
        last = (await status(handle))["history"][-1]["reason"]
        return "is the rollout's author" in last

    await eventually(noted, what=f"{handle.id} to note the author's approval")
    await handle.execute_update("approve", {"by": "bob", "digest": digest})
    await handle.execute_update("approve", {"by": "oidc:bob", "digest": digest})
    return await outcome(handle, "promoted")


# Each outcome as a Temporal close status (patch `outcomes-as-temporal-statuses`,
# tempoconf.rollout.outcomes): promoted and bypassed complete, reverted and halted fail with the result in
# their failure's details, cancelled keeps it in its memo and ends Canceled. The older histories
# above that end reverted, halted or cancelled were saved before the patch and replay as they were.


async def closes(handle: WorkflowHandle[Any, Any], status: str, outcome_name: str) -> None:
    ending = await await_rollout_ending(handle)
    assert (ending.status, ending.outcome) == (status, outcome_name), ending


@scenario
async def ends_promoted(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(bench.request(stages=[{"channel": "canary", "cooldown": "1m"}]))
    await closes(handle, "completed", "promoted")
    return handle


@scenario
async def ends_bypassed(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(bench.request(), real_clock=True)
    await reach(handle, "holding")
    await handle.execute_update("bypass", {"reason": "hotfix for an outage", "by": "oncall"})
    await closes(handle, "completed", "bypassed")
    return handle


@scenario
async def ends_reverted(bench: Bench) -> WorkflowHandle[Any, Any]:
    """The end-of-hold check finds no reports: unhealthy, reverted, Failed (RolloutReverted)."""
    await bench.make_stable(STABLE_VALUE)
    checks = [{"kind": "reports", "max_error_ratio": 0.1}]
    handle = await bench.start(
        bench.request(stages=[{"channel": "canary", "cooldown": "1m"}], health=checks)
    )
    await closes(handle, "failed", "reverted")
    return handle


@scenario
async def ends_halted(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(bench.request(), real_clock=True)
    await reach(handle, "holding")
    await handle.execute_update("halt", {"reason": "error rate up", "by": "erin"})
    await closes(handle, "failed", "halted")
    return handle


@scenario
async def ends_cancelled(bench: Bench) -> WorkflowHandle[Any, Any]:
    await bench.make_stable(STABLE_VALUE)
    handle = await bench.start(bench.request(), real_clock=True)
    await reach(handle, "holding")
    await handle.cancel()
    await closes(handle, "canceled", "cancelled")
    return handle


# -- saving ---------------------------------------------------------------------------------------


async def save(
    client: Client, scenario_name: str, handle: WorkflowHandle[Any, Any], folder: Path
) -> list[Path]:
    """Save every run of the scenario's workflow, following its continue-as-new chain."""
    for stale in folder.glob(f"{scenario_name}.*json"):
        if scenario_of(stale) == scenario_name:
            stale.unlink()
    saved: list[Path] = []
    run_id: str | None = handle.first_execution_run_id or handle.run_id
    while run_id is not None:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        last = history.events[-1]
        if last.event_type not in CLOSED:
            raise RuntimeError(f"scenario {scenario_name} left run {run_id} of {handle.id} open")
        file = history_file(scenario_name, len(saved) + 1, folder)
        # One line per event keeps the files diffable and a third the size of to_json()'s indent.
        events = json.loads(history.to_json())["events"]
        file.write_text(
            '{"events": [\n'
            + ",\n".join(json.dumps(event, separators=(",", ":")) for event in events)
            + "\n]}\n",
            encoding="utf-8",
        )
        saved.append(file)
        run_id = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            attributes = last.workflow_execution_continued_as_new_event_attributes
            run_id = attributes.new_execution_run_id
    return saved


async def generate(names: list[str], folder: Path) -> None:
    # Imported here: the replay test imports this module for the scenario names only.
    from tempoconf.cli.worker import build_worker

    folder.mkdir(parents=True, exist_ok=True)
    env: WorkflowEnvironment = await start_test_server()
    try:
        realtime = await env.connect_client()
        with tempfile.TemporaryDirectory(prefix="tempoconf-replay-") as tmp:
            database = Path(tmp) / "tempoconf.db"
            store = Store(f"sqlite:///{database}", migrate=True)
            try:
                async with build_worker(
                    env.client,
                    store,
                    task_queue=TASK_QUEUE,
                    continue_as_new_after_events=CONTINUE_AS_NEW_AFTER_EVENTS,
                ):
                    bench = Bench(env.client, realtime, store, database)
                    for name in names:
                        bench.scenario = name
                        started = time.monotonic()
                        handle = await SCENARIOS[name](bench)
                        files = await save(realtime, name, handle, folder)
                        sizes = ", ".join(
                            f"{file.name} {file.stat().st_size // 1024} KiB" for file in files
                        )
                        print(f"{name}: {sizes} ({time.monotonic() - started:.1f}s)", flush=True)
            finally:
                store.close()
    finally:
        await env.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.workflows.histories.generate",
        description="Run the replay scenarios on a dev server and save their histories.",
    )
    parser.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO", help=f"default: all of {', '.join(SCENARIOS)}"
    )
    parser.add_argument(
        "--out", type=Path, default=HISTORIES, help="folder to save into (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    names = args.scenarios or list(SCENARIOS)
    # Some scenarios fail activities on purpose (a refused request): no tracebacks for those.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    if not args.scenarios:
        # A full run leaves no history of a scenario that no longer exists.
        for stale in args.out.glob("*.json"):
            if scenario_of(stale) not in SCENARIOS:
                stale.unlink()
    asyncio.run(generate(names, args.out))
    total = sum(file.stat().st_size for file in args.out.glob("*.json"))
    print(f"{len(names)} scenario(s) saved under {args.out} ({total // 1024} KiB in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
