"""`tempoconf db upgrade`: the explicit migration a deployment runs before its processes start."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.cli.conftest import cli_env, free_port, run_cli
from tests.fixtures.ci import missing


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
        missing("TEMPOCONF_TEST_DATABASE_URL is not set")
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
    from tempoconf.store.engine import head_revision

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
    # and how to come back to this version: the newer one's downgrade to this one's head
    assert f"that version's `tempoconf db downgrade {head_revision()}` first" in read.stderr
    assert _revision(database) == "0099_from_the_future"


def test_a_missing_store_is_created_by_db_upgrade_not_by_the_servers(tmp_path: Path) -> None:
    env = cli_env(TEMPOCONF_DATA_DIR=str(tmp_path / "state"))
    refused = run_cli("api", "--port", str(free_port()), env=env, cwd=tmp_path)
    assert refused.returncode == 1
    assert "no store at" in refused.stderr and "`tempoconf db upgrade`" in refused.stderr
    assert not (tmp_path / "state").exists()


def test_db_downgrade_takes_the_store_back_step_by_step_keeping_its_data(
    database_url: str, tmp_path: Path
) -> None:
    """Going back to an earlier tempoconf after an upgrade: this version's `db downgrade` to each
    earlier migration leaves the schema a store migrated only that far has, keeps the rows of
    the tables that stay, and `db upgrade` comes back to head with them."""
    from sqlalchemy.engine import make_url

    from tempoconf.store.engine import revisions_in_order
    from tempoconf.store.store import Store
    from tests.store.helpers import NS, PATH, migrate_to, put, schema_of

    known = revisions_in_order()
    schemas = {}
    for revision in known:
        migrate_to(database_url, revision)
        schemas[revision] = schema_of(database_url)
    store = Store(database_url)
    version = put(store, {"max_connections": 100})
    store.close()
    shown = make_url(database_url).render_as_string(hide_password=True)
    env = cli_env(TEMPOCONF_DATABASE_URL=database_url)

    for newer, target in reversed(list(zip(known[1:], known, strict=False))):
        result = run_cli("db", "downgrade", target, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"store {shown} is at migration {target}; undone: {newer}\n"
        assert schema_of(database_url) == schemas[target], target
    engine = create_engine(database_url)
    with engine.connect() as conn:
        kept = conn.execute(text("SELECT namespace, path, version FROM config_version")).all()
    engine.dispose()
    assert [tuple(row) for row in kept] == [(NS, PATH, version)]

    again = run_cli("db", "downgrade", known[0], env=env, cwd=tmp_path)
    assert (again.returncode, again.stdout) == (
        0,
        f"store {shown} is at migration {known[0]}: nothing to undo\n",
    )
    upgraded = run_cli("db", "upgrade", env=env, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert schema_of(database_url) == schemas[known[-1]]
    listed = run_cli("versions", PATH, env=env, cwd=tmp_path)
    assert listed.returncode == 0 and version in listed.stdout, listed


def test_db_downgrade_refuses_what_it_cannot_do_and_changes_nothing(tmp_path: Path) -> None:
    """An unknown migration, a later one than the store's, a store a newer tempoconf migrated, and
    a rollout running (its lock held): each refused, saying why, the store as it was."""
    from tempoconf.store.engine import head_revision, revisions_in_order

    state = tmp_path / "state"
    database = state / "tempoconf.db"
    env = cli_env(TEMPOCONF_DATA_DIR=str(state))
    created = run_cli("db", "upgrade", env=env, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    known = revisions_in_order()
    where = f"tempoconf: store sqlite:///{database.resolve()}"

    unknown = run_cli("db", "downgrade", "0099_nowhere", env=env, cwd=tmp_path)
    assert unknown.returncode == 1
    assert unknown.stderr.startswith(
        f"tempoconf: no migration '0099_nowhere': this tempoconf knows {known[0]}, "
    )

    with sqlite3.connect(database) as conn:
        conn.execute(
            "INSERT INTO config_lock VALUES ('default', 'myproject/server_config', 'rollout-1', "
            "'run-1', 'v1', '2026-12-01 00:00:00')"
        )
    locked = run_cli("db", "downgrade", known[0], env=env, cwd=tmp_path)
    assert (locked.returncode, locked.stdout) == (1, "")
    assert locked.stderr.startswith(
        f"{where}: 1 config(s) are locked by a rollout (default/myproject/server_config by "
        "rollout-1)."
    ), locked.stderr
    assert "Nothing was changed." in locked.stderr
    assert _revision(database) == head_revision()
    with sqlite3.connect(database) as conn:
        conn.execute("DELETE FROM config_lock")

    assert run_cli("db", "downgrade", known[-2], env=env, cwd=tmp_path).returncode == 0
    later = run_cli("db", "downgrade", known[-1], env=env, cwd=tmp_path)
    assert (later.returncode, later.stderr) == (
        1,
        f"{where} is at migration {known[-2]}, before {known[-1]}: `tempoconf db upgrade` moves "
        "it forward\n",
    )

    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099_from_the_future'")
    newer = run_cli("db", "downgrade", known[0], env=env, cwd=tmp_path)
    assert newer.returncode == 1
    assert (
        "is at migration 0099_from_the_future, which this tempoconf does not know" in newer.stderr
    )
    assert "run `tempoconf db downgrade` with that version" in newer.stderr
    assert _revision(database) == "0099_from_the_future"
