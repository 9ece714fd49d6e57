"""Commands that refuse bad input before they talk to Temporal or the API (no server running)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import EXAMPLES, cli_env, free_port, run_cli

PATH = "myproject/server_config"


def _env(tmp_path: Path) -> dict[str, str]:
    # Temporal and the API point at ports nobody listens on: a command that reached them would fail
    # differently (exit 1, "cannot reach"), so a refusal here proves nothing was attempted.
    return cli_env(
        TEMPOCONF_DATA_DIR=str(tmp_path / "state"),
        TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
        TEMPOCONF_API_URL=f"http://127.0.0.1:{free_port()}",
    )


def _store_env(tmp_path: Path) -> dict[str, str]:
    """`_env`, with the store created by `tempoconf db upgrade` (as a deployment does)."""
    env = _env(tmp_path)
    created = run_cli("db", "upgrade", env=env, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    return env


def test_bad_rollout_request_prints_every_problem_and_starts_nothing(tmp_path: Path) -> None:
    env = _store_env(tmp_path)
    registered = run_cli(
        "schema", "set", PATH, EXAMPLES / "server_config.schema.json", env=env, cwd=tmp_path
    )
    assert registered.returncode == 0, registered.stderr
    assert f"registered a schema for default/{PATH}" in registered.stdout

    result = run_cli("rollout", "start", EXAMPLES / "rollout-bad.json", env=env, cwd=tmp_path)

    assert result.returncode == 2
    assert "refused: 11 problem(s)" in result.stderr
    for line in [
        "/default_cooldown_time: cannot parse duration 'five minutes'",
        "/default_expiration_time: default_expiration_time must be greater than zero",
        "/stages/0/cooldwon: unknown field 'cooldwon'",
        "/stages/1/percentile: Input should be less than or equal to 100",
        "/stages/2: a stage must name at least one of channel, percentile, labels",
        "/stages/3/percentile: percentile has at most two decimals",
        "/health/0: a reports check needs max_error_ratio, max_baseline_factor or judge",
        "/health/1: unknown check kind 'dns'",
        "/value: fails the config's schema: Additional properties are not allowed ('max_conections'",
        "/value/is_debug: fails the config's schema: 'yes' is not of type 'boolean'",
        "/value/max_connections: fails the config's schema: 0 is less than the minimum of 1",
    ]:
        assert f"  {line}" in result.stderr, f"missing {line!r} in:\n{result.stderr}"
    assert "nothing was started." in result.stderr
    assert "cannot reach Temporal" not in result.stderr
    assert result.stdout == ""


def test_value_that_only_fails_the_schema_is_refused(tmp_path: Path) -> None:
    env = _store_env(tmp_path)
    run_cli("schema", "set", PATH, EXAMPLES / "server_config.schema.json", env=env, cwd=tmp_path)
    request = json.loads((EXAMPLES / "rollout.json").read_text())
    request["value"] = {"is_debug": False, "max_connections": 1_000_000}
    (tmp_path / "big.json").write_text(json.dumps(request))

    result = run_cli("rollout", "start", "big.json", env=env, cwd=tmp_path)

    assert result.returncode == 2
    assert "refused: 1 problem(s)" in result.stderr
    assert (
        "/value/max_connections: fails the config's schema: 1000000 is greater than the maximum of 100000"
        in result.stderr
    )


def test_request_that_is_not_json_names_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"path": "a/b",\n "value": }')
    result = run_cli("rollout", "start", "broken.json", env=_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 2
    assert (
        "rollout request broken.json is not valid JSON: Expecting value (line 2, column 11)"
        in result.stderr
    )


def test_invalid_schema_is_refused_and_not_registered(tmp_path: Path) -> None:
    env = _env(tmp_path)
    (tmp_path / "bad.schema.json").write_text(json.dumps({"type": "objekt"}))

    refused = run_cli("schema", "set", PATH, "bad.schema.json", env=env, cwd=tmp_path)

    assert refused.returncode == 2
    assert "schema bad.schema.json refused: 1 problem(s)" in refused.stderr
    assert "/type: invalid JSON Schema: 'objekt' is not valid" in refused.stderr
    assert "nothing was registered." in refused.stderr
    # nothing registered, and no store created either: `schema get` finds none
    assert not (tmp_path / "state").exists()


def test_schema_set_then_get_round_trips(tmp_path: Path) -> None:
    env = _store_env(tmp_path)
    first = run_cli(
        "schema", "set", PATH, EXAMPLES / "server_config.schema.json", env=env, cwd=tmp_path
    )
    again = run_cli(
        "schema", "set", PATH, EXAMPLES / "server_config.schema.json", env=env, cwd=tmp_path
    )
    shown = run_cli("schema", "get", PATH, env=env, cwd=tmp_path)

    assert "registered a schema" in first.stdout
    assert f"schema of default/{PATH} unchanged" in again.stdout
    assert shown.returncode == 0
    assert json.loads(shown.stdout) == json.loads(
        (EXAMPLES / "server_config.schema.json").read_text()
    )


def test_invalid_config_path_is_refused(tmp_path: Path) -> None:
    result = run_cli("schema", "get", "my//path", env=_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 2
    assert "config path 'my//path' has an empty segment" in result.stderr


def test_get_without_an_api_says_so(tmp_path: Path) -> None:
    env = _env(tmp_path)
    result = run_cli("get", PATH, env=env, cwd=tmp_path)
    assert result.returncode == 1
    assert f"cannot reach the API at {env['TEMPOCONF_API_URL']}" in result.stderr


def test_status_without_temporal_says_so(tmp_path: Path) -> None:
    env = _env(tmp_path)
    result = run_cli("rollout", "status", PATH, env=env, cwd=tmp_path)
    assert result.returncode == 1
    assert f"cannot reach Temporal at {env['TEMPORAL_ADDRESS']}" in result.stderr
    assert "Is `tempoconf dev` running?" in result.stderr


def test_examples_are_valid_requests() -> None:
    from tempoconf.rollout.request import parse_rollout_request
    from tempoconf.schema_validation import schema_problems, value_problems

    schema = json.loads((EXAMPLES / "server_config.schema.json").read_text())
    assert schema_problems(schema) == []
    assert (
        value_problems(schema, json.loads((EXAMPLES / "server_config.stable.json").read_text()))
        == []
    )
    for name in ("rollout.json", "rollout-manual.json"):
        request = parse_rollout_request(json.loads((EXAMPLES / name).read_text()))
        assert value_problems(schema, request.value) == [], name


def test_version_comes_from_the_package_metadata(tmp_path: Path) -> None:
    from importlib.metadata import version

    result = run_cli("--version", env=_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"tempoconf {version('tempoconf')}"


@pytest.mark.parametrize(
    "command",
    [
        ["versions", PATH],
        ["history", PATH],
        ["schema", "get", PATH],
        ["rollout", "plan", str(EXAMPLES / "rollout-first.json")],
        ["rollout", "start", str(EXAMPLES / "rollout-first.json")],
        ["rollback", PATH, "c839a1b794e06bfb"],
        ["rollout", "halt", PATH],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_a_store_command_elsewhere_refuses_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    """Run from a directory without a store (no data dir set): say where it looked and which
    setting points at the right one; never leave an empty ./.tempoconf/tempoconf.db behind."""
    env = cli_env(
        TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
        TEMPOCONF_API_URL=f"http://127.0.0.1:{free_port()}",
    )
    result = run_cli(*command, env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith(
        f"tempoconf: no store at {(tmp_path / '.tempoconf' / 'tempoconf.db').resolve()} "
        "(the default: .tempoconf in the current directory)."
    ), result.stderr
    assert "TEMPOCONF_DATA_DIR" in result.stderr and "TEMPOCONF_DATABASE_URL" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_data_dir_without_a_store_is_named_in_the_refusal(tmp_path: Path) -> None:
    env = _env(tmp_path)
    result = run_cli("versions", PATH, env=env, cwd=tmp_path)
    assert result.returncode == 1
    assert (
        f"tempoconf: no store at {(tmp_path / 'state' / 'tempoconf.db').resolve()} "
        "(in the data dir of TEMPOCONF_DATA_DIR or --data-dir)." in result.stderr
    )
    assert not (tmp_path / "state").exists()


def test_schema_set_needs_a_store_that_db_upgrade_created(tmp_path: Path) -> None:
    """A write creates no store either: it says where it looked and what creates one."""
    env = _env(tmp_path)
    schema = EXAMPLES / "server_config.schema.json"
    refused = run_cli("schema", "set", PATH, schema, env=env, cwd=tmp_path)
    database = (tmp_path / "state" / "tempoconf.db").resolve()
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.startswith(f"tempoconf: no store at {database} "), refused.stderr
    assert "`tempoconf db upgrade`" in refused.stderr
    assert not (tmp_path / "state").exists()

    assert run_cli("db", "upgrade", env=env, cwd=tmp_path).returncode == 0
    registered = run_cli("schema", "set", PATH, schema, env=env, cwd=tmp_path)
    assert registered.returncode == 0, registered.stderr
    assert registered.stdout.startswith(f"registered a schema for default/{PATH}")
    assert (
        run_cli("versions", PATH, env=env, cwd=tmp_path).stdout.strip()
        == f"no versions of default/{PATH}"
    )


def test_schema_request_prints_the_published_schema(tmp_path: Path) -> None:
    # docs/rollout-request.schema.json is this output, byte for byte: regenerate it with
    # `tempoconf schema request > docs/rollout-request.schema.json` when the request model changes.
    published = EXAMPLES.parent / "docs" / "rollout-request.schema.json"

    result = run_cli("schema", "request", env=_env(tmp_path), cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout == published.read_text(encoding="utf-8")
    assert json.loads(result.stdout)["title"] == "RolloutRequest"
    assert not (tmp_path / "state").exists()  # no store needed, none created
