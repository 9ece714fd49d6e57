"""`tempoconf db upgrade`: the explicit migration a deployment runs before its processes start."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.cli.conftest import cli_env, free_port, run_cli


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


def _at_migration(database: Path, revision: str) -> None:
    """A SQLite store migrated up to `revision` only, as an older tempoconf left it."""
    from alembic import command
    from alembic.config import Config

    from tempoconf.store.engine import MIGRATIONS

    database.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{database}")
    try:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def _revision(database: Path) -> str:
    with sqlite3.connect(database) as conn:
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(revision)


def _tables(database: Path) -> set[str]:
    with sqlite3.connect(database) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_a_read_never_migrates_the_servers_refuse_and_db_upgrade_then_works(
    tmp_path: Path,
) -> None:
    from tempoconf.store.engine import head_revision

    database = tmp_path / "state" / "tempoconf.db"
    _at_migration(database, "0003_client_seen")
    tables = _tables(database)
    env = cli_env(
        TEMPOCONF_DATA_DIR=str(tmp_path / "state"),
        # nothing listens there: the refusals below come before anything connects
        TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
    )
    behind = (
        f"tempoconf: store sqlite:///{database.resolve()} is at migration 0003_client_seen, "
        f"this tempoconf needs {head_revision()}: run `tempoconf db upgrade` first\n"
    )

    read = run_cli("versions", "myproject/server_config", env=env, cwd=tmp_path)
    assert (read.returncode, read.stdout, read.stderr) == (1, "", behind)
    assert _revision(database) == "0003_client_seen" and _tables(database) == tables

    # The servers refuse it too: migrations are `db upgrade`'s (the compose file's `migrate`).
    for server in (["api", "--port", str(free_port())], ["worker"]):
        refused = run_cli(*server, env=env, cwd=tmp_path)
        assert refused.returncode == 1, server
        assert behind in refused.stderr, refused.stderr
    assert _revision(database) == "0003_client_seen"

    upgraded = run_cli("db", "upgrade", env=env, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert _revision(database) == head_revision()
    after = run_cli("versions", "myproject/server_config", env=env, cwd=tmp_path)
    assert (after.returncode, after.stdout, after.stderr) == (
        1,
        "no versions of default/myproject/server_config\n",
        "",
    )


def test_a_store_a_newer_tempoconf_migrated_is_refused(tmp_path: Path) -> None:
    database = tmp_path / "state" / "tempoconf.db"
    created = run_cli(
        "db", "upgrade", "--data-dir", tmp_path / "state", env=cli_env(), cwd=tmp_path
    )
    assert created.returncode == 0, created.stderr
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099_from_the_future'")

    read = run_cli(
        "history", "myproject/server_config", "--data-dir", tmp_path / "state", env=cli_env(),
        cwd=tmp_path,
    )  # fmt: skip

    assert read.returncode == 1
    assert "is at migration 0099_from_the_future, which this tempoconf does not know" in read.stderr
    assert "a newer tempoconf migrated it" in read.stderr
    assert _revision(database) == "0099_from_the_future"


def test_a_missing_store_is_created_by_db_upgrade_not_by_the_servers(tmp_path: Path) -> None:
    env = cli_env(TEMPOCONF_DATA_DIR=str(tmp_path / "state"))
    refused = run_cli("api", "--port", str(free_port()), env=env, cwd=tmp_path)
    assert refused.returncode == 1
    assert "no store at" in refused.stderr and "`tempoconf db upgrade`" in refused.stderr
    assert not (tmp_path / "state").exists()
