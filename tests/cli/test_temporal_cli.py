"""The operator's path of docs/tutorials/temporal-cli.md: the Temporal CLI (from the venv) against
`tempoconf dev`, the page run as written, then each step checked against the API in detail.

`temporal workflow start --type ConfigRollout --task-queue tempoconf --input '...'` as typed, the
API serving each stage, `update execute --name advance`, `signal --name halt`, `workflow list -q`.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import uuid
from typing import Any

import httpx
import pytest

from tempoconf.canonical import version_id
from tempoconf.resolution.bucketing import bucket
from tempoconf.temporal.binaries import temporal_cli_path
from tests.cli.conftest import ROOT, RunningDev, page
from tests.cli.page_runner import PageRunner
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(180)

STABLE = {"is_debug": False, "max_connections": 1000}
NEW = {"is_debug": False, "max_connections": 2000}


def client_in(path: str, low: int, high: int) -> str:
    return next(f"host-{n}" for n in itertools.count() if low <= bucket(path, f"host-{n}") < high)


def served(
    dev: RunningDev,
    path: str,
    client: str,
    channel: str | None = None,
    *,
    expect: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """(version, stage) the API serves this client; with `expect`, wait for it (the API follows
    the store within its refresh interval, so right after a change it may lag briefly)."""
    params = {"client": client, **({"channel": channel} if channel else {})}

    def answer() -> tuple[str, str]:
        body = httpx.get(f"{dev.api_url}/v1/configs/{path}", params=params, timeout=10).json()
        got = (body["version"], body["stage"])
        assert expect is None or got == expect, got
        return got

    return eventually_sync(answer, what=f"the API to serve {client} {expect}")


def wait_for(dev: RunningDev, workflow_id: str, state: str, stage_index: int) -> dict[str, Any]:
    def reached() -> dict[str, Any]:
        answer = dev.temporal(
            "workflow", "query", "-w", workflow_id, "--type", "status", "-o", "json"
        )
        progress = json.loads(answer.stdout)["queryResult"][0]
        assert (progress["state"], progress["stage_index"]) == (state, stage_index), progress[
            "phase"
        ]
        return dict(progress)

    return eventually_sync(
        reached,
        what=f"{workflow_id} to be {state} at stage index {stage_index}",
        timeout=30,
        interval=0.2,
    )


def start(dev: RunningDev, workflow_id: str, request: dict[str, Any]) -> None:
    dev.temporal(
        "workflow",
        "start",
        "--type",
        "ConfigRollout",
        "--task-queue",
        "tempoconf",
        "--workflow-id",
        workflow_id,
        "--input",
        json.dumps(request),
    )


def result_of(dev: RunningDev, workflow_id: str) -> dict[str, Any]:
    answer = dev.temporal("workflow", "result", "-w", workflow_id, "-o", "json")
    return dict(json.loads(answer.stdout)["result"])


def failure_of(dev: RunningDev, workflow_id: str) -> dict[str, Any]:
    """The failure a rollout that did not complete (reverted, halted) failed with, as `temporal
    workflow result -o json` prints it (and exits 1): its message, type, and the result in its
    details (docs/contract.md, The workflow)."""
    answer = subprocess.run(
        [str(temporal_cli_path()), "workflow", "result", "-w", workflow_id, "-o", "json",
         "--address", dev.temporal_address],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert answer.returncode == 1, answer.stdout + answer.stderr
    assert json.loads(answer.stdout)["status"] == "FAILED", answer.stdout
    close = json.loads(answer.stdout)["closeEvent"]
    return dict(close["workflowExecutionFailedEventAttributes"]["failure"])


def test_the_temporal_cli_page_runs_as_written(dev: RunningDev) -> None:
    """Every command of the page in order, from the repository root, in a shell that has only the
    banner's export line; each prints what the page says (its trailing comments)."""
    exports = next(
        line.strip()
        for line in dev.output.read_text().splitlines()
        if line.strip().startswith("export TEMPORAL_ADDRESS=")
    )
    runner = PageRunner(ROOT, exports, dev.api_url)
    text = page("tutorials/temporal-cli.md")
    runner.run_page(text)
    commands = [command for command in runner.ran if not command.startswith("once: ")]
    assert len(commands) >= 15, commands
    for verb in ("workflow start", "workflow result", "workflow query", "workflow metadata",
                 "--name advance", "--name approve", "workflow describe", "--name halt",
                 "workflow list"):  # fmt: skip
        assert any(verb in command for command in commands), verb
    # "host-8 is in the 50 % cohort of this config" and host-1 is not
    path = "myproject/search_config"
    assert bucket(path, "host-8") < 5000 <= bucket(path, "host-1")
    # "Every start carries --fail-existing"
    starts = [command for command in commands if "workflow start" in command]
    assert starts and all("--fail-existing" in command for command in starts), starts


def test_rollout_typed_on_the_temporal_cli_is_served_stage_by_stage_then_halted(
    dev: RunningDev,
) -> None:
    path = f"myproject/server_config_{uuid.uuid4().hex[:6]}"
    start(dev, f"stable-{path}", {"path": path, "value": STABLE})
    stable = result_of(dev, f"stable-{path}")["version"]
    assert stable == version_id(STABLE)

    # The contract's example request, as typed (hour-long holds; `advance` steps through them).
    workflow_id = f"rollout:default/{path}"
    request = {
        "path": path,
        "namespace": "default",
        "value": NEW,
        "default_cooldown_time": "1h",
        "default_expiration_time": "3600s",
        "stages": [
            {"channel": "canary"},
            {"percentile": 10},
            {"percentile": 50, "cooldown": "900s"},
        ],
        "author": "alice@example.com",
        "commit": "3f2a9c1",
        "message": "raise max_connections",
    }
    start(dev, workflow_id, request)
    new = version_id(NEW)
    canary, in_10, in_50, outside = (
        client_in(path, 9000, 10000),
        client_in(path, 0, 1000),
        client_in(path, 1000, 5000),
        client_in(path, 5000, 10000),
    )

    wait_for(dev, workflow_id, "holding", 0)
    assert served(dev, path, canary, "canary", expect=(new, "channel:canary")) == (
        new,
        "channel:canary",
    )
    assert served(dev, path, in_10, expect=(stable, "stable")) == (stable, "stable")
    advanced = dev.temporal("workflow", "update", "execute", "-w", workflow_id, "--name", "advance")
    # A short result, once the command took effect (the next stage held), not the whole status.
    result_line = next(
        line for line in advanced.stdout.splitlines() if line.strip().startswith("Result")
    )
    for fragment in (
        "accepted:true",
        "command:advance",
        "state:holding",
        "stage:10%",
        "stage_number:2",
        "message:the hold of stage 1/3 channel:canary ended early",
    ):
        assert fragment in result_line, advanced.stdout
    assert len(advanced.stdout) < 600 and "history" not in advanced.stdout, advanced.stdout
    assert result_line.endswith(
        "stage:10% stage_count:3 stage_number:2 state:holding]"
    )  # as README says

    wait_for(dev, workflow_id, "holding", 1)
    assert served(dev, path, in_10, expect=(new, "10%")) == (new, "10%")
    assert served(dev, path, in_50, expect=(stable, "stable")) == (stable, "stable")
    dev.temporal("workflow", "update", "execute", "-w", workflow_id, "--name", "advance")

    wait_for(dev, workflow_id, "holding", 2)
    assert served(dev, path, in_50, expect=(new, "50%")) == (new, "50%")
    assert served(dev, path, outside, expect=(stable, "stable")) == (stable, "stable")
    assert served(dev, path, canary, "canary", expect=(new, "channel:canary")) == (
        new,
        "channel:canary",
    )

    listed = dev.temporal(
        "workflow", "list", "-q", f'TempoconfPath="{path}" AND TempoconfState="holding"'
    )
    assert workflow_id in listed.stdout

    dev.temporal(
        "workflow",
        "signal",
        "-w",
        workflow_id,
        "--name",
        "halt",
        "--input",
        '{"reason": "error rate up"}',
    )
    failure = failure_of(dev, workflow_id)
    assert failure["message"] == (
        f"rollout halted by operator: error rate up; every client is back on the stable version {stable}"
    )
    assert failure["applicationFailureInfo"]["type"] == "RolloutHalted"
    assert failure["applicationFailureInfo"]["details"] == [
        {"outcome": "halted", "version": new, "reason": "error rate up", "stable_version": stable}
    ]
    for client, channel in ((canary, "canary"), (in_10, None), (in_50, None), (outside, None)):
        assert served(dev, path, client, channel, expect=(stable, "stable")) == (stable, "stable")


def test_rollout_typed_on_the_temporal_cli_is_promoted(dev: RunningDev) -> None:
    path = f"myproject/server_config_{uuid.uuid4().hex[:6]}"
    start(dev, f"stable-{path}", {"path": path, "value": STABLE})
    result_of(dev, f"stable-{path}")
    workflow_id = f"rollout:default/{path}"
    start(
        dev,
        workflow_id,
        {
            "path": path,
            "value": NEW,
            "default_cooldown_time": "1s",
            "stages": [{"channel": "canary"}, {"percentile": 10}],
        },
    )
    assert result_of(dev, workflow_id) == {
        "outcome": "promoted",
        "version": version_id(NEW),
        "reason": "every stage passed its hold and checks",
        "stable_version": version_id(NEW),
    }
    assert served(dev, path, "anyone", expect=(version_id(NEW), "stable")) == (
        version_id(NEW),
        "stable",
    )
    described = json.loads(
        dev.temporal("workflow", "describe", "-w", workflow_id, "-o", "json").stdout
    )
    info = described["workflowExecutionInfo"]
    assert info["status"] == "WORKFLOW_EXECUTION_STATUS_COMPLETED"
    assert set(info["searchAttributes"]["indexedFields"]) >= {
        "TempoconfPath",
        "TempoconfVersion",
        "TempoconfStage",
        "TempoconfState",
        "TempoconfPaths",
    }


@pytest.mark.parametrize(
    ("inputs", "said"),
    [
        ([], "started without an input"),
        (
            ["--input", json.dumps({"path": "x/y", "value": 1}), "--input", '{"path": "x/y"}'],
            "started with 2 inputs",
        ),
        (["--input", "1", "--input", "2", "--input", "3"], "started with 3 inputs"),
    ],
    ids=["none", "two", "three"],
)
def test_a_start_with_no_input_or_several_fails_at_once_showing_the_expected_input(
    dev: RunningDev, inputs: list[str], said: str
) -> None:
    """Before: the workflow task failed forever (`__init__() missing 1 required positional
    argument`), the run held its id and refused queries, and `rollout status` blamed the worker."""
    path = f"cli/noinput-{uuid.uuid4().hex[:8]}"
    workflow_id = f"rollout:default/{path}"
    start = ["workflow", "start", "--type", "ConfigRollout", "--task-queue", "tempoconf"]
    dev.temporal(*start, "--fail-existing", "--workflow-id", workflow_id, *inputs)

    def failed() -> dict[str, Any]:
        described = dev.temporal("workflow", "describe", "-w", workflow_id, "-o", "json")
        info = json.loads(described.stdout)["workflowExecutionInfo"]
        assert info["status"] == "WORKFLOW_EXECUTION_STATUS_FAILED", info["status"]
        return dict(info)

    eventually_sync(failed, what=f"{workflow_id} to fail")
    result = subprocess.run(
        [str(temporal_cli_path()), "workflow", "result", "-w", workflow_id, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**dev.env, "TEMPORAL_ADDRESS": dev.temporal_address},
    )
    failure = result.stdout + result.stderr
    assert "InvalidRolloutRequest" in failure, failure
    assert said in failure and "takes exactly one input, the rollout request" in failure
    assert "tempoconf schema request" in failure
    # The run answers queries (a worker replays it), and `rollout status` shows the refusal.
    answer = dev.temporal("workflow", "query", "-w", workflow_id, "--type", "status", "-o", "json")
    assert json.loads(answer.stdout)["queryResult"][0]["state"] == "failed"
    status = dev.cli("rollout", "status", path)
    assert status.returncode == 0, status.stderr
    assert said in status.stdout and "InvalidRolloutRequest" not in status.stderr
    assert "worker" not in status.stderr
    # The id is free again: a proper start goes through.
    request = json.dumps({"path": path, "value": {"max_connections": 1}})
    dev.temporal(*start, "--fail-existing", "--workflow-id", workflow_id, "--input", request)
    done = dev.temporal("workflow", "result", "-w", workflow_id, "-o", "json")
    assert "promoted" in done.stdout


def test_a_rollout_terminated_with_the_temporal_cli_ends_in_the_audit_log_and_frees_the_config(
    dev: RunningDev,
) -> None:
    # issue 12, hole 7: the dev stack's worker sweeps for it (every 5 s by default).
    path = f"myproject/server_config_{uuid.uuid4().hex[:6]}"
    start(dev, f"stable-{path}", {"path": path, "value": STABLE})
    result_of(dev, f"stable-{path}")
    workflow_id = f"rollout:default/{path}"
    start(dev, workflow_id, {"path": path, "value": NEW, "stages": [{"channel": "canary"}]})
    wait_for(dev, workflow_id, "holding", 0)

    dev.temporal("workflow", "terminate", "-w", workflow_id, "--reason", "wrong config")

    def ended() -> dict[str, Any]:
        history = dev.cli("history", path, "--json")
        assert history.returncode == 0, history.stderr
        entries = [e for e in json.loads(history.stdout) if e["workflow_id"] == workflow_id]
        assert entries and entries[-1]["action"] == "rollout.terminated", entries[-1:]
        return dict(entries[-1])

    final = eventually_sync(ended, what="the worker to end the terminated rollout", timeout=30)
    assert final["reason"] == "workflow terminated: wrong config"
    # The config is free at once: a new rollout needs no reclaim.
    start(dev, f"next-{path}", {"path": path, "value": NEW})
    assert result_of(dev, f"next-{path}")["outcome"] == "promoted"
