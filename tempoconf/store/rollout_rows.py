"""The rows of a rollout (its config's lock, its rollout row and its stages), read and written
inside a caller's transaction; rollouts.py and steps.py build the store's methods from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, delete, insert, select

from tempoconf.rollout.changesets import change_event_key
from tempoconf.store._base import LOCK, ROLLOUT, STAGE, config_is, row_record, write_audit
from tempoconf.store.errors import LockHeldError, LockLostError
from tempoconf.store.records import LockRecord, RolloutRecord, RunConfig

__all__ = [
    "ConfigWrite",
    "clear_rollout",
    "get_lock",
    "get_rollout",
    "keyed",
    "lock_record",
    "release_lock",
    "replace_rollout",
    "require_holder",
    "run_configs",
]


@dataclass(frozen=True)
class ConfigWrite:
    """One config's part of a run's write (a step, or its start): its transaction, the config, who
    writes it, when, and the key of its audit row."""

    conn: Connection
    namespace: str
    path: str
    locked_version: str | None
    """The version the run's lock of this config was taken for (None: it holds none, or the write
    does not need it)."""
    run_id: str
    actor: str
    event_key: str
    at: datetime

    def audit(
        self,
        action: str,
        *,
        reason: str,
        version: str | None,
        workflow_id: str | None,
        details: Mapping[str, Any],
    ) -> bool:
        """The write's audit row of this config; False (nothing written) when its key exists."""
        return write_audit(
            self.conn,
            self.namespace,
            self.path,
            at=self.at,
            action=action,
            actor=self.actor,
            reason=reason,
            version=version,
            workflow_id=workflow_id,
            event_key=self.event_key,
            details=details,
        )


def _config_row(
    conn: Connection, t: Table, namespace: str, path: str, *, for_update: bool
) -> Mapping[Any, Any] | None:
    statement = select(t).where(*config_is(t, namespace, path))
    if for_update:
        statement = statement.with_for_update()
    row = conn.execute(statement).first()
    return None if row is None else row._mapping


def lock_record(values: Mapping[Any, Any]) -> LockRecord:
    return row_record(LockRecord, values)


def get_lock(
    conn: Connection, namespace: str, path: str, *, for_update: bool = False
) -> LockRecord | None:
    row = _config_row(conn, LOCK, namespace, path, for_update=for_update)
    return None if row is None else lock_record(row)


def require_holder(lock: LockRecord | None, namespace: str, path: str, run_id: str) -> LockRecord:
    if lock is None:
        raise LockLostError(namespace, path, run_id)
    if lock.run_id != run_id:
        raise LockHeldError(lock)
    return lock


def release_lock(conn: Connection, namespace: str, path: str, run_id: str) -> None:
    """Delete the config's lock if `run_id` holds it."""
    conn.execute(delete(LOCK).where(*config_is(LOCK, namespace, path), LOCK.c.run_id == run_id))


def get_rollout(
    conn: Connection, namespace: str, path: str, *, for_update: bool = False
) -> RolloutRecord | None:
    row = _config_row(conn, ROLLOUT, namespace, path, for_update=for_update)
    return None if row is None else row_record(RolloutRecord, row)


def clear_rollout(conn: Connection, namespace: str, path: str) -> None:
    conn.execute(delete(STAGE).where(*config_is(STAGE, namespace, path)))
    conn.execute(delete(ROLLOUT).where(*config_is(ROLLOUT, namespace, path)))


def replace_rollout(
    conn: Connection,
    namespace: str,
    path: str,
    *,
    workflow_id: str,
    run_id: str,
    version: str,
    at: datetime,
) -> RolloutRecord:
    values = {
        "namespace": namespace,
        "path": path,
        "workflow_id": workflow_id,
        "run_id": run_id,
        "version": version,
        "state": "started",
        "stage_index": -1,
        "started_at": at,
        "updated_at": at,
    }
    clear_rollout(conn, namespace, path)
    conn.execute(insert(ROLLOUT).values(**values))
    return row_record(RolloutRecord, values)


def run_configs(conn: Connection, namespace: str, path: str, run_id: str) -> list[RunConfig]:
    """The configs of a run: the one it was started for first, then every other config whose
    lock the run holds (a changeset's), by namespace and path. A single config's rollout is a
    changeset of one."""
    first = RunConfig(namespace, path, None)
    others: list[RunConfig] = []
    for row in conn.execute(select(LOCK).where(LOCK.c.run_id == run_id)):
        if (row.namespace, row.path) == (namespace, path):
            first = RunConfig(namespace, path, row.version)
        else:
            others.append(RunConfig(row.namespace, row.path, row.version))
    # Sorted here, not by ORDER BY: PostgreSQL's collation may order names otherwise.
    return [first, *sorted(others, key=lambda config: (config.namespace, config.path))]


def keyed(configs: list[RunConfig], event_key: str) -> list[tuple[RunConfig, str]]:
    """Each config of a run with the event key of its row of a step (`change_event_key`): the
    step's own key for a single config, the key with the config's name for a changeset's."""
    changeset = len(configs) > 1
    return [
        (config, change_event_key(event_key, config.namespace, config.path, changeset=changeset))
        for config in configs
    ]
