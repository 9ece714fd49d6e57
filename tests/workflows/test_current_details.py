"""What the Web UI shows of a running rollout: its current details, read as the UI reads them
(the workflow metadata query), and the commands in them run exactly as printed."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle

from tempoconf.canonical import version_id
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import (
    NEW_VALUE,
    STABLE_VALUE,
    example_request,
    make_stable,
    unique_path,
    wait_for_state,
)

REPOSITORY = Path(__file__).resolve().parents[2]


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    """The markdown the Web UI shows as Current Details (the same query `temporal workflow metadata` makes)."""
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


def command_in(details: str, label: str) -> str:
    """The command printed after `- LABEL: ` in the details' Commands list."""
    found = re.search(rf"^- {re.escape(label)}: `([^`]+)`$", details, re.MULTILINE)
    assert found, f"no {label!r} command in:\n{details}"
    return found.group(1)


async def run_as_printed(command: str) -> subprocess.CompletedProcess[str]:
    """Run a printed command in a shell, as a person pasting it: no TEMPORAL_* variables that could
    point the CLI at the server for it, from the directory the worker runs in."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEMPORAL_")}
    return await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", command],
        cwd=Path.cwd(),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_details_name_the_change_and_a_running_hold_its_time_left(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    # The real clock: the hold must be running (its hour left) when the test reads the details.
    handle = await rollout_harness.start(example_request(path), real_clock=True)
    progress = await wait_for_state(handle, "holding", stage_index=0)

    details = await current_details(handle)
    assert details.splitlines()[0] == f"## default/{path}: max_connections 1000 → 2000"
    assert (
        f"version `{version_id(NEW_VALUE)}` · raise max_connections — alice@example.com" in details
    )
    end = progress["hold_deadline"][11:19]
    # Rendered as the hold began (nothing re-renders during it): the whole hour is left. A hold
    # that ends after midnight UTC is shown with its date.
    day = r"(\d{4}-\d\d-\d\d )?"
    assert re.search(
        rf"the hold to end: ends {day}{end} UTC, in (1h00m|59m\d\ds) \(as of \d\d:\d\d:\d\d UTC\)",
        details,
    ), details
    assert re.search(rf"\(live, hold ends {day}{end} UTC, in (1h00m|59m\d\ds)\)", details), details

    # The halt command of the Web UI, pasted into a shell, reaches this server (on a port of its own).
    halt = command_in(details, "halt (back to stable)")
    assert f"--address {rollout_harness.client.service_client.config.target_host}" in halt
    ran = await run_as_printed(halt.replace('"..."', '"pasted from the Web UI"'))
    assert ran.returncode == 0, f"{halt}\n{ran.stdout}\n{ran.stderr}"
    assert (await rollout_result(handle))["outcome"] == "halted"
    assert "pasted from the Web UI" in (await handle.query("status", result_type=dict))["reason"]


async def test_awaiting_approval_shows_no_past_hold_and_its_approve_command_runs(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(
        rollout_harness,
        path,
        value={"is_debug": False, "max_connections": 1000, "pool": {"size": 5}},
    )
    request = example_request(
        path,
        value={"is_debug": False, "max_connections": 1000, "pool": {"size": 8}},
        stages=[{"channel": "canary", "manual": True}],
    )
    handle = await rollout_harness.start(request)  # its one-hour hold is skipped
    progress = await wait_for_state(handle, "awaiting_approval", stage_index=0)
    past_hold_end = progress["stages"][0]["hold_deadline"][11:19]

    details = await current_details(handle)
    assert details.splitlines()[0] == f"## default/{path}: pool.size 5 → 8"
    # Not shown as a deadline (the health check that ended the hold may show the same second).
    assert f"ends {past_hold_end}" not in details
    assert "hold ends" not in details and "hold until" not in details
    assert (
        "Waiting for: an operator's approve (the hold and health checks of this stage passed)"
        in details
    )

    ran = await run_as_printed(command_in(details, "approve"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (await rollout_result(handle))["outcome"] == "promoted"


async def test_first_value_and_rollback_headlines(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    first = await rollout_harness.start({"path": path, "value": STABLE_VALUE})
    await rollout_result(first)
    assert (await current_details(first)).splitlines()[0] == f"## default/{path}: first value"

    await make_stable(rollout_harness, path, value=NEW_VALUE)
    rollback = await rollout_harness.start({"path": path, "version": version_id(STABLE_VALUE)})
    await rollout_result(rollback)

    async def headline() -> str:
        return (await current_details(rollback)).splitlines()[0]

    assert await eventually(headline, what="the rollback's current details") == (
        f"## default/{path}: rollback to {version_id(STABLE_VALUE)}: max_connections 2000 → 1000"
    )
