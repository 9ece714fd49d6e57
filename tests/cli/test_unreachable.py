"""A command that cannot reach the store, Temporal or the API says so in one line: what, where (the
URL without its password), which setting to check; exit 1 (`tempoconf --help` lists the codes).
`--debug` or TEMPOCONF_DEBUG=1 adds the traceback."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.cli.conftest import cli_env, free_port, run_cli
from tests.fixtures.ci import missing
from tests.fixtures.database import POSTGRESQL_URL_VARIABLE

EXIT_UNREACHABLE = 1  # `tempoconf --help`: exit codes
PASSWORD = "s3cret-password"
PATH = "myproject/server_config"


def _one_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 1, nothing on stdout, stderr one `tempoconf: ` line holding every fragment."""
    stdout, stderr = result.stdout, result.stderr
    assert result.returncode == EXIT_UNREACHABLE, stdout + stderr
    assert stdout == "", stdout
    assert "Traceback" not in stderr, stderr
    assert stderr.startswith("tempoconf: ") and stderr.count("\n") == 1, stderr
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr)
    assert PASSWORD not in stderr


def _with_debug(args: tuple[str, ...], env: dict[str, str], cwd: Path, first_line: str) -> None:
    """The same command with --debug, then with TEMPOCONF_DEBUG=1: the line, then the traceback."""
    for flags, variables in ((("--debug",), {}), ((), {"TEMPOCONF_DEBUG": "1"})):
        result = run_cli(*flags, *args, env={**env, **variables}, cwd=cwd)
        assert result.returncode == EXIT_UNREACHABLE, result.stderr
        assert result.stderr.startswith(first_line), result.stderr
        assert "Traceback (most recent call last)" in result.stderr, result.stderr
        assert PASSWORD not in result.stderr


def _postgresql_server() -> str:
    """The test server's URL (tests/fixtures/database.py: skipped without it, failed under CI)."""
    url = os.environ.get(POSTGRESQL_URL_VARIABLE, "").strip()
    if url:
        return url
    message = f"{POSTGRESQL_URL_VARIABLE} is missing (a postgresql+psycopg:// server URL)"
    missing(message)


def test_a_missing_postgresql_database_is_one_line(tmp_path: Path) -> None:
    server = make_url(_postgresql_server())
    missing = f"tempoconf_missing_{secrets.token_hex(4)}"
    url = server.set(database=missing, password=PASSWORD)
    env = cli_env(TEMPOCONF_DATABASE_URL=url.render_as_string(hide_password=False))
    shown = url.render_as_string(hide_password=True)
    result = run_cli("versions", PATH, env=env, cwd=tmp_path)
    _one_line(
        result,
        f"tempoconf: cannot reach the store at {shown}: ",
        f'database "{missing}" does not exist',
        "Check TEMPOCONF_DATABASE_URL (or --database-url).",
    )
    _with_debug(("versions", PATH), env, tmp_path, f"tempoconf: cannot reach the store at {shown}")


def test_a_closed_database_port_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:{free_port()}/nope"
    env = cli_env(TEMPOCONF_DATABASE_URL=url)
    result = run_cli("versions", PATH, env=env, cwd=tmp_path)
    shown = url.replace(PASSWORD, "***")
    _one_line(
        result,
        f"tempoconf: cannot reach the store at {shown}: ",
        "Connection refused",
        "Check TEMPOCONF_DATABASE_URL (or --database-url).",
    )


def test_a_sqlite_file_in_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    database = tmp_path / "no" / "such" / "folder" / "tempoconf.db"
    env = cli_env(TEMPOCONF_DATABASE_URL=f"sqlite:///{database}")
    result = run_cli("versions", PATH, env=env, cwd=tmp_path)
    _one_line(result, f"tempoconf: no store at {database}", "TEMPOCONF_DATABASE_URL")
    assert not database.parent.exists()  # nothing created
    _with_debug(("versions", PATH), env, tmp_path, f"tempoconf: no store at {database}")


def test_a_closed_temporal_port_is_one_line(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    env = cli_env(TEMPORAL_ADDRESS=address, TEMPOCONF_DATA_DIR=str(tmp_path / "state"))
    result = run_cli("rollout", "status", PATH, env=env, cwd=tmp_path)
    first = f"tempoconf: cannot reach Temporal at {address} (namespace default, no TLS): "
    _one_line(result, first, "connection refused", "TEMPORAL_ADDRESS or --temporal-address")
    _with_debug(("rollout", "status", PATH), env, tmp_path, first)


def test_a_closed_api_port_is_one_line(tmp_path: Path) -> None:
    api_url = f"http://127.0.0.1:{free_port()}"
    env = cli_env(TEMPOCONF_API_URL=api_url, TEMPOCONF_ADMIN_TOKEN=PASSWORD)
    result = run_cli("rollout", "status", PATH, env=env, cwd=tmp_path)
    first = f"tempoconf: cannot reach the admin API at {api_url}: "
    _one_line(result, first, "TEMPOCONF_API_URL (or --api-url)")
    _with_debug(("rollout", "status", PATH), env, tmp_path, first)


def test_the_exit_codes_are_in_the_help(tmp_path: Path) -> None:
    result = run_cli("--help", env=cli_env(), cwd=tmp_path)
    assert result.returncode == 0
    assert "exit codes:" in result.stdout and "--debug" in result.stdout
    assert "could not be reached" in result.stdout
