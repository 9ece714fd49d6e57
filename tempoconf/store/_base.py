"""What every part of the Store shares: the connection and its transactions, the tables, and the
statements more than one part uses (audit rows, upserts, making a version stable, a row's record)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING, Any, Self, TypeVar, Unpack

from sqlalchemy import Connection, Engine, Row, Table, and_, func, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url

from tempoconf.canonical import canonical_json
from tempoconf.resolution import VersionRecord
from tempoconf.store.engine import (
    WRITE_OPTION,
    current_revision,
    head_revision,
    known_revisions,
    make_engine,
    read_revision,
    upgrade,
)
from tempoconf.store.errors import StoreSchemaError, UnknownVersionError
from tempoconf.store.records import AuditEvent
from tempoconf.store.tables import (
    AuditLog,
    ClientReport,
    ClientSeen,
    ConfigLock,
    ConfigSchema,
    ConfigVersion,
    Rollout,
    RolloutStage,
    Stable,
    StableHistory,
    table,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "AUDIT",
    "LOCK",
    "REPORT",
    "ROLLOUT",
    "SCHEMA",
    "SEEN",
    "STABLE",
    "STABLE_HISTORY",
    "STAGE",
    "VERSION",
    "StoreBase",
    "aware",
    "config_is",
    "dialect_insert",
    "make_stable",
    "require_version",
    "row_record",
    "same_version",
    "upsert",
    "upsert_newer",
    "version_record",
    "write_audit",
]

# The Core tables (Core, not ORM: upserts and compare-and-set updates).
SCHEMA = table(ConfigSchema)
VERSION = table(ConfigVersion)
STABLE = table(Stable)
STABLE_HISTORY = table(StableHistory)
ROLLOUT = table(Rollout)
STAGE = table(RolloutStage)
LOCK = table(ConfigLock)
AUDIT = table(AuditLog)
REPORT = table(ClientReport)
SEEN = table(ClientSeen)


class StoreBase:
    """An open store: its engine, transactions, clock and change feed. The parts of Store derive
    from it, so each reaches the same engine through `_read`/`_write`."""

    _engine: Engine

    # -- connection --------------------------------------------------------------------------------
    def __init__(self, url: str, *, migrate: bool = False) -> None:
        """Connect. `migrate`: first bring the schema to the latest migration (safe from several
        processes; `tempoconf db upgrade`, `dev` and `demo` do). Without it a store that is not at
        this version's head migration raises StoreSchemaError: a read never migrates."""
        self.url = url
        self._transaction = threading.local()
        """The transaction of `atomically()`, per thread."""
        self._engine = make_engine(url)
        # SQLite has one writer at a time. Threads of this process (the worker's activities, in
        # asyncio's thread pool) queue for it here, handed the lock the moment it is free; left to
        # SQLite, each polls its busy handler with sleeps that grow to 100 ms, and under 200
        # concurrent rollouts a write took up to a second instead of a few milliseconds. Other
        # processes (the API, the CLI) still meet at SQLite's lock, with its busy timeout.
        self._sqlite_writer: threading.RLock | None = (
            threading.RLock() if self._engine.dialect.name == "sqlite" else None
        )
        try:
            if migrate:
                upgrade(self._engine)
            else:
                self._check_schema()
        except BaseException:
            self._engine.dispose()
            raise

    def _check_schema(self) -> None:
        current, head = current_revision(self._engine), head_revision()
        if current != head:
            raise StoreSchemaError(
                self.redacted_url, current, head, known=current in known_revisions()
            )

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def redacted_url(self) -> str:
        """The store's URL with any password masked, for messages."""
        return self._engine.url.render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self._engine.dialect.name

    # -- change feed -------------------------------------------------------------------------------
    def revision(self) -> int:
        """A counter that grows with every change visible to clients (cheap: one row)."""
        with self._read() as conn:
            return read_revision(conn)

    def listen_conninfo(self) -> str | None:
        """PostgreSQL: a libpq URL of this database for a `LISTEN tempoconf_changes` connection
        (psycopg); None on SQLite, which has no push (poll `revision()` there)."""
        if self.dialect != "postgresql":
            return None
        url = make_url(self.url).set(drivername="postgresql")
        return url.render_as_string(hide_password=False)

    # -- clock -------------------------------------------------------------------------------------
    def now(self) -> datetime:
        """The current UTC time (aware)."""
        return datetime.now(UTC)

    # -- transactions ------------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction; on SQLite it takes the write lock at BEGIN (see engine.py).
        Inside `atomically()` (on the same thread) it is that transaction."""
        outer: Connection | None = getattr(self._transaction_local(), "conn", None)
        if outer is not None:
            yield outer
            return
        with self._sqlite_writer or contextlib.nullcontext(), self._engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                yield conn

    @contextmanager
    def atomically(self) -> Iterator[None]:
        """Every write method called inside (on this thread) joins one transaction: all of them
        are committed, or none (a changeset's configs are published, promoted and reverted so).
        A method that returns False for an event key already recorded writes nothing, as alone."""
        local = self._transaction_local()
        if getattr(local, "conn", None) is not None:
            yield
            return
        with self._write() as conn:
            local.conn = conn
            try:
                yield
            finally:
                local.conn = None

    def _transaction_local(self) -> threading.local:
        return self._transaction

    @contextmanager
    def _read(self, *, consistent: bool = False) -> Iterator[Connection]:
        """A read transaction; `consistent`: every statement sees the same snapshot."""
        with self._engine.connect() as conn:
            if consistent and conn.dialect.name == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn


# -- statements -------------------------------------------------------------------------------------


def config_is(t: Table, namespace: str, path: str) -> tuple[Any, Any]:
    """The WHERE terms selecting one config's rows of `t`."""
    return (t.c.namespace == namespace, t.c.path == path)


def same_version(t: Table) -> Any:
    """The join of `t` (namespace, path, version) to the version it names."""
    return and_(
        VERSION.c.namespace == t.c.namespace,
        VERSION.c.path == t.c.path,
        VERSION.c.version == t.c.version,
    )


def dialect_insert(conn: Connection, t: Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT with ON CONFLICT (both dialects have it, each under its own class)."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(t)
    return sqlite.insert(t)


def upsert(conn: Connection, t: Table, values: dict[str, Any], *, keys: tuple[str, ...]) -> None:
    """Insert `values`, or update the row with the same `keys` to them."""
    statement = dialect_insert(conn, t).values(**values)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=list(keys),
            set_={name: value for name, value in values.items() if name not in keys},
        )
    )


def upsert_newer(
    conn: Connection,
    t: Table,
    rows: list[dict[str, Any]],
    *,
    newer: str,
    kept: tuple[str, ...] = (),
) -> None:
    """Insert `rows` (at least one, each with the same columns), or update the row with the same
    primary key when the stored one's `newer` column is not later (a row only moves forward): each
    other column to the new value, those `kept` only to a value (NULL keeps the stored one)."""
    statement = dialect_insert(conn, t)
    new = statement.excluded
    keys = [column.name for column in t.primary_key]
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=keys,
            set_={
                name: func.coalesce(new[name], t.c[name]) if name in kept else new[name]
                for name in rows[0]
                if name not in keys
            },
            where=t.c[newer] <= new[newer],
        ),
        rows,
    )


def write_audit(
    conn: Connection, namespace: str, path: str, *, at: datetime, **event: Unpack[AuditEvent]
) -> bool:
    """Insert an audit row; False (nothing inserted) when event_key is already recorded."""
    event_key = event.get("event_key")
    values = {
        "namespace": namespace,
        "path": path,
        "at": at,
        "actor": event["actor"],
        "action": event["action"],
        "reason": event.get("reason", ""),
        "version": event.get("version"),
        "workflow_id": event.get("workflow_id"),
        "event_key": event_key,
        "details": canonical_json(dict(event.get("details") or {})),
    }
    if event_key is None:
        conn.execute(insert(AUDIT).values(**values))
        return True
    # ON CONFLICT also covers a concurrent duplicate on PostgreSQL: it waits for the first to commit.
    # (RETURNING, not rowcount: SQLAlchemy reports -1 as the rowcount of an INSERT on psycopg.)
    statement = (
        dialect_insert(conn, AUDIT)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["event_key"])
        .returning(AUDIT.c.id)
    )
    return conn.execute(statement).first() is not None


def aware(value: datetime, what: str) -> datetime:
    """`value` in UTC; ValueError naming `what` when it is naive."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


_Record = TypeVar("_Record", bound="DataclassInstance")


def row_record(kind: type[_Record], row: Row[Any] | Mapping[Any, Any], **given: Any) -> _Record:
    """The record `kind` (a dataclass) of a row (or a dict of its values): each field the column
    of its name, unless `given` (a value the row holds otherwise: its JSON parsed, say)."""
    # Any keys: SQLAlchemy types a row mapping's keys wider than str.
    values = row._mapping if isinstance(row, Row) else row
    return kind(
        **{name: given[name] if name in given else values[name] for name in _field_names(kind)}
    )


@cache
def _field_names(kind: type[DataclassInstance]) -> tuple[str, ...]:
    """A record's field names, read once per kind (`fields` builds its tuple on every call, and
    a full load of the snapshots calls this for every config)."""
    return tuple(field.name for field in fields(kind))


def version_record(row: Row[Any]) -> VersionRecord:
    """A config_version row as the domain's VersionRecord."""
    return row_record(VersionRecord, row, value=json.loads(row.value))


def require_version(conn: Connection, namespace: str, path: str, version: str) -> None:
    """Raise UnknownVersionError unless the version is stored."""
    found = conn.execute(
        select(VERSION.c.version).where(
            *config_is(VERSION, namespace, path), VERSION.c.version == version
        )
    ).first()
    if found is None:
        raise UnknownVersionError(namespace, path, version)


def make_stable(
    conn: Connection,
    namespace: str,
    path: str,
    version: str,
    *,
    at: datetime,
    actor: str,
    reason: str,
    workflow_id: str | None,
) -> None:
    """stable := version, with a stable_history row (audited by the caller). Raises
    UnknownVersionError (nothing written) when the version was never stored."""
    require_version(conn, namespace, path, version)
    row = {"namespace": namespace, "path": path, "version": version}
    upsert(conn, STABLE, {**row, "updated_at": at}, keys=("namespace", "path"))
    conn.execute(
        insert(STABLE_HISTORY).values(
            **row, at=at, actor=actor, reason=reason, workflow_id=workflow_id
        )
    )
