"""`tempoconf demo`: the dev stack, a simulated fleet, and two rollouts with live progress.

Act one rolls examples/rollout.json out stage by stage until it is promoted. Act two rolls out a
bad value (examples/demo-bad-value.json): valid for the schema, but the simulated servers fail
with it (cli/fleet.py, `failure_ratio`); the canaries report errors, the health check's sequential
judge finds a regression (its confidence interval of the error rate's increase lies above the
tolerance), the rollout reverts, and the demo says how many hosts ever ran it, as the fleet observed.

The demo has its own config, `demo/server_config` (the examples' schema), so the README's
walkthrough of `myproject/server_config` starts clean after `make run`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

from tempoconf.canonical import version_id
from tempoconf.cli._common import (
    SUCCESSFUL_OUTCOMES,
    die,
    example_path,
    tempoconf_command,
    temporal_command,
    workflow_ui_url,
)
from tempoconf.cli.components import run_dev_stack
from tempoconf.cli.demo_view import FleetDisplay, LiveView
from tempoconf.cli.devstack import DevStack
from tempoconf.cli.fleet import SERVER_LOAD, FleetProcess, FleetSpec, failure_ratio
from tempoconf.durations import format_duration, parse_duration
from tempoconf.operations.start import plan_rollout
from tempoconf.resolution import STABLE
from tempoconf.rollout.health_specs import ReportsCheckSpec
from tempoconf.rollout.outcomes import RolloutEnding, await_rollout_ending
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.schema_validation import value_problems
from tempoconf.temporal.names import WORKFLOW_TYPE, rollout_workflow_id

__all__ = [
    "check_text",
    "demo_command",
    "load_example",
    "next_steps",
    "run_demo",
    "second_act_verdict",
]

DEMO_NAMESPACE = "default"
DEMO_PATH = "demo/server_config"
DEMO_ACTOR = "tempoconf-demo"
FIRST_ROLLOUT = "rollout.json"
BAD_ROLLOUT = "demo-bad-value.json"
MANUAL_ROLLOUT = "demo-manual.json"
PROGRESS_INTERVAL_SECONDS = 0.5
SETTLE_SECONDS = 15.0
FLEET_START_SECONDS = 30.0
FOLLOW_INTERVAL_SECONDS = 1.0
HOSTS_LISTED = 12


def load_example(name: str) -> Any:
    """An example file shipped with the package (examples/ of the repository), parsed."""
    path = example_path(name)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        die(
            f"cannot read the example {path}: {error.strerror or error} (is the package installed whole?)"
        )


def demo_request(name: str, *, cooldown: str | None = None) -> dict[str, Any]:
    """An example request aimed at the demo's own config (and, with `cooldown`, every hold set
    to it); a broken example fails here, loudly."""
    request = dict(load_example(name))
    request["path"], request["namespace"] = DEMO_PATH, DEMO_NAMESPACE
    if cooldown is not None:
        request["default_cooldown_time"] = cooldown
        request["stages"] = [{**stage, "cooldown": cooldown} for stage in request["stages"]]
    parse_rollout_request(request)
    return request


def demo_command(args: argparse.Namespace) -> int:
    if args.clients < 1:
        die("--clients must be at least 1", exit_code=2)
    try:
        parse_duration(args.cooldown)
    except ValueError as error:
        die(f"--cooldown: {error}", exit_code=2)
    if args.exit_after_rollout and args.exit_after_demo:
        die(
            "--exit-after-rollout (ends after the first rollout) and --exit-after-demo (ends after "
            "both) contradict each other: give one",
            exit_code=2,
        )

    async def demo(stack: DevStack) -> int:
        return await run_demo(
            stack,
            clients=args.clients,
            cooldown=args.cooldown,
            exit_after_rollout=args.exit_after_rollout,
            happy_path_only=args.happy_path_only,
            exit_after_demo=args.exit_after_demo,
        )

    return run_dev_stack(args, demo, command="demo")


async def run_demo(
    stack: DevStack,
    *,
    clients: int,
    cooldown: str,
    exit_after_rollout: bool = False,
    happy_path_only: bool = False,
    exit_after_demo: bool = False,
) -> int:
    """The demo on a running stack; returns the exit code: 0 when the first rollout was promoted
    and (unless `happy_path_only`) the bad one was caught by the canaries and reverted."""
    schema = load_example("server_config.schema.json")
    stable_value = load_example("server_config.stable.json")
    request = demo_request(FIRST_ROLLOUT, cooldown=cooldown)
    bad_request = demo_request(BAD_ROLLOUT)
    problems = value_problems(schema, bad_request["value"])
    if problems:  # the second act's point is a value the schema lets through
        die(f"examples/{BAD_ROLLOUT}: its value must be valid for the schema: {problems[0]}")

    print(f"\n1. register the schema of {DEMO_PATH} (examples/server_config.schema.json)")
    stack.store.set_schema(DEMO_NAMESPACE, DEMO_PATH, schema, actor=DEMO_ACTOR, reason="demo")

    print(f"2. make {json.dumps(stable_value)} the stable value (a rollout without stages)")
    if not await _ensure_stable(stack, stable_value):
        return 1

    print(f"3. start a fleet of {clients} simulated clients polling {stack.api_url}")
    async with FleetProcess(
        FleetSpec(stack.api_url, DEMO_PATH, namespace=DEMO_NAMESPACE, size=clients)
    ) as fleet:
        if not await fleet.wait_all_served(timeout=FLEET_START_SECONDS):
            if fleet.served() == 0:
                print(
                    f"   no client was served within {FLEET_START_SECONDS:.0f}s; errors: {fleet.errors()}"
                )
                return 1
            print(
                f"   {fleet.served()} of {clients} clients served so far (a busy machine); going on"
            )
        print(f"   every client runs the stable version; {fleet.canaries} are on channel canary")

        view = LiveView(sys.stdout)
        promoted = await _first_act(stack, fleet, view, request, cooldown=cooldown)
        code = 0 if promoted else 1
        if exit_after_rollout:
            return code
        if not happy_path_only:
            if promoted:
                code = 0 if await _second_act(stack, fleet, view, bad_request, schema) else 1
            else:
                view.log("the second rollout (a bad value) needs the first one promoted: skipped")
        if exit_after_demo:
            return code
        view.log(next_steps(stack))
        # The fleet keeps polling: a rollout started, halted or approved from another terminal
        # shows here, until Ctrl-C stops the stack.
        tasks = {
            asyncio.ensure_future(_follow_fleet(stack, fleet, view)),
            # raises DevStackError when a component stops: the live view must not hide that
            asyncio.ensure_future(stack.wait()),
        }
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return code


def _stages_text(request: dict[str, Any]) -> str:
    return " → ".join(stage.display_name for stage in parse_rollout_request(request).all_stages)


async def _start_workflow(stack: DevStack, request: dict[str, Any]) -> WorkflowHandle[Any, Any]:
    """Start a rollout of the demo's config, with the Web UI's summary and details that
    `tempoconf rollout start` gives it (the change over stable, the stages, the author): the
    same preview, read from the stack's store."""
    preview = await plan_rollout(stack.store, request)
    return await stack.client.start_workflow(
        WORKFLOW_TYPE,
        request,
        id=rollout_workflow_id(DEMO_NAMESPACE, DEMO_PATH),
        task_queue=stack.settings.task_queue,
        static_summary=preview.summary(),
        static_details=preview.details(),
    )


async def _start(stack: DevStack, request: dict[str, Any]) -> WorkflowHandle[Any, Any]:
    workflow_id = rollout_workflow_id(DEMO_NAMESPACE, DEMO_PATH)
    handle = await _start_workflow(stack, request)
    print(
        f"   Web UI: {workflow_ui_url(stack.settings, workflow_id, handle.result_run_id)}\n",
        flush=True,
    )
    return handle


def _ended(view: LiveView, result: dict[str, Any] | None) -> str | None:
    """Log how a rollout ended; its outcome."""
    outcome = result.get("outcome") if result else None
    view.log(
        f"\nrollout ended: {outcome}"
        + (f" ({result.get('reason')})" if result and result.get("reason") else "")
    )
    return outcome


async def _first_act(
    stack: DevStack, fleet: FleetProcess, view: LiveView, request: dict[str, Any], *, cooldown: str
) -> bool:
    """The happy path: the example rollout, stage by stage, promoted. True when it was."""
    stable = version_id(load_example("server_config.stable.json"))
    new_version = version_id(request["value"])
    print(
        f"4. roll out {json.dumps(request['value'])} as version {new_version}: "
        f"{_stages_text(request)}, {cooldown} hold each (examples/{FIRST_ROLLOUT})"
    )
    handle = await _start(stack, request)
    result = await _watch(handle, fleet, view, stable=stable, new=new_version)
    return _ended(view, result) in SUCCESSFUL_OUTCOMES


async def _second_act(
    stack: DevStack,
    fleet: FleetProcess,
    view: LiveView,
    request: dict[str, Any],
    schema: dict[str, Any],
) -> bool:
    """A bad value: the canaries report errors, the check fails, the rollout reverts. True when
    the canaries caught it (reverted, and no host outside the canary channel ever ran it)."""
    stable = _stable_version(stack)
    value = request["value"]
    bad = version_id(value)
    check = request["health"][0]
    bounds = schema.get("properties", {}).get("max_connections", {})
    print(
        f"\n5. now a bad value: roll out {json.dumps(value)} as version {bad}: "
        f"{_stages_text(request)}, {request['default_cooldown_time']} hold each "
        f"(examples/{BAD_ROLLOUT})"
    )
    for line in textwrap.wrap(
        f"The schema allows max_connections from {bounds.get('minimum')} to "
        f"{bounds.get('maximum')}, so the rollout starts. But each simulated server carries "
        f"{SERVER_LOAD} open connections: with max_connections {value.get('max_connections')} "
        f"it refuses the rest, and reports {failure_ratio(value):.0%} of its operations as "
        f"failed. {check_text(check)}",
        width=96,
    ):
        print(f"   {line}")
    handle = await _start(stack, request)
    result = await _watch(handle, fleet, view, stable=stable, new=bad, new_label="bad")
    outcome = _ended(view, result)
    await fleet.snapshot_after()
    caught, lines = second_act_verdict(
        fleet.seen(bad),
        canaries=fleet.canary_ids,
        size=fleet.size,
        outcome=outcome,
        back_on_stable=fleet.counts().get((stable, STABLE), 0),
    )
    for line in lines:
        view.log(line)
    return caught


def check_text(check: Mapping[str, Any]) -> str:
    """What the second act's health check does, in a sentence: its judge, else its threshold."""
    spec = ReportsCheckSpec.model_validate(check)
    when = (
        f"checked every {format_duration(spec.interval)} during the hold"
        if spec.interval is not None
        else "checked at the end of the hold"
    )
    if spec.judge is None:
        limits = []
        if spec.max_error_ratio is not None:
            limits.append(f"at most {spec.max_error_ratio:g}")
        if spec.max_baseline_factor is not None:
            limits.append(f"at most {spec.max_baseline_factor:g} times the baseline's")
        return f"The health check: the stage's reports, error ratio {' and '.join(limits)}, {when}."
    judge = spec.judge.sequential
    bounds = []
    if judge.max_increase is not None:
        bounds.append(
            f"of the error rate's increase lies wholly above max_increase "
            f"{judge.max_increase * 100:g} pp"
        )
    if judge.max_latency_increase_ms is not None:
        bounds.append(
            f"of the mean latency's increase lies wholly above max_latency_increase_ms "
            f"{judge.max_latency_increase_ms:g} ms"
        )
    return (
        f"The health check: the stage's reports against the baseline's (the hosts outside the "
        f"stage), {when}; a regression, which reverts the rollout, is when the "
        f"{judge.confidence:.0%} confidence interval {' or the one '.join(bounds)}."
    )


def second_act_verdict(
    seen: Mapping[str, Any] | None,
    *,
    canaries: list[str],
    size: int,
    outcome: str | None,
    back_on_stable: int,
) -> tuple[bool, list[str]]:
    """(caught by the canaries, what to say) from what the fleet observed of the bad version."""
    hosts = set(seen["hosts"]) if seen else set()
    error_hosts = set(seen["error_hosts"]) if seen else set()
    canary_set = set(canaries)
    others = sorted(hosts - canary_set)
    listed = sorted(hosts)[:HOSTS_LISTED]
    shown = ", ".join(listed) + (
        f" and {len(hosts) - len(listed)} more" if len(hosts) > len(listed) else ""
    )
    if not hosts:
        return False, [f"the rollout ended {outcome} before any host ran the bad version"]
    exposure = float(seen["exposure"]) if seen else 0.0
    running = bool(seen and seen["running"])
    measured = (
        f"   seen by the fleet: {len(hosts)} of {size} hosts ever ran it ({shown}), "
        + ("all on channel canary" if not others else f"{len(others)} of them not canaries")
        + f"; {back_on_stable} of {size} now run the stable version"
    )
    if outcome != "reverted":
        return False, [f"the canary did not catch it: the rollout ended {outcome}", measured]
    if others:
        return False, [
            f"reverted, but not by the canary alone: {len(others)} host(s) outside the canary "
            f"channel ran it too",
            measured,
        ]
    if running:
        return False, [
            f"reverted, but some host still ran it {exposure:.1f} s after the first one got it",
            measured,
        ]
    reported = len(error_hosts & canary_set)
    ran = "" if len(hosts) == len(canary_set) else f" ({len(hosts)} ran it)"
    # The reason above counts the clients the check had reports from when it tripped; the fleet
    # counts on, while the canaries still on the bad version report errors: say which is which.
    until = "by the time every host was back on stable" if back_on_stable == size else "by now"
    return True, [
        f"the canary caught it: reverted {exposure:.1f} s after the first one got it; "
        "no other host ever ran it",
        f"   counted by the check when it tripped: the client(s) in its reason above; counted by "
        f"the fleet {until}: {reported}/{len(canary_set)} canaries reported errors{ran}",
        measured,
    ]


def next_steps(stack: DevStack) -> str:
    """What to try next, copy-pasteable: the Temporal CLI with the right --address, and tempoconf."""
    temporal, tempoconf = temporal_command(), tempoconf_command()
    address = f"--address {stack.temporal_address}"
    workflow_id = rollout_workflow_id(DEMO_NAMESPACE, DEMO_PATH)
    manual = example_path(MANUAL_ROLLOUT)
    with contextlib.suppress(ValueError):
        manual = manual.relative_to(Path.cwd())
    return "\n".join(
        [
            "",
            "The stack stays up, and the fleet keeps polling, until Ctrl-C.",
            f"  Web UI   {stack.ui_url}/namespaces/{stack.settings.temporal_namespace}/workflows",
            "Try next, in another terminal:",
            f"  {stack.shell_exports()}",
            "  # a rollout that waits for your approval after 25% of the fleet:",
            f"  {temporal} workflow start {address} --type {WORKFLOW_TYPE} "
            f"--task-queue {stack.settings.task_queue} --fail-existing --workflow-id '{workflow_id}' "
            f"--input-file {manual}",
            f"  {tempoconf} rollout status {DEMO_PATH} --watch",
            f"  {temporal} workflow update execute {address} -w '{workflow_id}' --name approve",
            "  # or stop it in an emergency, or skip what is left of it:",
            f"  {temporal} workflow signal {address} -w '{workflow_id}' --name halt "
            """--input '{"reason": "error rate on the canary"}'""",
            f"  {temporal} workflow signal {address} -w '{workflow_id}' --name bypass "
            """--input '{"reason": "hotfix"}'""",
            f"  {tempoconf} get {DEMO_PATH} --client host-0001 --channel canary",
            f"  {tempoconf} history {DEMO_PATH}",
            "",
        ]
    )


async def _ensure_stable(stack: DevStack, value: Any) -> bool:
    """Make `value` stable through a stage-less rollout (audited like any other); False on failure."""
    current = stack.store.get_stable(DEMO_NAMESPACE, DEMO_PATH)
    if current is not None and current.version == version_id(value):
        print(f"   already stable: version {current.version}")
        return True
    lock = stack.store.get_lock(DEMO_NAMESPACE, DEMO_PATH)
    if lock is not None:
        # A rollout left running by an earlier demo (its state lives in the data dir): cancel it,
        # which reverts its clients, then go on.
        print(f"   an earlier rollout is still running ({lock.workflow_id}); cancelling it")
        earlier = stack.client.get_workflow_handle(lock.workflow_id, run_id=lock.run_id)
        try:
            await earlier.cancel()
            ending = await asyncio.wait_for(await_rollout_ending(earlier), 30)
            print(f"   it ended: {ending.outcome}")
        except Exception as error:  # noqa: BLE001 - ended either way; say how and go on
            print(f"   it ended: {type(error).__name__}")
    request = {
        "path": DEMO_PATH,
        "namespace": DEMO_NAMESPACE,
        "value": value,
        "stages": [],
        "author": DEMO_ACTOR,
        "message": "the demo's stable value",
    }
    handle = await _start_workflow(stack, request)
    try:
        ending = await asyncio.wait_for(await_rollout_ending(handle), 60)
    except TimeoutError as error:
        print(f"   could not set the stable value: {error}")
        return False
    if ending.result is None:
        print(f"   could not set the stable value: {ending.reason}")
        return False
    print(f"   {ending.outcome}: version {ending.result.version} is stable")
    return ending.outcome == "promoted"


async def _watch(
    handle: WorkflowHandle[Any, Any],
    fleet: FleetProcess,
    view: LiveView,
    *,
    stable: str,
    new: str,
    new_label: str = "new",
) -> dict[str, Any] | None:
    """Show the fleet while the rollout runs (a log line per change); return the result."""
    result_task: asyncio.Task[RolloutEnding] = asyncio.ensure_future(await_rollout_ending(handle))
    display = FleetDisplay(view, fleet.size, new_label=new_label)
    try:
        while True:
            done = result_task.done()
            display.show(await _query_status(handle), fleet.counts(), stable=stable, new=new)
            if done:
                break
            await asyncio.wait({result_task}, timeout=PROGRESS_INTERVAL_SECONDS)
        # Keep watching for a while after the end, until the whole fleet runs one version again.
        progress = await _query_status(handle)
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            counts = fleet.counts()
            display.show(progress, counts, stable=stable, new=new)
            if len(counts) == 1:
                break
            await asyncio.sleep(PROGRESS_INTERVAL_SECONDS)
        ending = result_task.result()
        if ending.result_json is None:
            view.log(f"the rollout failed: {ending.reason}")
        return ending.result_json
    finally:
        result_task.cancel()


async def _follow_fleet(stack: DevStack, fleet: FleetProcess, view: LiveView) -> None:
    """Until cancelled (Ctrl-C): the fleet and whichever rollout of the demo config runs."""
    display = FleetDisplay(
        view, fleet.size, idle="no rollout running", footer="  (Ctrl-C stops the stack)"
    )
    while True:
        stable = _stable_version(stack)
        lock = stack.store.get_lock(DEMO_NAMESPACE, DEMO_PATH)
        progress: dict[str, Any] = {}
        if lock is not None:
            progress = await _query_status(
                stack.client.get_workflow_handle(lock.workflow_id, run_id=lock.run_id)
            )
        new = progress.get("version") or (lock.version if lock is not None else None)
        display.show(progress, fleet.counts(), stable=stable, new=new)
        await asyncio.sleep(FOLLOW_INTERVAL_SECONDS)


def _stable_version(stack: DevStack) -> str:
    record = stack.store.get_stable(DEMO_NAMESPACE, DEMO_PATH)
    return record.version if record is not None else ""


async def _query_status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    try:
        return dict(await handle.query("status"))
    except Exception:  # noqa: BLE001 - a missed query only means a line without the stage
        return {}
