"""`tempoconf db upgrade`: the explicit migration a deployment runs before its processes start."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.cli.conftest import cli_env, run_cli


def test_db_upgrade_creates_a_sqlite_store_at_head(tmp_path: Path) -> None:
    result = run_cli("db", "upgrade", "--data-dir", tmp_path / "state", env=cli_env(), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    database = tmp_path / "state" / "tempoconf.db"
    with sqlite3.connect(database) as conn:
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert (
        result.stdout == f"store sqlite:///{database.resolve()} is at migration {revision} (head)\n"
    )
    # Run again: nothing to do, same answer.
    again = run_cli("db", "upgrade", "--data-dir", tmp_path / "state", env=cli_env(), cwd=tmp_path)
    assert (again.returncode, again.stdout) == (0, result.stdout)


def test_db_upgrade_masks_the_password_of_a_database_url(tmp_path: Path) -> None:
    url = os.environ.get("TEMPOCONF_TEST_DATABASE_URL")
    if url is None:
        if os.environ.get("CI") == "true":
            pytest.fail("TEMPOCONF_TEST_DATABASE_URL is not set under CI=true")
        pytest.skip("TEMPOCONF_TEST_DATABASE_URL not set")
    from sqlalchemy.engine import make_url

    with_password = make_url(url).set(password="s3cret-pw")
    result = run_cli(
        "db",
        "upgrade",
        env=cli_env(TEMPOCONF_DATABASE_URL=with_password.render_as_string(hide_password=False)),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "s3cret-pw" not in result.stdout
    assert ":***@" in result.stdout
    engine = create_engine(url)
    with engine.connect() as conn:
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    engine.dispose()
    assert result.stdout.endswith(f"is at migration {revision} (head)\n")
