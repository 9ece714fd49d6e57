"""Rollouts: the per-config locks a run takes (one config's, or each of a changeset's), the
active rollout row each begins, and the end of a run that ended without its own (steps.py holds
the steps between: publish, renew, promote, revert)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, insert, select, update

from tempoconf.store._base import (
    AUDIT,
    LOCK,
    ROLLOUT,
    StoreBase,
    config_is,
    dialect_insert,
    require_version,
)
from tempoconf.store.engine import bump_revision
from tempoconf.store.errors import LockHeldError
from tempoconf.store.records import LockRecord, RolloutRecord, RunConfig
from tempoconf.store.rollout_rows import (
    ConfigWrite,
    get_lock,
    get_rollout,
    lock_record,
    release_lock,
    replace_rollout,
    require_holder,
    run_configs,
)

__all__ = ["RolloutsMixin"]


class RolloutsMixin(StoreBase):
    """Locks, rollout rows and abandoned runs (a part of Store)."""

    # -- lock --------------------------------------------------------------------------------------
    def acquire_locks(
        self,
        versions: Mapping[tuple[str, str], str],
        *,
        workflow_id: str,
        run_id: str,
        replace: Mapping[tuple[str, str], str] | None = None,
    ) -> list[LockRecord]:
        """Take the lock of every config of this run, in one transaction, or none: `versions`,
        each config (namespace, path) and the version it is locked for (a single config's
        rollout: one). Returns the locks, in that order.

        A lock is taken when it is free or already held by `run_id` (idempotent). One held by
        `replace[config]` (a run the caller verified is no longer running) is taken over
        atomically. Otherwise raises LockHeldError naming the first config's holder (nothing taken).
        """
        now = self.now()
        with self._write() as conn:
            return [
                _acquire(
                    conn,
                    {
                        "namespace": namespace,
                        "path": path,
                        "workflow_id": workflow_id,
                        "run_id": run_id,
                        "version": version,
                        "acquired_at": now,
                    },
                    (replace or {}).get((namespace, path)),
                )
                for (namespace, path), version in versions.items()
            ]

    def get_lock(self, namespace: str, path: str) -> LockRecord | None:
        with self._read() as conn:
            return get_lock(conn, namespace, path)

    def list_locks(self) -> list[LockRecord]:
        """Every config's lock (one row per config with a rollout running, or left by a run that
        ended without releasing it), oldest first."""
        with self._read() as conn:
            rows = conn.execute(select(LOCK).order_by(LOCK.c.acquired_at)).all()
        return [lock_record(row._mapping) for row in rows]

    def run_configs(self, namespace: str, path: str, run_id: str) -> list[RunConfig]:
        """The configs of a run: the one it was started for (`namespace`, `path`) first, then
        every other config whose lock the run holds (a changeset's), by namespace and path."""
        with self._read() as conn:
            return run_configs(conn, namespace, path, run_id)

    def end_abandoned_run(
        self,
        namespace: str,
        path: str,
        *,
        run_id: str,
        workflow_id: str,
        outcome: str,
        actor: str,
        reason: str,
        event_key: str,
    ) -> bool:
        """End a run that ended without its own cleanup (terminated, timed out: its workflow runs
        no more code), in one transaction: audit `rollout.<outcome>`, mark its rollout row so, and
        release its lock. Its stages are left to lapse at their `expires_at` (documented for a
        terminated rollout); the next rollout of the config replaces them.

        Only while `run_id` holds the lock: False, writing nothing, when it does not (it released
        it, or a later run reclaimed it). Idempotent by event_key (a run's revert key, so a run
        ends in the audit log once)."""
        now = self.now()
        with self._write() as conn:
            lock = get_lock(conn, namespace, path, for_update=True)
            if lock is None or lock.run_id != run_id:
                return False
            write = ConfigWrite(conn, namespace, path, lock.version, run_id, actor, event_key, now)
            if not write.audit(
                f"rollout.{outcome}",
                reason=reason,
                version=lock.version,
                workflow_id=workflow_id,
                details={"run_id": run_id},
            ):
                return False
            conn.execute(
                update(ROLLOUT)
                .where(*config_is(ROLLOUT, namespace, path), ROLLOUT.c.run_id == run_id)
                .values(state=outcome, updated_at=now)
            )
            release_lock(conn, namespace, path, run_id)
        return True

    # -- rollout -----------------------------------------------------------------------------------
    def begin_rollout(
        self,
        namespace: str,
        path: str,
        *,
        workflow_id: str,
        run_id: str,
        version: str,
        actor: str,
        reason: str,
        event_key: str,
        details: Mapping[str, Any] | None = None,
    ) -> bool:
        """Create the active-rollout row for this run (state `started`), audited `rollout.started`
        with `details` (e.g. the request's author, commit and message: a version keeps those of the
        rollout that first stored it, so a later rollout of the same value keeps its own here).
        Requires the lock to be held by run_id (raises LockHeldError otherwise).

        A rollout row left by an earlier run (that lost the lock) is replaced, with its stages.
        Returns False, writing nothing, when this run's rollout exists already."""
        now = self.now()
        with self._write() as conn:
            lock = get_lock(conn, namespace, path, for_update=True)
            current = get_rollout(conn, namespace, path, for_update=True)
            if current is not None and current.run_id == run_id:
                return False
            write = ConfigWrite(conn, namespace, path, None, run_id, actor, event_key, now)
            if not write.audit(
                "rollout.started",
                reason=reason,
                version=version,
                workflow_id=workflow_id,
                details={**(details or {}), "run_id": run_id},
            ):
                return False
            require_holder(lock, namespace, path, run_id)
            require_version(conn, namespace, path, version)
            replace_rollout(
                conn,
                namespace,
                path,
                workflow_id=workflow_id,
                run_id=run_id,
                version=version,
                at=now,
            )
            bump_revision(conn, [(namespace, path)])
        return True

    def get_rollout(self, namespace: str, path: str) -> RolloutRecord | None:
        with self._read() as conn:
            return get_rollout(conn, namespace, path)

    def workflow_configs(
        self, namespace: str, path: str, workflow_id: str
    ) -> list[tuple[str, str]] | None:
        """Every config (namespace, path) of the rollout `workflow_id`, found from one of its
        configs, (`namespace`, `path`): the configs whose locks its run holds (a running
        changeset's every config), else those its `rollout.started` row of this config names,
        else this config alone when its audit log names the workflow. None: the store ties no
        rollout of this config to that workflow (it is another config's, or none at all).

        The answer comes from what the rollout itself wrote, never from the caller: an access
        check is made against the namespaces of the thing acted on."""
        with self._read() as conn:
            for record in (get_lock(conn, namespace, path), get_rollout(conn, namespace, path)):
                if record is not None and record.workflow_id == workflow_id:
                    held = run_configs(conn, namespace, path, record.run_id)
                    return [(config.namespace, config.path) for config in held]
            rows = conn.execute(
                select(AUDIT.c.action, AUDIT.c.details)
                .where(*config_is(AUDIT, namespace, path), AUDIT.c.workflow_id == workflow_id)
                .order_by(AUDIT.c.id.desc())
            )
            named = False
            for action, details in rows:
                named = True
                if action != "rollout.started":
                    continue
                listed = json.loads(details).get("changeset") if details else None
                if isinstance(listed, list) and listed:
                    # `namespace/path` names: a namespace holds no `/` (tempoconf.paths).
                    parts = (str(name).partition("/") for name in listed)
                    return [(space, config) for space, _, config in parts]
                break
        return [(namespace, path)] if named else None


def _acquire(conn: Connection, mine: dict[str, Any], replace_run_id: str | None) -> LockRecord:
    """Take one config's lock for `mine` (the lock row this run wants), as acquire_locks says."""
    namespace, path, run_id = mine["namespace"], mine["path"], mine["run_id"]
    taken_free = conn.execute(
        dialect_insert(conn, LOCK).values(**mine).on_conflict_do_nothing().returning(LOCK.c.run_id)
    ).first()
    if taken_free is not None:
        return lock_record(mine)
    holder = get_lock(conn, namespace, path, for_update=True)
    if holder is None:  # released between the two statements: only PostgreSQL gets here
        conn.execute(insert(LOCK).values(**mine))
        return lock_record(mine)
    if holder.run_id == run_id:
        return holder
    if replace_run_id is None or holder.run_id != replace_run_id:
        raise LockHeldError(holder)
    # Compare-and-set (the row is also locked FOR UPDATE above): not audited here, the caller
    # knows why the old run is dead and records `lock.reclaimed` with its own key.
    taken = conn.execute(
        update(LOCK)
        .where(*config_is(LOCK, namespace, path), LOCK.c.run_id == replace_run_id)
        .values(
            workflow_id=mine["workflow_id"],
            run_id=run_id,
            version=mine["version"],
            acquired_at=mine["acquired_at"],
        )
    ).rowcount
    if not taken:
        current = get_lock(conn, namespace, path)
        if current is not None:
            raise LockHeldError(current)
        conn.execute(insert(LOCK).values(**mine))
    return lock_record(mine)
