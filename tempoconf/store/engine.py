"""Engine set-up: connections (SQLite pragmas and write locks), migrations, the revision counter.

The revision counter is the store's change feed: every change a client can see bumps it in the
same transaction, logging the configs it changed (change_log.py), and on PostgreSQL the bump also
sends `NOTIFY tempoconf_changes` at commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, func, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from tempoconf.store.change_log import record_changes
from tempoconf.store.spans import trace_engine
from tempoconf.store.tables import StoreRevision, table

__all__ = [
    "CHANGE_CHANNEL",
    "MIGRATIONS",
    "WRITE_OPTION",
    "bump_revision",
    "current_revision",
    "downgrade",
    "head_revision",
    "known_revisions",
    "make_engine",
    "read_revision",
    "revisions_in_order",
    "upgrade",
]

CHANGE_CHANNEL = "tempoconf_changes"
"""PostgreSQL: every revision bump sends `NOTIFY tempoconf_changes, '<revision>'` at commit."""

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
"""The alembic script folder."""

WRITE_OPTION = "tempoconf_write"
"""Execution option marking a connection whose transaction writes (SQLite: BEGIN IMMEDIATE)."""

_REVISION = table(StoreRevision)
# Any constant works; every tempoconf process must use the same one.
_PG_MIGRATION_LOCK = 0x74656D706F636F6E  # "tempocon"
_SQLITE_BUSY_TIMEOUT_MS = 5000


def make_engine(url: str) -> Engine:
    """An engine for `url`; on SQLite with the pragmas and BEGIN handling the store relies on."""
    sa_url = make_url(url)
    if sa_url.get_backend_name() != "sqlite":
        engine = create_engine(sa_url, pool_pre_ping=True)
        trace_engine(engine)
        return engine
    database = sa_url.database or ""
    in_memory = database in ("", ":memory:") or sa_url.query.get("mode") == "memory"
    if in_memory:
        # One shared connection, or every connection would see its own empty database.
        engine = create_engine(
            sa_url, poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
    else:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(sa_url)
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    trace_engine(engine)
    return engine


def _sqlite_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # pysqlite's own implicit BEGIN is deferred and skips SELECTs; _sqlite_begin emits BEGIN instead.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    # A deferred transaction that reads and then writes cannot wait for the write lock in WAL mode
    # (SQLITE_BUSY_SNAPSHOT at once, busy_timeout does not apply): writers take it at BEGIN.
    write = conn.get_execution_options().get(WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def head_revision() -> str:
    """The newest migration this version of tempoconf ships."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None, "the migrations folder has no head"
    return head


def known_revisions() -> set[str]:
    """Every migration this version of tempoconf ships."""
    return set(revisions_in_order())


def current_revision(engine: Engine) -> str | None:
    """The migration the store is at; None when no migration was ever applied (an empty database)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn, conn.begin():
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Run the migrations to head, serialised across processes by a database lock."""
    _migrate(engine, command.upgrade, "head")


def downgrade(engine: Engine, revision: str) -> None:
    """Undo the migrations after `revision`, newest first (each one's `downgrade()`: it drops what
    that migration added), under the same lock as `upgrade`. `tempoconf db downgrade`, before an
    earlier tempoconf runs on the store again."""
    _migrate(engine, command.downgrade, revision)


def revisions_in_order() -> list[str]:
    """Every migration this version of tempoconf ships, oldest first."""
    from alembic.script import ScriptDirectory

    newest_first = ScriptDirectory(str(MIGRATIONS)).walk_revisions()
    return [script.revision for script in newest_first][::-1]


def _migrate(engine: Engine, step: Callable[[Config, str], None], revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    attempts = 0
    while True:
        attempts += 1
        try:
            with engine.connect() as conn:
                conn.execution_options(**{WRITE_OPTION: True})
                with conn.begin():
                    if conn.dialect.name == "postgresql":
                        # Released at commit; DDL is transactional, so a waiter finds head applied.
                        conn.execute(
                            text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                        )
                    config.attributes["connection"] = conn
                    step(config, revision)
            return
        except OperationalError as error:
            # SQLite: a WAL switch or BEGIN IMMEDIATE can still time out when many processes start
            # on a fresh file at once; the migration itself is idempotent, so try again.
            if engine.dialect.name != "sqlite" or "locked" not in str(error) or attempts >= 10:
                raise
            time.sleep(0.1 * attempts)
        finally:
            config.attributes.pop("connection", None)


def bump_revision(conn: Connection, keys: Iterable[tuple[str, str]]) -> int:
    """Add one to the revision in the caller's transaction and log `keys`, the (namespace, path)
    of every config the change touched, at it (PostgreSQL: and NOTIFY the revision at commit).
    Returns the new revision. ValueError when `keys` is empty: a change names what it changed."""
    changed = sorted(set(keys))
    if not changed:
        raise ValueError(
            "bump_revision needs the (namespace, path) of each config the change touched: "
            "readers reload only the configs logged (tempoconf/store/change_log.py)"
        )
    # The UPDATE locks the revision row to the commit: revisions commit in order, so a reader
    # that sees revision R also sees every change logged at R or before.
    revision = int(
        conn.execute(
            update(_REVISION)
            .where(_REVISION.c.id == 1)
            .values(revision=_REVISION.c.revision + 1)
            .returning(_REVISION.c.revision)
        ).scalar_one()
    )
    record_changes(conn, revision, changed)
    if conn.dialect.name == "postgresql":
        # Delivered at commit, and only if it commits: listeners never hear of a rolled-back change.
        conn.execute(select(func.pg_notify(CHANGE_CHANNEL, str(revision))))
    return revision


def read_revision(conn: Connection) -> int:
    """The revision as the caller's transaction sees it."""
    return int(conn.execute(select(_REVISION.c.revision).where(_REVISION.c.id == 1)).scalar_one())
