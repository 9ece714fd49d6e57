"""Two starts of one config at the same instant, from two processes: exactly one rollout runs (and
is promoted, once), the other start gets a clear refusal, and no lock is left."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from tempoconf.rollout.outcomes import await_rollout_ending
from tempoconf.store.store import Store
from tempoconf.temporal.binaries import temporal_cli_path
from tests.faults.rollouts import ROLLOUT_TIMEOUT_SECONDS, establish_stable, staged
from tests.faults.stack import TEMPOCONF, Stack, actions, unique_path
from tests.fixtures.temporal import rollout_result

pytestmark = pytest.mark.faults


def _at_once(stack: Stack, commands: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Run the commands as simultaneous processes; their results in order."""
    running = [
        subprocess.Popen(
            command,
            env=stack.env(),
            cwd=stack.tmp,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for command in commands
    ]
    results = []
    for command, process in zip(commands, running, strict=True):
        stdout, stderr = process.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(command, process.returncode, stdout, stderr))
    return results


def _promotions(store: Store, path: str) -> int:
    return actions(store, path).count("rollout.promoted")


async def test_two_rollout_starts_at_once(stack: Stack, store: Store, tmp_path: Path) -> None:
    stack.start_worker()
    path = unique_path("two-starts")
    await establish_stable(stack, path)
    request = tmp_path / "rollout.json"
    request.write_text(json.dumps(staged(path, cooldown="2s")))

    starts = _at_once(stack, [[str(TEMPOCONF), "rollout", "start", str(request)]] * 2)

    started = [result for result in starts if result.returncode == 0]
    refused = [result for result in starts if result.returncode != 0]
    assert len(started) == 1 and len(refused) == 1, starts
    refusal = refused[0].stderr + refused[0].stdout
    assert "already" in refusal and path in refusal, refusal
    assert "Traceback" not in refusal, refusal
    handle = (await stack.client()).get_workflow_handle(f"rollout:default/{path}")
    result = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)
    assert result["outcome"] == "promoted", result
    assert _promotions(store, path) == 2  # the stable value's and this one
    assert store.get_lock("default", path) is None


async def test_two_temporal_cli_starts_with_their_own_ids(stack: Stack, store: Store) -> None:
    """Any workflow id works (README), so the engine cannot refuse the second: the store's lock
    does, and that run fails at once saying which rollout holds the config."""
    stack.start_worker()
    path = unique_path("two-ids")
    await establish_stable(stack, path)
    request = json.dumps(staged(path, cooldown="2s"))
    ids = [f"{path}-a", f"{path}-b"]
    starts = _at_once(
        stack,
        [
            [
                str(temporal_cli_path()),
                "workflow",
                "start",
                "--type",
                "ConfigRollout",
                "--task-queue",
                "tempoconf",
                "--fail-existing",
                "--workflow-id",
                workflow_id,
                "--address",
                stack.temporal_address,
                "--input",
                request,
            ]  # fmt: skip
            for workflow_id in ids
        ],
    )
    assert all(start.returncode == 0 for start in starts), starts
    client = await stack.client()
    outcomes: dict[str, str] = {}
    for workflow_id in ids:
        ending = await asyncio.wait_for(
            await_rollout_ending(client.get_workflow_handle(workflow_id)), ROLLOUT_TIMEOUT_SECONDS
        )
        outcomes[workflow_id] = ending.outcome + ("" if ending.result else f": {ending.reason}")
    assert sorted(outcomes.values())[1] == "promoted", outcomes
    refusal = sorted(outcomes.values())[0]
    assert refusal.startswith("failed:") and "already has a running rollout" in refusal, outcomes
    assert _promotions(store, path) == 2  # the stable value's and one of the two
    assert store.get_lock("default", path) is None
