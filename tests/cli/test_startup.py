"""A command loads what its mode needs, no more: each of the store (SQLAlchemy, Alembic), the
Temporal SDK, httpx and jsonschema is a tenth of a second or more of every call's start-up, and
an operator's `halt` or `status` in an incident should not wait on the ones it never uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import TEMPOCONF, cli_env, free_port

HEAVY = ("sqlalchemy", "alembic", "temporalio", "httpx", "jsonschema")


def _loaded(args: list[str], env: dict[str, str], cwd: Path) -> tuple[set[str], str]:
    """The heavy packages `tempoconf ARGS` imported (`python -X importtime`), and its stderr."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(TEMPOCONF), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    return {package for package in HEAVY if package in imported}, result.stderr


def test_a_command_in_api_mode_loads_neither_the_store_nor_temporal(tmp_path: Path) -> None:
    env = cli_env(
        TEMPOCONF_API_URL=f"http://127.0.0.1:{free_port()}",  # nothing listens: it says so
        TEMPOCONF_ADMIN_TOKEN="operator-token",
    )
    loaded, stderr = _loaded(["rollout", "status", "myproject/server_config"], env, tmp_path)
    assert "cannot reach the admin API at http://127.0.0.1:" in stderr, stderr[-2000:]
    assert loaded == {"httpx"}


def test_a_store_command_in_direct_mode_loads_no_temporal_and_no_http(tmp_path: Path) -> None:
    env = cli_env(TEMPOCONF_DATA_DIR=str(tmp_path / "state"))
    loaded, stderr = _loaded(["versions", "myproject/server_config"], env, tmp_path)
    assert f"no store at {tmp_path / 'state' / 'tempoconf.db'}" in stderr, stderr[-2000:]
    assert loaded == {"sqlalchemy", "alembic"}
