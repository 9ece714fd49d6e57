"""What a newcomer runs first, run literally: the README's and the banner's commands, the hints
commands print, and the errors of ordinary mistakes."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tempoconf.canonical import version_id
from tempoconf.temporal.binaries import temporal_cli_path
from tests.cli.conftest import (
    DOCS,
    README,
    ROOT,
    TEMPOCONF,
    RunningDev,
    bash,
    cli_env,
    readme_command,
    shell_commands,
    start_dev,
    unique_path,
    wait_for_output,
)
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(240)


def assert_runnable(command: str, *, cwd: Path, env: dict[str, str]) -> None:
    """The command's program is there as typed: a path that exists, or a name on this PATH."""
    program = shlex.split(command)[0]
    if "/" in program:
        resolved = cwd / program
        assert resolved.is_file() and os.access(resolved, os.X_OK), f"{program} is not runnable"
    else:
        assert shutil.which(program, path=env.get("PATH")), f"{program} is not on PATH: {command}"


def hint_commands(output: str, heading: str = "next:") -> list[str]:
    """The commands listed under `heading` (each line: command, three spaces, what it does)."""
    lines = output.splitlines()
    start = lines.index(heading)
    commands = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        commands.append(re.split(r"\s{3,}", line.strip())[0])
    return commands


def temporal(dev: RunningDev, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(temporal_cli_path()), *args, "--address", dev.temporal_address],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


# -- --fail-existing ---------------------------------------------------------------------------
def test_every_documented_workflow_start_carries_fail_existing() -> None:
    documents = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    starts = [
        command
        for document in documents
        for command in shell_commands(document.read_text(encoding="utf-8"))
        if "workflow start" in command
    ]
    assert len(starts) >= 4
    for command in starts:
        assert "--fail-existing" in command, command


def documented_commands(*fragments: str) -> list[str]:
    """The commands of the README and every docs page that contain every fragment."""
    documents = [README, *sorted(DOCS.rglob("*.md"))]
    return [
        command
        for document in documents
        for command in shell_commands(document.read_text(encoding="utf-8"))
        if all(fragment in command for fragment in fragments)
    ]


def test_the_readmes_workflow_start_run_twice_refuses_the_second(dev: RunningDev) -> None:
    """The README's and the Temporal CLI page's commands as written, from the repository root
    (TEMPORAL_ADDRESS points the Temporal CLI at this test's stack, as the banner's export line
    does)."""
    stable = readme_command("workflow start", '"message": "first stable value"')
    result = readme_command("workflow result", "rollout:default/myproject/server_config")
    for _ in range(2):  # an ended rollout does not hold its id: the same start again is allowed
        started = bash(stable, cwd=ROOT, env=dev.env)
        assert started.returncode == 0, started.stdout + started.stderr
        ended = bash(result, cwd=ROOT, env=dev.env)
        assert ended.returncode == 0 and "COMPLETED" in ended.stdout, ended.stdout + ended.stderr
        assert '"outcome":"promoted"' in ended.stdout, ended.stdout

    [staged] = documented_commands(
        "workflow start", '"path": "myproject/search_config"', '"default_cooldown_time": "10m"'
    )
    first = bash(staged, cwd=ROOT, env=dev.env)
    assert first.returncode == 0, first.stdout + first.stderr
    try:
        # while it runs: refused, not silently attached to the running one
        second = bash(staged, cwd=ROOT, env=dev.env)
        assert second.returncode == 1, second.stdout + second.stderr
        assert "Workflow execution is already running" in second.stdout + second.stderr
    finally:
        workflow_id = "rollout:default/myproject/search_config"
        temporal(dev, "workflow", "signal", "-w", workflow_id, "--name", "halt",
                 "--input", '{"reason": "end of the test"}')  # fmt: skip
        temporal(dev, "workflow", "result", "-w", workflow_id)


def test_a_refused_request_started_with_the_temporal_cli_ends_as_one_readable_failure(
    dev: RunningDev,
) -> None:
    """The README's first way to start, with one typo: `temporal workflow result` shows the
    problem at its pointer, the nearest known field, and no Python frames."""
    path = unique_path("typo")
    start = readme_command("workflow start", '"message": "first stable value"')
    result = readme_command("workflow result", "rollout:default/myproject/server_config")
    start, result = (
        command.replace("myproject/server_config", path) for command in (start, result)
    )
    typo = start.replace('"message":', '"mesage":')
    assert typo != start
    started = bash(typo, cwd=ROOT, env=dev.env)
    assert started.returncode == 0, started.stdout + started.stderr
    ended = bash(result, cwd=ROOT, env=dev.env)
    output = ended.stdout + ended.stderr
    assert ended.returncode == 1 and "FAILED" in output, output
    assert "/mesage: unknown field 'mesage'; did you mean 'message'?" in output, output
    for frame in ("StackTrace", 'File "', "Traceback", "_workflow_instance.py"):
        assert frame not in output, output


# -- the banner --------------------------------------------------------------------------------
def test_the_banners_commands_run_as_printed_on_a_fresh_stack(tmp_path: Path) -> None:
    """The first rollout the banner suggests is promoted on a stack with no clients, and its
    Temporal CLI command refuses a second start while the first runs."""
    dev = start_dev(tmp_path)
    try:
        lines = [line.strip() for line in dev.output.read_text().splitlines()]
        exports = next(line for line in lines if line.startswith("export TEMPORAL_ADDRESS="))
        first = next(line for line in lines if " rollout start " in line)
        # another shell: none of the test's settings, only what the banner says to type
        shell = cli_env()
        assert_runnable(first, cwd=dev.workdir, env=shell)
        promoted = bash(f"{exports}\n{first}", cwd=dev.workdir, env=shell, timeout=180)
        assert promoted.returncode == 0, promoted.stdout + promoted.stderr
        assert "outcome: promoted" in promoted.stdout, promoted.stdout

        start = next(line for line in lines if " workflow start " in line)
        assert_runnable(start, cwd=dev.workdir, env=shell)
        once = bash(start, cwd=dev.workdir, env=shell)
        assert once.returncode == 0, once.stdout + once.stderr
        twice = bash(start, cwd=dev.workdir, env=shell)
        assert twice.returncode == 1, twice.stdout + twice.stderr
        assert "Workflow execution is already running" in twice.stdout + twice.stderr
    finally:
        dev.stop()


# -- hints ---------------------------------------------------------------------------------------
def test_plan_start_and_rollback_hints_run_as_printed(dev: RunningDev) -> None:
    path = unique_path("hints")
    stable = {"is_debug": False, "max_connections": 1000}
    (dev.workdir / "hints-stable.json").write_text(json.dumps({"path": path, "value": stable}))
    assert dev.cli("rollout", "start", "hints-stable.json", "--wait").returncode == 0
    request = {"path": path, "value": {"is_debug": False, "max_connections": 3000},
               "stages": [{"channel": "canary", "cooldown": "1h"}], "commit": "abc1234"}  # fmt: skip
    (dev.workdir / "hints.json").write_text(json.dumps(request))

    # from another directory, the store named by a flag only: the hint must repeat the flag
    elsewhere = dev.workdir / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in dev.env.items() if key != "TEMPOCONF_DATA_DIR"}
    planned = subprocess.run(
        [str(TEMPOCONF), "rollout", "plan", "../hints.json", "--data-dir", str(dev.data_dir)],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    start = planned.stdout.split("to start it: ", 1)[1].strip()
    assert "--data-dir" in start
    assert_runnable(start, cwd=elsewhere, env=env)
    started = bash(start, cwd=elsewhere, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    hints = hint_commands(started.stdout)
    assert [" ".join(shlex.split(hint)[1:3]) for hint in hints] == [
        "rollout status",
        "rollout halt",
        "rollout bypass",
    ]
    for hint in hints:
        assert_runnable(hint, cwd=elsewhere, env=env)
    halt = next(hint for hint in hints if " halt " in hint)
    halted = bash(halt, cwd=elsewhere, env=env)
    assert halted.returncode == 0, halted.stdout + halted.stderr
    history = dev.cli("history", path)
    assert "(commit abc1234)" in history.stdout, history.stdout

    rollback = dev.cli("rollback", path, version_id(stable), "--staged", "--cooldown", "1h")
    assert rollback.returncode == 0, rollback.stdout + rollback.stderr
    hints = hint_commands(rollback.stdout)
    for hint in hints:
        assert_runnable(hint, cwd=dev.workdir, env=dev.env)
    halted = bash(next(hint for hint in hints if " halt " in hint), cwd=dev.workdir, env=dev.env)
    assert halted.returncode == 0, halted.stdout + halted.stderr


# -- errors of ordinary mistakes -------------------------------------------------------------------
def test_get_of_a_missing_config_says_what_is_missing_in_one_line(dev: RunningDev) -> None:
    path = unique_path("missing")
    result = dev.cli("get", path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert (
        result.stderr
        == f"tempoconf: no config {path} in namespace default (404 from {dev.api_url})\n"
    )


def test_refused_rollouts_are_one_line_each_on_the_dev_console(dev: RunningDev) -> None:
    invalid_id = f"invalid-{unique_path('x').rsplit('-', 1)[1]}"
    bad = temporal(dev, "workflow", "start", "--type", "ConfigRollout", "--task-queue", "tempoconf",
                   "--workflow-id", invalid_id,
                   "--input", '{"path": "clitest/bad", "value": 1, "stages": [{}]}')  # fmt: skip
    assert bad.returncode == 0, bad.stderr

    path = unique_path("locked")
    holder = temporal(dev, "workflow", "start", "--type", "ConfigRollout", "--task-queue", "tempoconf",
                      "--workflow-id", f"holder-{path}", "--input",
                      json.dumps({"path": path, "value": 1,
                                  "stages": [{"channel": "canary", "cooldown": "1h"}]}))  # fmt: skip
    assert holder.returncode == 0, holder.stderr
    eventually_sync(
        lambda: (
            "holding"
            in temporal(dev, "workflow", "query", "-w", f"holder-{path}", "--type", "status").stdout
        ),
        what="the first rollout to reach its hold",
        timeout=30,
        interval=0.2,
    )
    second = temporal(dev, "workflow", "start", "--type", "ConfigRollout", "--task-queue", "tempoconf",
                      "--workflow-id", f"second-{path}", "--input", json.dumps({"path": path, "value": 2}))  # fmt: skip
    assert second.returncode == 0, second.stderr

    output = wait_for_output(
        dev.output, f"rollout {invalid_id} refused (InvalidRolloutRequest): invalid rollout request",
        dev.process, 30,
    )  # fmt: skip
    output = wait_for_output(
        dev.output, f"rollout second-{path} refused (RolloutAlreadyRunning): config default/{path} "
        "already has a running rollout", dev.process, 30,
    )  # fmt: skip
    # this test's two (the module's stack also logs the refusals of its other tests)
    refusals = [
        line
        for line in output.splitlines()
        if " refused (" in line and (invalid_id in line or f"second-{path}" in line)
    ]
    assert len(refusals) == 2, refusals
    assert "/stages/0: a stage must name at least one of channel, percentile, labels" in refusals[0]
    assert "Traceback" not in output
    temporal(dev, "workflow", "signal", "-w", f"holder-{path}", "--name", "halt")
