"""Small builders shared by the store tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, func, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from tempoconf.canonical import version_id
from tempoconf.resolution import ConfigSnapshot, PublishedStage, VersionRecord
from tempoconf.store.store import Store
from tempoconf.store.tables import ClientReport, table

NS = "default"
PATH = "myproject/server_config"


def put(store: Store, value: object, *, namespace: str = NS, path: str = PATH, **meta: str) -> str:
    """Store `value` as a version of the config; returns its id."""
    version = version_id(value)
    store.put_version(namespace, path, VersionRecord(version, value, **meta))
    return version


def stage(
    index: int,
    *,
    expires_in: timedelta = timedelta(hours=1),
    channel: str | None = None,
    percentile: float | None = None,
    labels: Mapping[str, str] | None = None,
    name: str | None = None,
    now: datetime | None = None,
) -> PublishedStage:
    return PublishedStage(
        index=index,
        name=name or f"stage-{index}",
        channel=channel,
        percentile=percentile,
        labels=dict(labels or {}),
        expires_at=(now or datetime.now(UTC)) + expires_in,
    )


def start(
    store: Store,
    version: str,
    *,
    run_id: str = "run-1",
    workflow_id: str = "rollout:1",
    namespace: str = NS,
    path: str = PATH,
) -> None:
    """Lock and begin a rollout of `version` for run_id."""
    store.acquire_locks({(namespace, path): version}, workflow_id=workflow_id, run_id=run_id)
    store.begin_rollout(
        namespace,
        path,
        workflow_id=workflow_id,
        run_id=run_id,
        version=version,
        actor=workflow_id,
        reason="start",
        event_key=f"{run_id}:begin",
    )


def snapshots_of(store: Store) -> dict[tuple[str, str], ConfigSnapshot]:
    """Every known config as clients see it, read as the API reads them."""
    return store.load_snapshots_with_revision()[1]


def snapshot_of(store: Store, namespace: str = NS, path: str = PATH) -> ConfigSnapshot | None:
    """One config as clients see it (stable, staged version, published stages); None if unknown."""
    return snapshots_of(store).get((namespace, path))


@dataclass(frozen=True)
class ReportSums:
    """A config's health reports on one version (or on every other), summed."""

    clients: int
    ok: int
    failed: int
    reports: int


def report_sums(
    store: Store,
    namespace: str,
    path: str,
    version: str,
    *,
    since: datetime,
    exclude_version: bool = False,
) -> ReportSums:
    """The reports on `version` received at or after `since` (with `exclude_version`: on every
    other version, the baseline), summed from `report_totals` as the health checks read them."""
    totals = [
        row
        for row in store.report_totals(namespace, path, since=since)
        if (row.version != version) == exclude_version
    ]
    return ReportSums(
        clients=len({row.client for row in totals}),
        ok=sum(row.ok for row in totals),
        failed=sum(row.failed for row in totals),
        reports=sum(row.reports for row in totals),
    )


def last_report_error(
    store: Store, namespace: str, path: str, version: str | None = None
) -> str | None:
    """The error of the config's last report (on `version`, if given) that had one, read on a
    separate connection (the store keeps it; nothing of the product reads it back)."""
    reports = table(ClientReport)
    engine = create_engine(store.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(
                select(reports.c.error)
                .where(
                    reports.c.namespace == namespace,
                    reports.c.path == path,
                    reports.c.error.is_not(None),
                    reports.c.error != "",
                    *(() if version is None else (reports.c.version == version,)),
                )
                .order_by(reports.c.received_at.desc(), reports.c.id.desc())
                .limit(1)
            ).scalar_one_or_none()
    finally:
        engine.dispose()


def count_rows(store: Store, model: type[SQLModel]) -> int:
    """Rows in a table, read on a separate connection (what another process would see)."""
    engine = create_engine(store.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table(model))).scalar_one())
    finally:
        engine.dispose()


def migrate_to(database_url: str, revision: str, *, down: bool = False) -> None:
    """The database at `revision`, by alembic alone (upgrading, or with `down` downgrading), as
    a tempoconf of that migration left it."""
    from alembic import command
    from alembic.config import Config

    from tempoconf.store.engine import MIGRATIONS

    sqlite_file = make_url(database_url).database
    if make_url(database_url).get_backend_name() == "sqlite" and sqlite_file:
        Path(sqlite_file).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            (command.downgrade if down else command.upgrade)(config, revision)
    finally:
        engine.dispose()


def schema_of(database_url: str) -> dict[str, dict[str, object]]:
    """Every table: its columns (type, nullable, has a default) and its unique indexes."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        inspector = inspect(engine)
        return {
            name: {
                "columns": {
                    column["name"]: (
                        str(column["type"]),
                        column["nullable"],
                        column.get("default") is not None,
                    )
                    for column in inspector.get_columns(name)
                },
                "unique": {
                    tuple(index["column_names"])
                    for index in inspector.get_indexes(name)
                    if index["unique"]
                }
                | {
                    tuple(constraint["column_names"])
                    for constraint in inspector.get_unique_constraints(name)
                },
            }
            for name in inspector.get_table_names()
        }
    finally:
        engine.dispose()
