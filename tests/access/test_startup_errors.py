"""`tempoconf api`, `api --workers 2`, `dev` and `edge`, run as a user does, with an access
policy that cannot be used: each exits 2 at once with one message saying what is wrong and
where (the policy's JSON pointers), no traceback, and `dev` starts no Temporal server first."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import cli_env, free_port, run_cli
from tests.fixtures.access import write_policy

pytestmark = pytest.mark.timeout(120)

COMMANDS: dict[str, tuple[str, ...]] = {
    "api": ("api", "--port", "0"),
    "api --workers 2": ("api", "--workers", "2", "--port", "0"),
    "dev": ("dev", "--temporal-port", "0"),
    "edge": ("edge", "--upstream", "http://127.0.0.1:9", "--port", "0"),
}


def _not_json(folder: Path) -> tuple[Path, dict[str, str], list[str]]:
    path = folder / "access.json"
    path.write_text('{"tokens": [')
    return path, {}, [f"invalid access policy {path} (1 problem(s))", "not JSON:"]


def _wrong_fields(folder: Path) -> tuple[Path, dict[str, str], list[str]]:
    path = folder / "access.json"
    policy = {
        "tokens": [{"name": "alice", "secret_sha256": "not-hex", "grants": []}],
        "clients": [{"name": "fleet-a", "secret_sha256": "0" * 64, "namespaces": []}],
        "colour": "blue",
    }
    path.write_text(json.dumps(policy))
    return (
        path,
        {},
        [
            f"invalid access policy {path} (3 problem(s))",
            "  - /: Additional properties are not allowed ('colour' was unexpected)",
            "  - /tokens/0/secret_sha256: 'not-hex' does not match",
            "  - /clients/0/namespaces: [] should be non-empty",
        ],
    )


def _missing(folder: Path) -> tuple[Path, dict[str, str], list[str]]:
    path = folder / "nowhere" / "access.json"
    return path, {}, [f"invalid access policy {path} (1 problem(s))", "cannot read it:"]


def _bad_signing_key(folder: Path) -> tuple[Path, dict[str, str], list[str]]:
    path = write_policy(folder, tokens={"alice": ("alice-secret", [(["*"], ["admin"])])})
    (folder / "signing.pem").write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n")
    return path, {}, [str(folder / "signing.pem")]


def _with_admin_token(folder: Path) -> tuple[Path, dict[str, str], list[str]]:
    path = write_policy(folder, clients={"fleet-a": ("fleet-a-secret", ["team-a"])})
    return (
        path,
        {"TEMPOCONF_ADMIN_TOKEN": "shared-secret"},
        ["TEMPOCONF_ACCESS_FILE is set, and so is TEMPOCONF_ADMIN_TOKEN", "unset the others"],
    )


PROBLEMS: dict[str, Callable[[Path], tuple[Path, dict[str, str], list[str]]]] = {
    "not JSON": _not_json,
    "wrong fields": _wrong_fields,
    "missing": _missing,
    "bad signing key": _bad_signing_key,
    "with TEMPOCONF_ADMIN_TOKEN": _with_admin_token,
}


# Every problem through `api`; each other command with one (they share the check, cli/_common.py):
# each case is a process start, and the main suite's time is counted.
CASES = [("api", problem) for problem in PROBLEMS] + [
    (command, "wrong fields") for command in COMMANDS if command != "api"
]


@pytest.mark.parametrize(("command", "problem"), CASES)
def test_a_policy_that_cannot_be_used_stops_the_start_with_one_clear_message(
    tmp_path: Path, command: str, problem: str
) -> None:
    folder = tmp_path / "policy"
    folder.mkdir()
    path, variables, expected = PROBLEMS[problem](folder)
    data_dir = tmp_path / "data"
    args = list(COMMANDS[command])
    if command == "dev":
        args += ["--ui-port", str(free_port()), "--api-port", str(free_port())]
    env = cli_env(
        TEMPOCONF_ACCESS_FILE=str(path),
        TEMPOCONF_DATA_DIR=str(data_dir),
        TEMPOCONF_DATABASE_URL=f"sqlite:///{tmp_path / 'none.db'}",
        **variables,
    )
    result = run_cli(*args, env=env, cwd=tmp_path, timeout=60)

    name = command.split(" ")[0]
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"tempoconf: tempoconf {name}: "), result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""  # the one message is all
    assert "starting the Temporal dev server" not in result.stdout  # refused before anything
    assert "listening" not in result.stdout + result.stderr
    assert not (data_dir / "temporal.log").exists()  # dev started no server
    assert not (tmp_path / "none.db").exists()  # nor opened a store
