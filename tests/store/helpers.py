"""Small builders shared by the store tests."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, func, select
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from tempoconf.canonical import version_id
from tempoconf.resolution import PublishedStage, VersionRecord
from tempoconf.store.store import Store
from tempoconf.store.tables import table

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
    store.acquire_lock(namespace, path, workflow_id=workflow_id, run_id=run_id, version=version)
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


def count_rows(store: Store, model: type[SQLModel]) -> int:
    """Rows in a table, read on a separate connection (what another process would see)."""
    engine = create_engine(store.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table(model))).scalar_one())
    finally:
        engine.dispose()
