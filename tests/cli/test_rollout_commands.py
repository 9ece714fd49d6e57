"""`tempoconf rollout ...`, `schema`, `get` and `versions` against a live `tempoconf dev`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tempoconf.canonical import version_id
from tempoconf.temporal.binaries import temporal_cli_path
from tests.cli.conftest import EXAMPLES, TEMPOCONF, RunningDev, unique_path
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(180)

STABLE = {"is_debug": False, "max_connections": 1000}
NEW = {"is_debug": False, "max_connections": 3000}


def _write(dev: RunningDev, name: str, request: dict[str, Any]) -> Path:
    path = dev.workdir / name
    path.write_text(json.dumps(request))
    return path


def _config(dev: RunningDev, name: str) -> str:
    """A fresh config with the example schema and STABLE as its stable value."""
    path = unique_path(name)
    registered = dev.cli("schema", "set", path, EXAMPLES / "server_config.schema.json")
    assert registered.returncode == 0, registered.stderr
    started = dev.cli(
        "rollout",
        "start",
        _write(dev, f"{name}-stable.json", {"path": path, "value": STABLE}),
        "--wait",
    )
    assert started.returncode == 0, started.stdout + started.stderr
    assert "outcome: promoted" in started.stdout
    return path


def _status(dev: RunningDev, path: str) -> dict[str, Any]:
    result = dev.cli("rollout", "status", path, "--json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def _wait_for_state(
    dev: RunningDev, path: str, *states: str, timeout: float = 30.0
) -> dict[str, Any]:
    def reached() -> dict[str, Any]:
        status = _status(dev, path)
        assert status["state"] in states, f"{status['state']} ({status['phase']})"
        return status

    return eventually_sync(
        reached,
        what=f"the rollout of {path} to be {' or '.join(states)}",
        timeout=timeout,
        interval=0.3,
    )


def _served(dev: RunningDev, path: str, *args: str) -> dict[str, Any]:
    result = dev.cli("get", path, "--client", "host-cli-test", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(json.loads(result.stdout))


def test_stable_rollout_then_get_and_versions(dev: RunningDev) -> None:
    path = _config(dev, "stable")

    served = _served(dev, path)
    assert served["version"] == version_id(STABLE)
    assert served["stage"] == "stable"
    assert served["value"] == STABLE
    assert (
        _served(dev, path, "--stable", "--channel", "canary", "--label", "region=eu")["value"]
        == STABLE
    )

    missing_path = unique_path("missing")
    missing = dev.cli("get", missing_path)
    assert missing.returncode == 1
    assert f"tempoconf: no config {missing_path} in namespace default (404 from " in missing.stderr

    versions = dev.cli("versions", path)
    assert versions.returncode == 0
    assert versions.stdout.splitlines()[0].startswith("VERSION")
    assert f"{version_id(STABLE)}   " in versions.stdout and "yes" in versions.stdout


def test_manual_rollout_steered_from_the_cli(dev: RunningDev) -> None:
    path = _config(dev, "manual")
    request = {
        "path": path,
        "value": NEW,
        "stages": [
            {"channel": "canary", "name": "canaries", "cooldown": "120s"},
            {"percentile": 25, "manual": True, "cooldown": "1s"},
            {"percentile": 100, "cooldown": "1s"},
        ],
        "message": "steered from the CLI",
    }
    workflow_id = f"rollout:default/{path}"

    started = dev.cli(
        "rollout", "start", _write(dev, "manual.json", request), "--ui-port", str(dev.ui_port)
    )

    assert started.returncode == 0, started.stderr
    assert f"started the rollout of default/{path} to version {version_id(NEW)}" in started.stdout
    assert "stages       canaries → 25% → 100%" in started.stdout
    assert f"workflow id  {workflow_id}" in started.stdout
    assert (
        f"Web UI       http://127.0.0.1:{dev.ui_port}/namespaces/default/workflows/{quote(workflow_id, safe='')}/"
        in started.stdout
    )
    assert f"tempoconf rollout halt {path} --reason" in started.stdout
    assert f"tempoconf rollout bypass {path} --reason" in started.stdout

    again = dev.cli("rollout", "start", _write(dev, "manual.json", request))
    assert again.returncode == 1
    assert f"already has a running rollout: workflow '{workflow_id}'" in again.stderr

    _wait_for_state(dev, path, "holding")
    view = dev.cli("rollout", "status", path)
    assert view.returncode == 0, view.stderr
    for text in [
        f"rollout of default/{path}  (workflow {workflow_id}, Running)",
        "state      holding: Holding stage canaries until",
        f"version    {version_id(NEW)}",
        "stage      1/3 canaries",
        "paused     no",
        "canaries",
        "live",
        "pending",
        "preparing → publishing [canaries]",
    ]:
        assert text in view.stdout, f"{text!r} missing from:\n{view.stdout}"
    assert _served(dev, path, "--channel", "canary")["stage"] == "canaries"
    assert _served(dev, path)["version"] == version_id(STABLE)

    refused = dev.cli("rollout", "approve", path)
    assert refused.returncode == 1
    assert f"approve refused by the rollout '{workflow_id}': cannot approve" in refused.stdout

    paused = dev.cli("rollout", "pause", path, "--reason", "lunch")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert "pause: accepted" in paused.stdout and "Paused at canaries: lunch" in paused.stdout
    assert "paused     yes: lunch" in dev.cli("rollout", "status", path).stdout
    resumed = dev.cli("rollout", "resume", path)
    assert resumed.returncode == 0 and "resume: accepted" in resumed.stdout

    advanced = dev.cli("rollout", "advance", path, "--reason", "canaries look fine")
    assert advanced.returncode == 0, advanced.stdout + advanced.stderr
    # The state once the advance took effect: the next stage held, not the hold it ended.
    assert advanced.stdout.splitlines() == [
        f"advance: accepted by {workflow_id}: the hold of stage 1/3 canaries ended early",
        advanced.stdout.splitlines()[1],
        "  stage   2/3 25%",
    ], advanced.stdout
    assert advanced.stdout.splitlines()[1].startswith("  state   holding: Holding stage 25% until ")
    waiting = _wait_for_state(dev, path, "awaiting_approval")
    assert waiting["stage_name"] == "25%"

    assert dev.cli("rollout", "pause", path, "--reason", "coffee").returncode == 0
    approved = dev.cli("rollout", "approve", path, "--reason", "looks good")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert (
        f"approve: accepted by {workflow_id}: approval of 25% accepted and held until resume "
        "(paused: coffee)\n"
        "  state   awaiting_approval: Paused at 25% (approved; it moves on at resume): coffee\n"
    ) in approved.stdout
    view = dev.cli("rollout", "status", path).stdout
    assert "approved 25%: looks good; held until resume (paused: coffee)" in view, view
    assert (
        "awaiting_approval → awaiting_approval" not in view
        and "note (awaiting_approval) [25%]" in view
    )
    resumed = dev.cli("rollout", "resume", path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resume: accepted by {workflow_id}: resumed\n" in resumed.stdout
    assert "  stage   3/3 100%" in resumed.stdout  # not "awaiting_approval" at 25% any more
    final = _wait_for_state(dev, path, "promoted")
    assert final["outcome"] == "promoted"
    assert _served(dev, path)["value"] == NEW
    view = dev.cli("rollout", "status", path)
    assert "Completed" in view.stdout and "outcome    promoted" in view.stdout


def test_halt_puts_everyone_back_on_stable(dev: RunningDev) -> None:
    path = _config(dev, "halt")
    request = {"path": path, "value": NEW, "stages": [{"channel": "canary", "cooldown": "120s"}]}
    assert dev.cli("rollout", "start", _write(dev, "halt.json", request)).returncode == 0
    _wait_for_state(dev, path, "holding")
    assert _served(dev, path, "--channel", "canary")["version"] == version_id(NEW)

    halted = dev.cli("rollout", "halt", path, "--reason", "error rate on the canary")

    assert halted.returncode == 0, halted.stdout + halted.stderr
    assert (
        f"halt: accepted by rollout:default/{path}: halted: the live stages were reverted\n"
        f"  state   halted: Halted, back to stable {version_id(STABLE)}: error rate on the canary\n"
    ) in halted.stdout
    final = _wait_for_state(dev, path, "halted")
    assert final["reason"] == "error rate on the canary"
    assert _served(dev, path, "--channel", "canary")["version"] == version_id(STABLE)
    view = dev.cli("rollout", "status", path)
    assert (
        f"state      halted: Halted, back to stable {version_id(STABLE)}: error rate on the canary"
        in view.stdout
    )
    assert "outcome    halted: error rate on the canary" in view.stdout

    late = dev.cli("rollout", "halt", path)
    assert late.returncode == 1
    assert f"no running rollout of default/{path}" in late.stderr


def test_start_wait_prints_the_outcome_of_a_bypass(dev: RunningDev) -> None:
    path = _config(dev, "bypass")
    request = {"path": path, "value": NEW, "stages": [{"channel": "canary", "cooldown": "120s"}]}
    waiting = subprocess.Popen(
        [str(TEMPOCONF), "rollout", "start", str(_write(dev, "bypass.json", request)), "--wait"],
        env=dev.env,
        cwd=dev.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_state(dev, path, "holding")
        bypassed = dev.cli("rollout", "bypass", path, "--reason", "hotfix")
        assert bypassed.returncode == 0, bypassed.stdout + bypassed.stderr
        stdout, stderr = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, stdout + stderr
    assert "waiting for the result..." in stdout
    assert "outcome: bypassed" in stdout
    assert f"version: {version_id(NEW)}" in stdout
    assert _served(dev, path)["value"] == NEW


def test_status_of_a_config_without_rollouts(dev: RunningDev) -> None:
    path = unique_path("never")
    result = dev.cli("rollout", "status", path)
    assert result.returncode == 1
    assert (
        f"no rollout of default/{path} found (workflow id 'rollout:default/{path}')"
        in result.stderr
    )


def test_rollback_to_an_earlier_version(dev: RunningDev) -> None:
    path = _config(dev, "rollback")
    promoted = dev.cli(
        "rollout", "start", _write(dev, "rb-new.json", {"path": path, "value": NEW}), "--wait"
    )
    assert "outcome: promoted" in promoted.stdout, promoted.stdout + promoted.stderr
    assert _served(dev, path)["value"] == NEW

    unknown = dev.cli("rollback", path, "0123456789abcdef")
    assert unknown.returncode == 2
    assert f"/version: config default/{path} has no version 0123456789abcdef" in unknown.stderr
    assert "nothing was started." in unknown.stderr

    rolled_back = dev.cli("rollback", path, version_id(STABLE), "--reason", "2000 was too many")

    assert rolled_back.returncode == 0, rolled_back.stdout + rolled_back.stderr
    assert (
        f"started the rollout of default/{path} to version {version_id(STABLE)}"
        in rolled_back.stdout
    )
    assert "stages       none: promote directly" in rolled_back.stdout
    assert "outcome: promoted" in rolled_back.stdout
    assert "reason:  no stages: promoted directly" in rolled_back.stdout
    # It promotes as it is prepared: no "next: halt / bypass" for a rollout that is finishing.
    assert "next:" not in rolled_back.stdout and "halt" not in rolled_back.stdout
    assert _served(dev, path)["value"] == STABLE
    versions = dev.cli("versions", path).stdout.splitlines()
    stable_line = next(line for line in versions if line.startswith(version_id(STABLE)))
    assert " yes " in stable_line


def test_web_ui_names_the_change_and_its_commands_run_as_printed(dev: RunningDev) -> None:
    """What the Web UI shows (`temporal workflow describe` / `metadata` read the same fields): the
    summary and the current details name the change, and the halt command in them, pasted into a
    shell that has no TEMPORAL_ADDRESS, reaches this dev server on its non-default port."""
    path = _config(dev, "webui")
    request = {"path": path, "value": NEW, "stages": [{"channel": "canary", "cooldown": "120s"}]}
    assert dev.cli("rollout", "start", _write(dev, "webui.json", request)).returncode == 0
    _wait_for_state(dev, path, "holding")
    workflow_id = f"rollout:default/{path}"
    where = ("-w", workflow_id, "--address", dev.temporal_address)

    described = subprocess.run(
        [str(temporal_cli_path()), "workflow", "describe", *where, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    summary = json.loads(described.stdout)["executionConfig"]["userMetadata"]["summary"]
    assert summary == f"default/{path}: max_connections 1000 → 3000 ({version_id(NEW)})"

    metadata = subprocess.run(
        [str(temporal_cli_path()), "workflow", "metadata", *where],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"## default/{path}: max_connections 1000 → 3000" in metadata
    halt = re.search(r"^- halt \(back to stable\): `([^`]+)`$", metadata, re.MULTILINE)
    assert halt, metadata
    assert f"--address {dev.temporal_address}" in halt.group(1)
    shell_env = {key: value for key, value in dev.env.items() if not key.startswith("TEMPORAL_")}
    pasted = subprocess.run(
        ["bash", "-c", halt.group(1).replace('"..."', '"pasted from the Web UI"')],
        cwd=dev.workdir,
        env=shell_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert pasted.returncode == 0, halt.group(1) + "\n" + pasted.stdout + pasted.stderr
    final = _wait_for_state(dev, path, "halted")
    assert final["reason"] == "pasted from the Web UI"


def test_a_revert_of_a_config_without_a_stable_version_says_clients_get_404(
    dev: RunningDev,
) -> None:
    path = unique_path("nostable")
    request = {
        "path": path,
        "value": NEW,
        "stages": [{"channel": "canary", "cooldown": "1s"}],
        "health": [{"kind": "reports", "max_error_ratio": 0.1}],  # no reports: no data, fail
    }

    started = dev.cli("rollout", "start", _write(dev, "nostable.json", request), "--wait")

    assert started.returncode == 1, started.stdout + started.stderr
    assert "outcome: reverted" in started.stdout
    assert "stable:  none: the config has no stable version, clients get 404" in started.stdout
    view = dev.cli("rollout", "status", path).stdout
    assert (
        "state      reverted: Reverted to no version (the config has none stable: clients get 404, "
        "as before): stage channel:canary is unhealthy"
    ) in view, view
    assert "Reverted to stable" not in view
    missing = dev.cli("get", path, "--client", "host-1", "--channel", "canary")
    assert missing.returncode == 1 and "404" in missing.stdout + missing.stderr
