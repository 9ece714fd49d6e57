"""Rollouts at scale: 200 concurrent `ConfigRollout`s (3 stages, 1 s holds, a reports health check
at the end of each hold) against 200 no-op workflows that run the same number of activities and
1 s timers, on the same Temporal dev server, in the same run. Goal: rollouts/no-op wall time
<= 1.5.

The rollouts run on the real worker (`cli.worker.build_worker`, in this process, over an SQLite
store in a temporary directory); the no-op workflows (bench/_noop_workflow.py) on a worker with
the same settings (`cli.worker.worker_options`) on a task queue of their own. One rollout and one
no-op workflow run first, alone: the rollout's history gives the activity and timer counts the
no-op workflow copies, and both warm the workers. Then four phases, each starting all its
workflows at once: no-op, rollouts, rollouts, no-op. bench/README.md defines every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import secrets
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import NAMESPACE, bounded, cpu_seconds, database, emit, log, stdout_to_stderr
from _noop_workflow import NOOP_WORKFLOW, NoOpInput, NoOpWorkflow, noop_activity
from _scale import TINY_FLAG, TINY_HELP
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tempoconf.cli.worker import build_worker, worker_options
from tempoconf.rollout.outcomes import await_rollout_ending
from tempoconf.store.store import Store
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import SEARCH_ATTRIBUTES, WORKFLOW_TYPE
from tempoconf.temporal.payloads import DATA_CONVERTER

ROLLOUTS = 200
TINY_ROLLOUTS = 4
GOAL_RATIO = 1.5
PHASES = ("no-op", "rollouts", "rollouts", "no-op")
HOLD_SECONDS = 1.0
STAGES = [{"channel": "canary"}, {"percentile": 10}, {"percentile": 50}]
# The health check a plan carries by default (examples/rollout.json), judged at each hold's end;
# no client reports in this benchmark, so no data passes.
HEALTH = [{"kind": "reports", "max_error_ratio": 0.05, "on_no_data": "pass"}]
PHASE_TIMEOUT = 240.0
RUN_TIMEOUT = 1200.0


def rollout_request(index: int, tag: str) -> dict[str, Any]:
    return {
        "path": f"bench/rollouts/{tag}/config-{index:03d}",
        "namespace": NAMESPACE,
        "value": {"config": index, "run": tag},
        "default_cooldown_time": f"{HOLD_SECONDS:g}s",
        "default_expiration_time": "1h",
        "stages": STAGES,
        "health": HEALTH,
        "author": "bench",
        "message": "rollouts benchmark",
    }


async def history_profile(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    """Events, activities and timers of a run, and per activity type its schedule-to-start
    (waiting for a worker slot) and start-to-close (running) seconds."""
    scheduled: dict[int, tuple[str, float]] = {}
    started: dict[int, float] = {}
    waits: dict[str, list[float]] = defaultdict(list)
    runs: dict[str, list[float]] = defaultdict(list)
    task_started: dict[int, float] = {}
    tasks: list[float] = []
    retried: Counter[str] = Counter()
    events = timers = retries = 0
    async for event in handle.fetch_history_events():
        events += 1
        at = event.event_time.ToDatetime().timestamp()
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            task_started[event.event_id] = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            done_task = event.workflow_task_completed_event_attributes
            tasks.append(at - task_started[done_task.started_event_id])
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = (name, at)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            if attributes.attempt > 1:
                retries += 1
                cause = attributes.last_failure
                reason = cause.message or cause.cause.message or "?"
                retried[f"{name}: {reason[:100]}"] += 1
            name, when = scheduled[attributes.scheduled_event_id]
            waits[name].append(at - when)
            started[attributes.scheduled_event_id] = at
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            name, _ = scheduled[done.scheduled_event_id]
            runs[name].append(at - started[done.scheduled_event_id])
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            timers += 1
    return {
        "events": events,
        "activities": len(scheduled),
        "timers": timers,
        "retries": retries,
        "retried": retried,
        "workflow_tasks": tasks,
        "waits": dict(waits),
        "runs": dict(runs),
    }


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


def dev_server_pid() -> int:
    """The Temporal dev server this process started (its child named `temporal`)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            parent = int(text.rpartition(")")[2].split()[1])
            if name == "temporal" and parent == os.getpid():
                return int(stat.parent.name)
    raise SystemExit("cannot find the Temporal dev server's process")


async def run_phase(
    name: str,
    start: Callable[[int], Awaitable[WorkflowHandle[Any, Any]]],
    count: int,
    server: int,
    ended: Callable[[WorkflowHandle[Any, Any]], Awaitable[Any]],
) -> tuple[dict[str, Any], list[WorkflowHandle[Any, Any]]]:
    """Start `count` workflows at once (`start(i)` starts number i) and wait for all: the wall
    time from before the first start to the last close, each workflow's own start-to-close
    (server times), and the CPU seconds this process (the worker) and the dev server used."""
    log(f"{name}: starting {count} workflows")
    cpu_before = (cpu_seconds(os.getpid()) or 0.0, cpu_seconds(server) or 0.0)
    began = time.time()
    handles: list[WorkflowHandle[Any, Any]] = await asyncio.gather(
        *(start(i) for i in range(count))
    )
    started = time.time()
    results = await asyncio.gather(*(ended(handle) for handle in handles))
    log(f"{name}: all {count} done after {time.time() - began:.1f} s")
    cpu_after = (cpu_seconds(os.getpid()) or 0.0, cpu_seconds(server) or 0.0)
    descriptions = await asyncio.gather(*(handle.describe() for handle in handles))
    durations = [
        (d.close_time - d.start_time).total_seconds()
        for d in descriptions
        if d.close_time is not None
    ]
    last_close = max(d.close_time.timestamp() for d in descriptions if d.close_time is not None)
    return {
        "wall_s": round(last_close - began, 3),
        "start_calls_s": round(started - began, 3),
        "p50_s": percentile(durations, 0.50),
        "p99_s": percentile(durations, 0.99),
        "max_s": percentile(durations, 1.0),
        "worker_cpu_s": round(cpu_after[0] - cpu_before[0], 1),
        "server_cpu_s": round(cpu_after[1] - cpu_before[1], 1),
        "results": results,
    }, handles


async def _noop_result(handle: WorkflowHandle[Any, Any]) -> Any:
    return await handle.result()


def combined(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """The phases of one kind as one: each figure's mean, and every phase's wall time."""
    return {
        **{
            name: round(statistics.fmean(phase[name] for phase in phases), 3)
            for name in phases[0]
            if all(isinstance(phase[name], int | float) for phase in phases)
        },
        "phases_wall_s": [phase["wall_s"] for phase in phases],
    }


def activity_profile(profiles: list[dict[str, Any]]) -> dict[str, Any]:
    """Per activity type over every run: count per run, mean wait for a worker, mean run time."""
    waits: dict[str, list[float]] = defaultdict(list)
    runs: dict[str, list[float]] = defaultdict(list)
    for profile in profiles:
        for name, values in profile["waits"].items():
            waits[name].extend(values)
        for name, values in profile["runs"].items():
            runs[name].extend(values)
    return {
        name: {
            "per_run": round(len(waits[name]) / len(profiles), 2),
            "schedule_to_start_mean_s": round(statistics.fmean(waits[name]), 4),
            "start_to_close_mean_s": round(statistics.fmean(runs[name]), 4) if runs[name] else None,
            "start_to_close_p99_s": percentile(runs[name], 0.99),
        }
        for name in sorted(waits)
    }


async def profiles_of(handles: list[WorkflowHandle[Any, Any]]) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(20)

    async def one(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
        async with limit:
            return await history_profile(handle)

    return await asyncio.gather(*(one(handle) for handle in handles))


def history_figures(profiles: list[dict[str, Any]]) -> dict[str, Any]:
    tasks = [seconds for profile in profiles for seconds in profile["workflow_tasks"]]
    return {
        "history_events_mean": round(statistics.fmean(p["events"] for p in profiles), 1),
        # Activity attempts past the first (a timeout under load, say): none expected.
        "activity_retries": sum(p["retries"] for p in profiles),
        # ... by activity and the failure of the attempt before (at most five kinds).
        "retried_because": dict(
            sum((p["retried"] for p in profiles), Counter[str]()).most_common(5)
        ),
        "workflow_tasks_per_run": round(len(tasks) / len(profiles), 1),
        "workflow_task_mean_s": round(statistics.fmean(tasks), 4),
        "workflow_task_p99_s": percentile(tasks, 0.99),
    }


async def bench(client: Client, store: Store, count: int) -> dict[str, Any]:
    tag = secrets.token_hex(3)
    rollout_queue = f"tempoconf-bench-{tag}"
    noop_queue = f"bench-noop-{tag}"

    async def start_rollout(i: int) -> WorkflowHandle[Any, Any]:
        request = rollout_request(i, tag)
        return await client.start_workflow(
            WORKFLOW_TYPE,
            request,
            id=f"rollout:{NAMESPACE}/{request['path']}",
            task_queue=rollout_queue,
        )

    server = dev_server_pid()
    async with (
        build_worker(client, store, task_queue=rollout_queue),
        Worker(
            client,
            task_queue=noop_queue,
            workflows=[NoOpWorkflow],
            activities=[noop_activity],
            **worker_options(),
        ),
    ):
        # Alone first: the rollout's shape (the no-op copies it) and warm workers.
        calibration = await start_rollout(count)
        outcome = (await await_rollout_ending(calibration)).outcome
        shape = await history_profile(calibration)
        log(
            f"one rollout alone: {outcome}, {shape['activities']} activities, "
            f"{shape['timers']} timers, {shape['events']} history events"
        )
        given = NoOpInput(
            activities=shape["activities"], timers=shape["timers"], timer_seconds=HOLD_SECONDS
        )

        async def start_noop(i: int) -> WorkflowHandle[Any, Any]:
            return await client.start_workflow(
                NOOP_WORKFLOW, given, id=f"bench-noop-{tag}-{i:03d}", task_queue=noop_queue
            )

        await (await start_noop(count)).result()
        # Floor, rollouts, rollouts, floor: the dev server's store grows and the machine's load
        # drifts over a run, and this order gives both kinds the same share of each.
        phases: dict[str, list[dict[str, Any]]] = {"no-op": [], "rollouts": []}
        handles: dict[str, list[WorkflowHandle[Any, Any]]] = {"no-op": [], "rollouts": []}
        for number, kind in enumerate(PHASES, start=1):
            start = start_noop if kind == "no-op" else start_rollout
            # A rollout's end is read as the CLI reads it (a reverted one fails its workflow).
            ended = _noop_result if kind == "no-op" else await_rollout_ending
            async with bounded(PHASE_TIMEOUT, f"phase {number} ({kind})"):
                figures, started = await run_phase(
                    f"{kind} ({number}/{len(PHASES)})",
                    lambda i, start=start, number=number: start(i + (number + 1) * count),
                    count,
                    server,
                    ended,
                )
            phases[kind].append(figures)
            handles[kind].extend(started)
        log("reading the histories")
        noop_profiles = await profiles_of(handles["no-op"])
        rollout_profiles = await profiles_of(handles["rollouts"])
    outcomes: dict[str, int] = defaultdict(int)
    for phase in phases["rollouts"]:
        for ending in phase.pop("results"):
            outcomes[ending.outcome] += 1
    for phase in phases["no-op"]:
        phase.pop("results")
    rollouts, noop = combined(phases["rollouts"]), combined(phases["no-op"])
    ratio = rollouts["wall_s"] / noop["wall_s"]
    # CPU seconds (worker and dev server) per phase moves less with the machine's load than wall
    # time: a second look at the same cost, reported beside the goal's ratio.
    cpu_ratio = (rollouts["worker_cpu_s"] + rollouts["server_cpu_s"]) / (
        noop["worker_cpu_s"] + noop["server_cpu_s"]
    )
    return {
        "activities_per_rollout": shape["activities"],
        "timers_per_rollout": shape["timers"],
        "rollouts": {**rollouts, **history_figures(rollout_profiles), "outcomes": dict(outcomes)},
        "noop": {**noop, **history_figures(noop_profiles)},
        "ratio": round(ratio, 3),
        "cpu_ratio": round(cpu_ratio, 3),
        "activities": activity_profile(rollout_profiles),
        "noop_activities": activity_profile(noop_profiles),
        "goal_met": ratio <= GOAL_RATIO and set(outcomes) == {"promoted"},
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=ROLLOUTS)
    parser.add_argument(
        TINY_FLAG, action="store_true", help=f"{TINY_ROLLOUTS} rollouts: {TINY_HELP}"
    )
    args = parser.parse_args()
    if args.tiny:
        args.rollouts = TINY_ROLLOUTS
    # The whole run: the dev server's banner and SDK Core's warnings (a slow workflow task under
    # this load) go to stdout, which is the one JSON line's.
    with stdout_to_stderr(), database("sqlite") as url:
        store = Store(url, migrate=True)
        try:
            async with bounded(RUN_TIMEOUT, "the rollouts benchmark"):
                log("starting the Temporal dev server")
                env = await WorkflowEnvironment.start_local(
                    dev_server_existing_path=str(temporal_cli_path()),
                    search_attributes=list(SEARCH_ATTRIBUTES),
                    dev_server_extra_args=["--log-level", "error"],
                    # The converter `tempoconf worker` connects with (tempoconf.temporal.payloads).
                    data_converter=DATA_CONVERTER,
                )
                async with env:
                    figures = await bench(env.client, store, args.rollouts)
        finally:
            store.close()
    emit(
        {
            "bench": "rollouts",
            "backend": "sqlite",
            "workflows": args.rollouts,
            "rollout": f"{len(STAGES)} stages, {HOLD_SECONDS:g} s holds, reports check",
            **figures,
            "goal": f"rollouts wall time <= {GOAL_RATIO:g}x no-op wall time, every rollout promoted",
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
