"""`tempoconf demo`: the dev stack, a simulated fleet, and the example rollout with live progress."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from temporalio.client import WorkflowFailureError, WorkflowHandle

from cli._common import (
    SUCCESSFUL_OUTCOMES,
    die,
    workflow_ui_url,
)
from cli._format import relative_text
from cli.components import run_dev_stack
from cli.devstack import DevStack, tempoconf_command, temporal_command
from cli.fleet import UNSERVED, FleetProcess
from tempoconf.canonical import version_id
from tempoconf.durations import parse_duration
from tempoconf.request import parse_rollout_request
from tempoconf.temporal import WORKFLOW_TYPE, rollout_workflow_id

__all__ = ["LiveView", "demo_command", "fleet_table", "load_example", "next_steps", "run_demo"]

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
DEMO_NAMESPACE = "default"
DEMO_PATH = "myproject/server_config"
DEMO_ACTOR = "tempoconf-demo"
PROGRESS_INTERVAL_SECONDS = 0.5
SETTLE_SECONDS = 15.0
FLEET_START_SECONDS = 30.0
FOLLOW_INTERVAL_SECONDS = 1.0
BAR_WIDTH = 40


def load_example(name: str) -> Any:
    """An example file of the repository's examples/ directory, parsed."""
    path = EXAMPLES_DIR / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        die(
            f"cannot read the example {path}: {error.strerror or error} (the demo runs from a source checkout)"
        )


def demo_command(args: argparse.Namespace) -> int:
    if args.clients < 1:
        die("--clients must be at least 1", exit_code=2)
    try:
        parse_duration(args.cooldown)
    except ValueError as error:
        die(f"--cooldown: {error}", exit_code=2)

    async def demo(stack: DevStack) -> int:
        return await run_demo(
            stack,
            clients=args.clients,
            cooldown=args.cooldown,
            exit_after_rollout=args.exit_after_rollout,
        )

    return run_dev_stack(args, demo, command="demo")


async def run_demo(
    stack: DevStack, *, clients: int, cooldown: str, exit_after_rollout: bool
) -> int:
    """The demo on a running stack; returns the exit code (0 when the rollout was promoted)."""
    schema = load_example("server_config.schema.json")
    stable_value = load_example("server_config.stable.json")
    request = load_example("rollout.json")
    request["default_cooldown_time"] = cooldown
    for stage in request["stages"]:
        stage["cooldown"] = cooldown
    parse_rollout_request(request)  # the example must be valid; a broken one fails here, loudly

    print(f"\n1. register the schema of {DEMO_PATH} (examples/server_config.schema.json)")
    stack.store.set_schema(DEMO_NAMESPACE, DEMO_PATH, schema, actor=DEMO_ACTOR, reason="demo")

    print(f"2. make {json.dumps(stable_value)} the stable value (a rollout without stages)")
    if not await _ensure_stable(stack, stable_value):
        return 1

    print(f"3. start a fleet of {clients} simulated clients polling {stack.api_url}")
    async with FleetProcess(
        stack.api_url, DEMO_PATH, namespace=DEMO_NAMESPACE, size=clients
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

        new_version = version_id(request["value"])
        stages = " → ".join(
            stage.display_name for stage in parse_rollout_request(request).all_stages
        )
        print(
            f"4. roll out {json.dumps(request['value'])} as version {new_version}: {stages}, {cooldown} hold each"
        )
        workflow_id = rollout_workflow_id(DEMO_NAMESPACE, DEMO_PATH)
        handle = await stack.client.start_workflow(
            WORKFLOW_TYPE,
            request,
            id=workflow_id,
            task_queue=stack.settings.task_queue,
            static_summary=f"demo: {DEMO_NAMESPACE}/{DEMO_PATH} → {new_version}",
        )
        print(
            f"   Web UI: {workflow_ui_url(stack.settings, workflow_id, handle.result_run_id)}\n",
            flush=True,
        )
        view = LiveView(sys.stdout)
        result = await _watch(handle, fleet, view, stable=version_id(stable_value), new=new_version)

        outcome = result.get("outcome") if result else None
        view.log(
            f"\nrollout ended: {outcome}"
            + (f" ({result.get('reason')})" if result and result.get("reason") else "")
        )
        code = 0 if outcome in SUCCESSFUL_OUTCOMES else 1
        if exit_after_rollout:
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


def next_steps(stack: DevStack) -> str:
    """What to try next, copy-pasteable: the Temporal CLI with the right --address, and tempoconf."""
    temporal, tempoconf = temporal_command(), tempoconf_command()
    address = f"--address {stack.temporal_address}"
    workflow_id = rollout_workflow_id(DEMO_NAMESPACE, DEMO_PATH)
    manual = EXAMPLES_DIR / "rollout-manual.json"
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
            f"--task-queue {stack.settings.task_queue} --workflow-id '{workflow_id}' "
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
    workflow_id = rollout_workflow_id(DEMO_NAMESPACE, DEMO_PATH)
    lock = stack.store.get_lock(DEMO_NAMESPACE, DEMO_PATH)
    if lock is not None:
        # A rollout left running by an earlier demo (its state lives in the data dir): cancel it,
        # which reverts its clients, then go on.
        print(f"   an earlier rollout is still running ({lock.workflow_id}); cancelling it")
        earlier = stack.client.get_workflow_handle(lock.workflow_id, run_id=lock.run_id)
        try:
            await earlier.cancel()
            await asyncio.wait_for(earlier.result(), 30)
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
    handle = await stack.client.start_workflow(
        WORKFLOW_TYPE, request, id=workflow_id, task_queue=stack.settings.task_queue
    )
    try:
        result = await asyncio.wait_for(handle.result(), 60)
    except (WorkflowFailureError, TimeoutError) as error:
        print(f"   could not set the stable value: {error}")
        return False
    print(f"   {result.get('outcome')}: version {result.get('version')} is stable")
    return result.get("outcome") == "promoted"


class LiveView:
    """The fleet table, redrawn in place on a terminal; elsewhere only the log lines are printed
    (one per change), so a log file or a pipe reads as a plain story."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.tty = stream.isatty()
        self._drawn = 0

    def log(self, text: str) -> None:
        """A line that stays (above the live table on a terminal)."""
        self._clear()
        print(text, file=self._stream, flush=True)
        self._drawn = 0

    def draw(self, lines: list[str]) -> None:
        if not self.tty:
            return
        self._clear()
        print("\n".join(lines), file=self._stream, flush=True)
        self._drawn = len(lines)

    def _clear(self) -> None:
        if self.tty and self._drawn:
            # Up to the first line of the table, then erase to the end of the screen.
            self._stream.write(f"\x1b[{self._drawn}F\x1b[J")


def fleet_table(
    counts: Counter[tuple[str, str]], *, stable: str, new: str | None, header: str
) -> list[str]:
    """One row per (version, stage) with its count and a bar: the fleet at a glance."""
    total = sum(counts.values()) or 1
    rows = []
    for (version, stage), n in sorted(
        counts.items(), key=lambda item: (item[0][0] != new, item[0][0], item[0][1])
    ):
        if (version, stage) == UNSERVED:
            name, where = "not served yet", ""
        else:
            tag = "new" if version == new else ("stable" if version == stable else "")
            name = f"{version[:8]} {tag}".rstrip()
            where = "as stable" if stage in ("stable", "-") else stage
        bar = "█" * max(1, round(BAR_WIDTH * n / total)) if n else ""
        rows.append(f"  {name:<16} {where:<18} {n:>5}  {bar}")
    return [header, f"  {'VERSION':<16} {'SERVED AS':<18} {'HOSTS':>5}", *rows]


def _rollout_header(progress: dict[str, Any]) -> str:
    if not progress:
        return "no rollout running"
    count = progress.get("stage_count") or 0
    index = progress.get("stage_index", -1)
    where = (
        f"stage {index + 1}/{count} {progress.get('stage_name')}"
        if index is not None and index >= 0 and count
        else "no stage yet"
    )
    hold = ""
    if progress.get("state") == "holding" and progress.get("hold_deadline"):
        hold = f", hold ends {relative_text(progress['hold_deadline'])}"
    target = f" → {progress['version']}" if progress.get("version") else ""
    return f"{progress.get('path')}{target}: {where}, {progress.get('state')}{hold}"


async def _watch(
    handle: WorkflowHandle[Any, Any],
    fleet: FleetProcess,
    view: LiveView,
    *,
    stable: str,
    new: str,
) -> dict[str, Any] | None:
    """Show the fleet while the rollout runs (a log line per change); return the result."""
    result_task: asyncio.Task[Any] = asyncio.ensure_future(handle.result())
    started = time.monotonic()
    last_line = ""

    def show(progress: dict[str, Any], counts: Counter[tuple[str, str]]) -> None:
        nonlocal last_line
        line = _progress_line(progress, counts, stable=stable, new=new)
        if line != last_line:
            view.log(f"[{time.monotonic() - started:6.1f}s] {line}")
            last_line = line
        view.draw(
            fleet_table(
                counts,
                stable=stable,
                new=new,
                header=f"fleet of {fleet.size}: {_rollout_header(progress)}",
            )
        )

    try:
        while True:
            done = result_task.done()
            show(await _query_status(handle), fleet.counts())
            if done:
                break
            await asyncio.wait({result_task}, timeout=PROGRESS_INTERVAL_SECONDS)
        # Keep watching for a while after the end, until the whole fleet runs one version again.
        progress = await _query_status(handle)
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            counts = fleet.counts()
            show(progress, counts)
            if len(counts) == 1:
                break
            await asyncio.sleep(PROGRESS_INTERVAL_SECONDS)
        try:
            return dict(result_task.result())
        except WorkflowFailureError as error:
            view.log(f"the rollout failed: {error.cause or error}")
            return None
    finally:
        result_task.cancel()


async def _follow_fleet(stack: DevStack, fleet: FleetProcess, view: LiveView) -> None:
    """Until cancelled (Ctrl-C): the fleet and whichever rollout of the demo config runs."""
    started = time.monotonic()
    last_line = ""
    while True:
        stable_record = stack.store.get_stable(DEMO_NAMESPACE, DEMO_PATH)
        stable = stable_record.version if stable_record is not None else ""
        lock = stack.store.get_lock(DEMO_NAMESPACE, DEMO_PATH)
        progress: dict[str, Any] = {}
        if lock is not None:
            progress = await _query_status(
                stack.client.get_workflow_handle(lock.workflow_id, run_id=lock.run_id)
            )
        new = progress.get("version") or (lock.version if lock is not None else None)
        counts = fleet.counts()
        line = (
            _progress_line(progress, counts, stable=stable, new=new or "")
            if progress
            else (
                "no rollout running          | " + _fleet_text(counts, stable=stable, new=new or "")
            )
        )
        if line != last_line:
            view.log(f"[{time.monotonic() - started:6.1f}s] {line}")
            last_line = line
        view.draw(
            fleet_table(
                counts,
                stable=stable,
                new=new,
                header=f"fleet of {fleet.size}: {_rollout_header(progress)}  (Ctrl-C stops the stack)",
            )
        )
        await asyncio.sleep(FOLLOW_INTERVAL_SECONDS)


async def _query_status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    try:
        return dict(await handle.query("status"))
    except Exception:  # noqa: BLE001 - a missed query only means a line without the stage
        return {}


def _fleet_text(counts: Counter[tuple[str, str]], *, stable: str, new: str) -> str:
    def label(version: str) -> str:
        return "new" if version == new else ("stable" if version == stable else version[:8])

    return ", ".join(
        f"{n} {label(version)}"
        + (
            f" ({stage})"
            if stage not in ("stable", "-")
            else (" (as stable)" if version == new else "")
        )
        if (version, stage) != UNSERVED
        else f"{n} not served"
        for (version, stage), n in sorted(
            counts.items(), key=lambda item: (item[0][0] != new, item[0][1])
        )
    )


def _progress_line(
    progress: dict[str, Any], counts: Counter[tuple[str, str]], *, stable: str, new: str
) -> str:
    count = progress.get("stage_count") or 0
    index = progress.get("stage_index", -1)
    state = progress.get("state", "?")
    where = (
        f"stage {index + 1}/{count} {progress.get('stage_name')}"
        if index >= 0 and count
        else "no stage yet"
    )
    return f"{where:<28} {state:<17} | {_fleet_text(counts, stable=stable, new=new)}"
