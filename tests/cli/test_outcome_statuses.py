"""Every outcome as a Temporal close status (tempoconf.rollout.outcomes), against a live `tempoconf dev`:
rollouts ended promoted, bypassed, reverted by an unhealthy check, halted and cancelled, each
through `tempoconf rollout start --wait` on either CLI backend (direct: the store and Temporal;
API mode: the admin API alone). Temporal's own views tell them apart (`temporal workflow describe`,
`temporal workflow list -q 'ExecutionStatus="Failed"'`), while `--wait` keeps its exit codes and
words, `rollout status` (both backends, the same text) and the admin API keep showing the outcome,
version, reason and stable version. The worker's sweep of abandoned runs writes nothing after a
run that ended itself, whatever its close status."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.canonical import version_id
from tempoconf.temporal.binaries import temporal_cli_path
from tests.cli.conftest import (
    TEMPOCONF,
    RunningDev,
    cli_env,
    page,
    run_cli,
    start_dev,
    unique_path,
)
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(240)

TOKEN = "outcomes-s3cret"
SWEEP_INTERVAL = 0.5
STABLE = {"is_debug": False, "max_connections": 1000}
NEW = {"is_debug": False, "max_connections": 4000}
NEW_VERSION = version_id(NEW)
STABLE_VERSION = version_id(STABLE)
HOLD = [{"channel": "canary", "cooldown": "1h"}]
# No client reports the version: the end-of-hold check has no data, which fails it.
UNHEALTHY = {
    "stages": [{"channel": "canary", "cooldown": "1s"}],
    "health": [{"kind": "reports", "max_error_ratio": 0.1}],
}

# docs/how-to/alerts.md, TempoconfRolloutsFailing: how to list the rollouts that failed.
ALERTS_GUIDE_LIST = re.findall(
    r"^temporal workflow list .*$", page("how-to/alerts.md"), re.MULTILINE
)[0]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    """`tempoconf dev` with an admin token (so the API mode can be used) and a fast sweep."""
    running = start_dev(
        tmp_path_factory.mktemp("outcomes"),
        variables={"TEMPOCONF_ADMIN_TOKEN": TOKEN, "TEMPOCONF_SWEEP_INTERVAL": f"{SWEEP_INTERVAL}"},
    )
    try:
        yield running
    finally:
        running.stop()


def backend_env(dev: RunningDev, backend: str) -> dict[str, str]:
    """The direct mode's environment (the store and Temporal), or the API mode's (the API's URL and
    the admin token; no store and no Temporal it could reach)."""
    if backend == "direct":
        return dev.env
    return cli_env(
        TEMPOCONF_API_URL=dev.api_url,
        TEMPOCONF_ADMIN_TOKEN=TOKEN,
        TEMPOCONF_DATABASE_URL="postgresql+psycopg://nobody:pw@127.0.0.1:9/nothing",
        TEMPORAL_ADDRESS="127.0.0.1:9",
    )


def temporal(dev: RunningDev, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(temporal_cli_path()), *args, "--address", dev.temporal_address],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def write_request(dev: RunningDev, path: str, value: dict[str, Any], **fields: Any) -> Path:
    file = dev.workdir / f"{path.replace('/', '_')}-{version_id(value)}.json"
    file.write_text(json.dumps({"path": path, "value": value, "stages": [], **fields}))
    return file


def admin_api(dev: RunningDev, method: str, route: str, **options: Any) -> httpx.Response:
    return httpx.request(
        method,
        f"{dev.api_url}{route}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
        **options,
    )


def rollout_state(dev: RunningDev, path: str) -> dict[str, Any]:
    """The admin API's view of the rollout's workflow (what `rollout status` shows)."""
    answer = admin_api(dev, "GET", f"/v1/admin/rollouts/{path}")
    assert answer.status_code == 200, answer.text
    workflow: dict[str, Any] = answer.json()["workflow"]
    return workflow


def wait_for(dev: RunningDev, path: str, what: str, *, state: str) -> dict[str, Any]:
    def there() -> dict[str, Any]:
        workflow = rollout_state(dev, path)
        assert (workflow.get("status") or {}).get("state") == state, workflow
        return workflow

    return eventually_sync(there, what=f"{path} {what}", timeout=60, interval=0.3)


def make_stable(dev: RunningDev, path: str) -> None:
    """STABLE made stable through the admin API (set-up: quicker than a CLI process)."""
    request = {"path": path, "value": STABLE, "stages": []}
    started = admin_api(dev, "POST", "/v1/admin/rollouts", json=request)
    assert started.status_code == 202, started.text
    wait_for(dev, path, "promoted to its stable value", state="promoted")


def end_rollout(dev: RunningDev, backend: str, outcome: str, path: str) -> tuple[int, str, str]:
    """Start a rollout of NEW with `rollout start --wait` on `backend` and end it in `outcome`;
    the exit code and output of `--wait`, and the reason it ended with."""
    fields: dict[str, Any] = {
        "promoted": {},
        "bypassed": {"stages": HOLD},
        "reverted": UNHEALTHY,
        "halted": {"stages": HOLD},
        "cancelled": {"stages": HOLD},
    }[outcome]
    env = backend_env(dev, backend)
    waiting = subprocess.Popen(
        [str(TEMPOCONF), "rollout", "start", str(write_request(dev, path, NEW, **fields)), "--wait"],
        cwd=dev.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reason = {
        "promoted": "no stages: promoted directly",
        "bypassed": "bypassed: hotfix for an outage",
        "halted": "error rate up",
        "cancelled": "the workflow was cancelled",
        "reverted": "",  # the check's own words, read below
    }[outcome]
    try:
        if outcome in ("bypassed", "halted", "cancelled"):
            wait_for(dev, path, "to hold its canary", state="holding")
        if outcome in ("bypassed", "halted"):
            command = "bypass" if outcome == "bypassed" else "halt"
            given = reason.removeprefix("bypassed: ")
            steered = run_cli("rollout", command, path, "--reason", given, env=env, cwd=dev.workdir)
            assert steered.returncode == 0, steered.stdout + steered.stderr
        if outcome == "cancelled":
            cancelled = temporal(dev, "workflow", "cancel", "-w", f"rollout:default/{path}")
            assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        stdout, stderr = waiting.communicate(timeout=120)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    if outcome == "reverted":
        reason = next(
            line.removeprefix("reason:  ")
            for line in stdout.splitlines()
            if line.startswith("reason:")
        )
        assert reason.startswith("stage channel:canary is unhealthy: "), stdout
    return waiting.returncode, stdout + stderr, reason


STATUSES = {
    "promoted": ("COMPLETED", "Completed"),
    "bypassed": ("COMPLETED", "Completed"),
    "reverted": ("FAILED", "Failed"),
    "halted": ("FAILED", "Failed"),
    "cancelled": ("CANCELED", "Canceled"),
}


# Every outcome once, and each close status (Completed, Failed, Canceled) read by `--wait` on
# both backends (`rollout status` is compared across both in every case).
CASES = [
    ("promoted", "direct"),
    ("bypassed", "api"),
    ("reverted", "direct"),
    ("halted", "api"),
    ("cancelled", "direct"),
    ("cancelled", "api"),
]


@pytest.mark.parametrize(("outcome", "backend"), CASES, ids=[f"{o}-{b}" for o, b in CASES])
def test_each_outcome_ends_in_its_temporal_status_and_reads_the_same_everywhere(
    dev: RunningDev, backend: str, outcome: str
) -> None:
    path = unique_path(f"outcome-{outcome}-{backend}")
    workflow_id = f"rollout:default/{path}"
    make_stable(dev, path)
    code, printed, reason = end_rollout(dev, backend, outcome, path)
    succeeded = outcome in ("promoted", "bypassed")
    stable_after = NEW_VERSION if succeeded else STABLE_VERSION

    # `--wait`: the outcome, version and reason as before; exit 0 for promoted and bypassed only.
    assert code == (0 if succeeded else 1), printed
    expected = f"outcome: {outcome}\nversion: {NEW_VERSION}\nreason:  {reason}\n"
    if not succeeded:
        expected += f"stable:  {STABLE_VERSION}\n"
    assert printed.endswith(f"waiting for the result...\n{expected}"), printed

    # Temporal's own views.
    status_name, execution = STATUSES[outcome]
    described = temporal(dev, "workflow", "describe", "-w", workflow_id, "-o", "json")
    execution_info = json.loads(described.stdout)["workflowExecutionInfo"]
    assert execution_info["status"] == f"WORKFLOW_EXECUTION_STATUS_{status_name}", execution_info
    failed = temporal(
        dev, "workflow", "list", "-q", f'TempoconfPath="{path}" AND ExecutionStatus="Failed"'
    )
    assert (workflow_id in failed.stdout) == (status_name == "FAILED"), failed.stdout
    # The alerts guide's command for TempoconfRolloutsFailing, as written, lists the failed ones.
    listed = temporal(dev, *shlex.split(ALERTS_GUIDE_LIST)[1:])
    assert listed.returncode == 0, listed.stderr
    assert (workflow_id in listed.stdout) == (status_name == "FAILED"), listed.stdout
    result = {
        "outcome": outcome,
        "version": NEW_VERSION,
        "reason": reason,
        "stable_version": stable_after,
    }
    if status_name == "FAILED":
        # What `temporal workflow result` (exit 1) and the Web UI show: the failure's message,
        # its type, and the result in its details.
        answer = temporal(dev, "workflow", "result", "-w", workflow_id, "-o", "json")
        assert answer.returncode == 1, answer.stdout + answer.stderr
        failure = json.loads(answer.stdout)["closeEvent"]["workflowExecutionFailedEventAttributes"][
            "failure"
        ]
        who = failure["message"].partition(":")[0].removeprefix(f"rollout {outcome}")
        assert failure["message"] == (
            f"rollout {outcome}{who}: {reason}; every client is back on the stable version "
            f"{STABLE_VERSION}"
        ), failure["message"]
        assert (who != "") == (outcome == "halted"), failure["message"]
        application = failure["applicationFailureInfo"]
        assert (
            application["type"]
            == {"reverted": "RolloutReverted", "halted": "RolloutHalted"}[outcome]
        )
        assert application["nonRetryable"] is True
        assert application["details"] == [result]
        assert "cause" not in failure, failure["cause"]
        text = temporal(dev, "workflow", "describe", "-w", workflow_id).stdout
        assert f"Status   FAILED\n  Failure  \n    Message: {failure['message']}\n" in text, text
    elif status_name == "CANCELED":
        # A cancellation carries no details: the result is in the run's memo.
        assert execution_info["memo"]["fields"]["result"] == result, execution_info

    # `rollout status`: the same view on both backends, the close status in its header.
    direct = dev.cli("rollout", "status", path)
    through_api = run_cli("rollout", "status", path, env=backend_env(dev, "api"), cwd=dev.workdir)
    assert direct.returncode == 0, direct.stdout + direct.stderr
    assert (through_api.returncode, through_api.stdout) == (0, direct.stdout), through_api.stderr
    assert f"(workflow {workflow_id}, {execution})" in direct.stdout, direct.stdout
    # A bypass's reason ("bypassed: <why>") is said once after its outcome, not twice.
    said = reason.removeprefix(f"{outcome}: ")
    assert f"  outcome    {outcome}: {said}\n" in direct.stdout, direct.stdout
    assert f"{outcome}: {outcome}:" not in direct.stdout, direct.stdout
    if outcome == "bypassed":
        assert "state      bypassed: Bypassed to stable: hotfix for an outage\n" in direct.stdout

    # The admin API's state of the rollout: the result whatever the close status.
    workflow = rollout_state(dev, path)
    assert workflow["execution_status"] == status_name
    assert (workflow["outcome"], workflow["reason"], workflow["result"]) == (
        outcome,
        reason,
        result,
    )

    # The run ended itself (its revert or promote released the lock): a few sweeps later its
    # trail still ends in exactly one final entry, its own.
    time.sleep(4 * SWEEP_INTERVAL)
    history = dev.cli("history", path)
    assert history.returncode == 0, history.stderr
    finals = [
        line.split()[3]
        for line in history.stdout.splitlines()[1:]
        if NEW_VERSION in line
        and line.split()[3]
        in (
            "rollout.promoted",
            "rollout.bypassed",
            "rollout.reverted",
            "rollout.halted",
            "rollout.cancelled",
            "rollout.failed",
            "rollout.canceled",
            "rollout.terminated",
        )
    ]
    # (a bypass's final entry is the promotion it ends with)
    assert finals == [f"rollout.{outcome}".replace("bypassed", "promoted")], history.stdout
