"""Operators without database credentials: with TEMPOCONF_API_URL and TEMPOCONF_ADMIN_TOKEN set,
every operator command goes through the admin API of a live `tempoconf dev` (API, worker and dev
server). The operator's environment reaches neither the database (its URL points where nothing
listens) nor Temporal (the same), so only HTTP can answer; where it is cheap, the output is
compared with the direct mode's (the store and Temporal), which must be the same."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tempoconf.canonical import version_id
from tests.cli.conftest import (
    EXAMPLES,
    RunningDev,
    cli_env,
    free_port,
    run_cli,
    start_dev,
    unique_path,
)
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(240)

TOKEN = "operator-s3cret"
STABLE = {"is_debug": False, "max_connections": 1000}
NEW = {"is_debug": False, "max_connections": 3000}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    """`tempoconf dev` whose API requires the admin token."""
    running = start_dev(
        tmp_path_factory.mktemp("api-mode"), variables={"TEMPOCONF_ADMIN_TOKEN": TOKEN}
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def temporal_nowhere() -> str:
    return f"127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def operator_env(dev: RunningDev, temporal_nowhere: str) -> dict[str, str]:
    """The API's URL and the admin token, and a database and Temporal nobody listens at."""
    return cli_env(
        TEMPOCONF_API_URL=dev.api_url,
        TEMPOCONF_ADMIN_TOKEN=TOKEN,
        TEMPOCONF_DATABASE_URL=f"postgresql+psycopg://nobody:pw@127.0.0.1:{free_port()}/nothing",
        TEMPORAL_ADDRESS=temporal_nowhere,
    )


def _api(
    dev: RunningDev, env: dict[str, str], *args: str | Path
) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env, cwd=dev.workdir)


def _write(dev: RunningDev, name: str, content: Any) -> Path:
    path = dev.workdir / name
    path.write_text(json.dumps(content))
    return path


def _same(direct: subprocess.CompletedProcess[str], api: subprocess.CompletedProcess[str]) -> None:
    assert (api.returncode, api.stdout, api.stderr) == (
        direct.returncode,
        direct.stdout,
        direct.stderr,
    )


def _state(dev: RunningDev, env: dict[str, str], path: str, *states: str) -> dict[str, Any]:
    def reached() -> dict[str, Any]:
        shown = _api(dev, env, "rollout", "status", path, "--json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        status: dict[str, Any] = json.loads(shown.stdout)
        assert status["state"] in states, f"{status['state']} ({status.get('phase')})"
        return status

    return eventually_sync(reached, what=f"{path} {' or '.join(states)}", timeout=60, interval=0.3)


def test_reads_plans_and_a_first_rollout_through_the_api_as_the_direct_mode_shows_them(
    dev: RunningDev, operator_env: dict[str, str]
) -> None:
    path = unique_path("api-reads")
    schema = EXAMPLES / "server_config.schema.json"

    registered = _api(dev, operator_env, "schema", "set", path, schema, "--reason", "via API")
    assert registered.returncode == 0, registered.stderr
    assert registered.stdout == f"registered a schema for default/{path} (from {schema}).\n"
    again = _api(dev, operator_env, "schema", "set", path, schema)
    assert (
        again.stdout
        == f"schema of default/{path} unchanged (the same schema is registered already).\n"
    )
    _same(dev.cli("schema", "get", path), _api(dev, operator_env, "schema", "get", path))

    stable_file = _write(dev, "api-stable.json", {"path": path, "value": STABLE})
    started = _api(dev, operator_env, "rollout", "start", stable_file, "--wait")
    assert started.returncode == 0, started.stdout + started.stderr
    assert (
        f"started the rollout of default/{path} to version {version_id(STABLE)}" in started.stdout
    )
    assert started.stdout.endswith(
        f"outcome: promoted\nversion: {version_id(STABLE)}\nreason:  no stages: promoted directly\n"
    ), started.stdout

    for command in (
        ["versions", path],
        ["versions", path, "--json"],
        ["history", path],
        ["history", path, "--limit", "3", "--json"],
        ["rollout", "status", path],
        ["rollout", "status", path, "--json"],
        ["rollout", "status", path, "--watch"],  # ended: one view and the outcome, exit 0
        ["rollout", "plan", str(EXAMPLES / "rollout-walkthrough.json"), "--clients", str(EXAMPLES / "clients.json")],
    ):  # fmt: skip
        _same(dev.cli(*command), _api(dev, operator_env, *command))
    history = _api(dev, operator_env, "history", path).stdout
    assert "schema.set" in history and "via API" in history, history

    plan_request = {
        "path": path,
        "value": NEW,
        "stages": [{"channel": "canary"}, {"percentile": 50, "manual": True}],
        "health": [{"kind": "reports", "max_error_ratio": 0.05}],
    }
    plan_file = _write(dev, "api-plan.json", plan_request)
    clients = str(EXAMPLES / "clients.json")
    for extra in ([], ["--json"]):
        direct = dev.cli("rollout", "plan", plan_file, "--clients", clients, *extra)
        assert direct.returncode == 0, direct.stderr
        _same(
            direct,
            _api(dev, operator_env, "rollout", "plan", plan_file, "--clients", clients, *extra),
        )

    # Bad input is refused with the same problems (exit 2), nothing started.
    bad = _write(
        dev,
        "api-bad.json",
        {"path": path, "value": {"max_connections": 0}, "stages": [{"percentile": 150}]},
    )
    for command in (
        ["rollout", "start", str(bad)],
        ["rollout", "plan", str(bad)],
        ["rollback", path, "0123456789abcdef"],
    ):
        direct = dev.cli(*command)
        assert direct.returncode == 2, direct.stdout + direct.stderr
        _same(direct, _api(dev, operator_env, *command))


def test_a_rollout_started_steered_and_watched_through_the_api(
    dev: RunningDev, operator_env: dict[str, str], temporal_nowhere: str
) -> None:
    path = unique_path("api-steer")
    assert dev.cli("schema", "set", path, EXAMPLES / "server_config.schema.json").returncode == 0
    first = dev.cli(
        "rollout",
        "start",
        _write(dev, "steer-stable.json", {"path": path, "value": STABLE}),
        "--wait",
    )
    assert first.returncode == 0, first.stdout + first.stderr
    workflow_id = f"rollout:default/{path}"

    # No rollout running: the same refusal in both modes.
    _same(dev.cli("rollout", "halt", path), _api(dev, operator_env, "rollout", "halt", path))

    request = _write(dev, "steer.json", {
        "path": path,
        "value": NEW,
        "stages": [
            {"channel": "canary", "name": "canaries", "cooldown": "120s"},
            {"percentile": 25, "manual": True, "cooldown": "1s"},
        ],
        "message": "steered through the API",
    })  # fmt: skip
    started = _api(dev, operator_env, "rollout", "start", request)
    assert started.returncode == 0, started.stdout + started.stderr
    assert f"started the rollout of default/{path} to version {version_id(NEW)}" in started.stdout
    assert "stages       canaries → 25%" in started.stdout
    assert f"workflow id  {workflow_id}" in started.stdout
    # A second start is refused as the direct mode refuses it.
    _same(
        dev.cli("rollout", "start", request), _api(dev, operator_env, "rollout", "start", request)
    )

    _state(dev, operator_env, path, "holding")
    view = _api(dev, operator_env, "rollout", "status", path)
    assert view.returncode == 0, view.stderr
    for text in (
        f"rollout of default/{path}  (workflow {workflow_id}, Running)",
        "state      holding: Holding stage canaries until",
        "stage      1/2 canaries",
        "steered through the API",
        # the hints name the Temporal address of this operator's settings, as the direct mode's do
        f"--address {temporal_nowhere}",
    ):
        assert text in view.stdout, f"{text!r} missing from:\n{view.stdout}"

    refused_direct = dev.cli("rollout", "approve", path)
    assert refused_direct.returncode == 1
    _same(refused_direct, _api(dev, operator_env, "rollout", "approve", path))

    paused = _api(dev, operator_env, "rollout", "pause", path, "--reason", "lunch")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert paused.stdout.startswith(f"pause: accepted by {workflow_id}: ")
    assert "paused     yes: lunch" in _api(dev, operator_env, "rollout", "status", path).stdout
    resumed = _api(dev, operator_env, "rollout", "resume", path)
    assert resumed.returncode == 0 and "resume: accepted" in resumed.stdout

    advanced = _api(dev, operator_env, "rollout", "advance", path, "--reason", "fine")
    assert advanced.returncode == 0, advanced.stdout + advanced.stderr
    assert advanced.stdout.startswith(
        f"advance: accepted by {workflow_id}: the hold of stage 1/2 canaries ended early\n"
    )
    _state(dev, operator_env, path, "awaiting_approval")
    approved = _api(dev, operator_env, "rollout", "approve", path, "--reason", "looks good")
    assert approved.returncode == 0, approved.stdout + approved.stderr

    watched = _api(dev, operator_env, "rollout", "status", path, "--watch", "--interval", "0.5")
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "\nrollout ended: promoted (every stage passed" in watched.stdout, watched.stdout
    _same(dev.cli("rollout", "status", path), _api(dev, operator_env, "rollout", "status", path))

    # A rollback (an immediate one waits for its result), then a halt and a bypass.
    rolled_back = _api(dev, operator_env, "rollback", path, version_id(STABLE), "--reason", "back")
    assert rolled_back.returncode == 0, rolled_back.stdout + rolled_back.stderr
    assert "outcome: promoted" in rolled_back.stdout

    for verb, outcome, code in (("halt", "halted", 1), ("bypass", "bypassed", 0)):
        value = {**NEW, "is_debug": verb == "halt"}
        one_stage = _write(
            dev,
            f"steer-{verb}.json",
            {"path": path, "value": value, "stages": [{"channel": "canary", "cooldown": "10m"}]},
        )
        assert _api(dev, operator_env, "rollout", "start", one_stage).returncode == 0
        _state(dev, operator_env, path, "holding")
        sent = _api(dev, operator_env, "rollout", verb, path, "--reason", f"{verb} via API")
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert sent.stdout.startswith(f"{verb}: accepted by {workflow_id}"), sent.stdout
        ended = _api(dev, operator_env, "rollout", "status", path, "--watch", "--interval", "0.5")
        assert ended.returncode == code, ended.stdout + ended.stderr
        assert f"rollout ended: {outcome}" in ended.stdout
    history = _api(dev, operator_env, "history", path).stdout
    assert "halt via API" in history and "bypass via API" in history


def test_a_wrong_admin_token_names_the_setting(
    dev: RunningDev, operator_env: dict[str, str]
) -> None:
    env = {**operator_env, "TEMPOCONF_ADMIN_TOKEN": "not-the-token"}
    result = _api(dev, env, "versions", "myproject/server_config")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(
        f"tempoconf: the admin API at {dev.api_url} refused the token of TEMPOCONF_ADMIN_TOKEN "
        "(401: wrong bearer token"
    )
    assert "Set TEMPOCONF_ADMIN_TOKEN" in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_api_names_the_setting(
    dev: RunningDev, operator_env: dict[str, str]
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    env = {**operator_env, "TEMPOCONF_API_URL": nowhere}
    result = _api(dev, env, "rollout", "status", "myproject/server_config")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"tempoconf: cannot reach the admin API at {nowhere}: ")
    assert "Set TEMPOCONF_API_URL" in result.stderr and "Traceback" not in result.stderr


def test_the_api_url_alone_keeps_the_direct_mode(tmp_path: Path, dev: RunningDev) -> None:
    env = cli_env(TEMPOCONF_API_URL=dev.api_url, TEMPOCONF_DATA_DIR=str(tmp_path / "empty"))
    result = run_cli("versions", "myproject/server_config", env=env, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"tempoconf: no store at {(tmp_path / 'empty' / 'tempoconf.db').resolve()}"
    )
