"""The token the operator commands send the admin API (issue 28): from TEMPOCONF_API_TOKEN_COMMAND
(a shell command that prints it, as kubectl's exec credential plugins do), TEMPOCONF_API_TOKEN or
TEMPOCONF_ADMIN_TOKEN, in that order, against a live `tempoconf dev` with named tokens, so the
audit rows name the identity the API verified. The operator's environment reaches neither the
database nor Temporal: only the API can answer."""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tempoconf.cli._api_token import api_credential
from tempoconf.cli._common import CommandError
from tempoconf.settings import Settings
from tests.cli.conftest import (
    EXAMPLES,
    RunningDev,
    cli_env,
    free_port,
    processes_with,
    run_cli,
    start_dev,
    unique_path,
)
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(240)

TOKENS = {"alice": "alice-secret", "bob": "bob-secret"}
SCHEMA = EXAMPLES / "server_config.schema.json"
VALUE = {"is_debug": False, "max_connections": 1000}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    tokens = ",".join(f"{name}:{token}" for name, token in TOKENS.items())
    running = start_dev(
        tmp_path_factory.mktemp("api-token"), variables={"TEMPOCONF_ADMIN_TOKENS": tokens}
    )
    try:
        yield running
    finally:
        running.stop()


def operator(dev: RunningDev, **tokens: str) -> dict[str, str]:
    """The API's URL and `tokens`; a database and Temporal nobody listens at."""
    return cli_env(
        TEMPOCONF_API_URL=dev.api_url,
        TEMPOCONF_DATABASE_URL=f"postgresql+psycopg://nobody:pw@127.0.0.1:{free_port()}/nothing",
        TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
        **tokens,
    )


def counted(printing: str, counter: Path) -> str:
    """A token command that prints `printing` and appends a line to `counter` each run."""
    return f"echo ran >> {shlex.quote(str(counter))}; printf %s {shlex.quote(printing)}"


def ok(dev: RunningDev, env: dict[str, str], *args: str | Path) -> str:
    done = run_cli(*args, env=env, cwd=dev.workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def history(dev: RunningDev, env: dict[str, str], path: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(ok(dev, env, "history", path, "--json"))
    return entries


def schema_set_by(dev: RunningDev, env: dict[str, str]) -> str:
    """Register a schema on a new config through the API; the actor of its audit row."""
    path = unique_path("token")
    ok(dev, env, "schema", "set", path, SCHEMA, "--reason", "who am i")
    [entry] = history(dev, env, path)
    assert entry["action"] == "schema.set", entry
    actor: str = entry["actor"]
    return actor


def test_the_commands_token_is_the_actor_of_a_start_and_a_halt(
    dev: RunningDev, tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    env = operator(dev, TEMPOCONF_API_TOKEN_COMMAND=counted("alice-secret", counter))
    path = unique_path("audited")

    # `--wait`: a plan, a start and polls until the end, each a request: the command ran once.
    stable = tmp_path / "stable.json"
    stable.write_text(json.dumps({"path": path, "value": VALUE}))
    waited = ok(dev, env, "rollout", "start", stable, "--wait")
    assert "outcome: promoted" in waited, waited
    assert counter.read_text() == "ran\n"

    held = tmp_path / "held.json"
    held.write_text(json.dumps({
        "path": path,
        "value": {**VALUE, "max_connections": 2000},
        "stages": [{"channel": "canary", "cooldown": "10m"}],
        "author": "alice@example.com",
    }))  # fmt: skip
    ok(dev, env, "rollout", "start", held)
    # Polled with alice's token as is, so that the command's runs stay countable.
    watcher = operator(dev, TEMPOCONF_API_TOKEN="alice-secret")

    def holding() -> dict[str, Any]:
        status: dict[str, Any] = json.loads(ok(dev, watcher, "rollout", "status", path, "--json"))
        assert status["state"] == "holding", status
        return status

    eventually_sync(holding, what=f"{path} holding", timeout=60, interval=0.3)
    halted = ok(dev, env, "rollout", "halt", path, "--reason", "halted by alice")
    assert halted.startswith(f"halt: accepted by rollout:default/{path}"), halted

    def halt_recorded() -> list[dict[str, Any]]:
        entries = history(dev, watcher, path)
        assert any(entry["action"] == "rollout.halted" for entry in entries), entries
        return entries

    eventually_sync(halt_recorded, what="the halt's audit rows", timeout=60)
    entries = history(dev, env, path)
    started = [entry for entry in entries if entry["action"] == "rollout.started"]
    assert [entry["actor"] for entry in started] == ["alice", "alice"], entries
    # The command, and the rollout's own rows that follow from it, name who sent it.
    halt = {entry["action"]: entry["actor"] for entry in entries if "by alice" in entry["reason"]}
    assert halt == {
        "rollout.command": "alice",
        "rollout.reverting": "alice",
        "rollout.halted": "alice",
    }, entries
    # Four processes with the command (two starts, the halt, the history): four runs.
    assert counter.read_text() == "ran\n" * 4


def test_json_answers_access_token_token_and_an_exec_credential(dev: RunningDev) -> None:
    answers = {
        "alice": {"access_token": "alice-secret", "token_type": "Bearer", "expires_in": 300},
        "bob": {
            "kind": "ExecCredential",
            "apiVersion": "client.authentication.k8s.io/v1",
            "spec": {"interactive": False},
            "status": {"expirationTimestamp": "2030-01-01T00:00:00Z", "token": "bob-secret"},
        },
    }
    for name, answer in answers.items():
        # Indented over several lines, as `jq` or kubectl plugins print it.
        command = f"printf %s {shlex.quote(json.dumps(answer, indent=2))}"
        assert schema_set_by(dev, operator(dev, TEMPOCONF_API_TOKEN_COMMAND=command)) == name


def test_the_api_token_alone_and_the_order_of_the_three(dev: RunningDev) -> None:
    assert schema_set_by(dev, operator(dev, TEMPOCONF_API_TOKEN="bob-secret")) == "bob"
    # The old name still works, and each newer one wins over the ones after it.
    assert schema_set_by(dev, operator(dev, TEMPOCONF_ADMIN_TOKEN="alice-secret")) == "alice"
    both = operator(dev, TEMPOCONF_API_TOKEN="bob-secret", TEMPOCONF_ADMIN_TOKEN="wrong")
    assert schema_set_by(dev, both) == "bob"
    three = {
        "TEMPOCONF_API_TOKEN_COMMAND": "printf alice-secret",
        "TEMPOCONF_API_TOKEN": "bob-secret",
        "TEMPOCONF_ADMIN_TOKEN": "wrong",
    }
    assert schema_set_by(dev, operator(dev, **three)) == "alice"


@pytest.mark.parametrize(
    ("variable", "value", "fix"),
    [
        (
            "TEMPOCONF_API_TOKEN_COMMAND",
            "printf expired-token",
            "Make TEMPOCONF_API_TOKEN_COMMAND print a token the API accepts.",
        ),
        ("TEMPOCONF_API_TOKEN", "expired-token", "Set TEMPOCONF_API_TOKEN to a token the API"),
    ],
)
def test_a_refused_token_names_the_variable_it_came_from(
    dev: RunningDev, variable: str, value: str, fix: str
) -> None:
    done = run_cli(
        "versions", "clitest/any", env=operator(dev, **{variable: value}), cwd=dev.workdir
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        f"tempoconf: the admin API at {dev.api_url} refused the token of {variable} "
        "(401: wrong bearer token"
    ), done.stderr
    assert fix in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "expired-token" not in done.stderr


def test_a_forbidden_request_gets_the_apis_reason(dev: RunningDev, tmp_path: Path) -> None:
    """A token the API knows, for something its identity may not do: the API's words (with roles,
    which role in which namespace), not "set the token"."""
    request = tmp_path / "as-bob.json"
    request.write_text(
        json.dumps({"path": unique_path("as-bob"), "value": VALUE, "started_by": "bob"})
    )
    env = operator(dev, TEMPOCONF_API_TOKEN_COMMAND="printf alice-secret")
    done = run_cli("rollout", "start", request, env=env, cwd=dev.workdir)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        f"tempoconf: the admin API at {dev.api_url} forbids this to the token of "
        "TEMPOCONF_API_TOKEN_COMMAND (403): start refused: this caller is 'alice'"
    ), done.stderr
    assert "Set " not in done.stderr and "alice-secret" not in done.stderr


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (
            "echo leaked-secret; echo 'login expired: run sso-login' >&2; exit 3",
            "TEMPOCONF_API_TOKEN_COMMAND failed (exit 3): login expired: run sso-login",
        ),
        (
            "echo 'no session' >&2",
            "TEMPOCONF_API_TOKEN_COMMAND printed no token (exit 0): no session",
        ),
        ("echo '   '", "TEMPOCONF_API_TOKEN_COMMAND printed no token (exit 0)"),
        (  # no input to prompt on: it fails at once instead of waiting for an answer
            "read -r answer || { echo 'cannot ask for a password' >&2; exit 4; }",
            "TEMPOCONF_API_TOKEN_COMMAND failed (exit 4): cannot ask for a password",
        ),
        (
            'printf \'{"id_token": "leaked-secret"}\'',
            "TEMPOCONF_API_TOKEN_COMMAND printed a JSON object without a token (expected a string "
            "`access_token`, `token` or `status.token`)",
        ),
        (
            "printf 'Bearer leaked-secret'",
            "TEMPOCONF_API_TOKEN_COMMAND printed more than a token (2 words)",
        ),
    ],
)
def test_a_command_that_gives_no_token_ends_the_command_in_one_line(
    dev: RunningDev, command: str, error: str
) -> None:
    env = operator(dev, TEMPOCONF_API_TOKEN_COMMAND=command)
    done = run_cli("history", "clitest/any", env=env, cwd=dev.workdir)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"tempoconf: {error}\n")


def test_the_command_runs_only_when_a_command_goes_through_the_api(
    dev: RunningDev, tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    command = counted("alice-secret", counter)
    # No API URL: the direct mode, which needs no token.
    direct = cli_env(TEMPOCONF_DATA_DIR=str(dev.data_dir), TEMPOCONF_API_TOKEN_COMMAND=command)
    assert run_cli("versions", "clitest/none", env=direct, cwd=dev.workdir).returncode == 1
    # Refused before any request: bad input.
    api = operator(dev, TEMPOCONF_API_TOKEN_COMMAND=command)
    assert (
        run_cli("history", "clitest/any", "--limit", "0", env=api, cwd=dev.workdir).returncode == 2
    )
    assert not counter.exists()


def test_a_command_that_hangs_is_stopped_with_its_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its child keeps the pipes open after the shell is gone: the whole group is stopped."""
    from tempoconf.cli import _api_token

    monkeypatch.setattr(_api_token, "TOKEN_COMMAND_TIMEOUT_SECONDS", 0.5)
    marker = f"{time.time_ns() % 1000:03d}.{uuid.uuid4().int % 1000}"
    # Sleeps of over an hour: a command not stopped would hang the test into its timeout.
    settings = Settings(api_token_command=f"sleep 6{marker} & sleep 7{marker}")
    with pytest.raises(CommandError) as raised:
        api_credential(settings)
    assert (
        str(raised.value) == "TEMPOCONF_API_TOKEN_COMMAND printed no token within 0.5 s (stopped)"
    )
    assert processes_with(f"sleep 6{marker}") == processes_with(f"sleep 7{marker}") == []


def test_one_run_per_process_for_every_connection(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    settings = Settings(api_token_command=counted('{"token": "t0ken"}', counter))
    first, second = api_credential(settings), api_credential(settings)
    assert first.token == second.token == "t0ken"
    assert first.variable == "TEMPOCONF_API_TOKEN_COMMAND"
    assert counter.read_text() == "ran\n"
