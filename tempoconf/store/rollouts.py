"""Rollouts: the per-config lock, the active rollout, its published stages and leases, and the
two ends of a run (promote to stable, or revert to it)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from tempoconf.canonical import canonical_json
from tempoconf.resolution import PublishedStage
from tempoconf.store._base import (
    LOCK,
    ROLLOUT,
    STAGE,
    StoreBase,
    aware,
    config_is,
    dialect_insert,
    make_stable,
    require_version,
    upsert,
    write_audit,
)
from tempoconf.store.engine import bump_revision
from tempoconf.store.errors import LockHeldError, LockLostError
from tempoconf.store.records import LockRecord, RolloutRecord, StageLease

__all__ = ["RolloutsMixin"]


class RolloutsMixin(StoreBase):
    """Locks, rollouts, stages and leases, promote and revert (a part of Store)."""

    # -- lock --------------------------------------------------------------------------------------
    def acquire_lock(
        self,
        namespace: str,
        path: str,
        *,
        workflow_id: str,
        run_id: str,
        version: str,
        replace_run_id: str | None = None,
    ) -> LockRecord:
        """Take the per-config lock for this run.

        Succeeds when the lock is free or already held by `run_id` (idempotent). When held by
        `replace_run_id` (a run the caller verified is no longer running), takes it over atomically.
        Otherwise raises LockHeldError naming the holder.
        """
        now = self.now()
        mine = {
            "namespace": namespace,
            "path": path,
            "workflow_id": workflow_id,
            "run_id": run_id,
            "version": version,
            "acquired_at": now,
        }
        with self._write() as conn:
            taken_free = conn.execute(
                dialect_insert(conn, LOCK)
                .values(**mine)
                .on_conflict_do_nothing()
                .returning(LOCK.c.run_id)
            ).first()
            if taken_free is not None:
                return _lock_record(mine)
            holder = _get_lock(conn, namespace, path, for_update=True)
            if holder is None:  # released between the two statements: only PostgreSQL gets here
                conn.execute(insert(LOCK).values(**mine))
                return _lock_record(mine)
            if holder.run_id == run_id:
                return holder
            if replace_run_id is None or holder.run_id != replace_run_id:
                raise LockHeldError(holder)
            # Compare-and-set (the row is also locked FOR UPDATE above): not audited here, the
            # caller knows why the old run is dead and records `lock.reclaimed` with its own key.
            taken = conn.execute(
                update(LOCK)
                .where(*config_is(LOCK, namespace, path), LOCK.c.run_id == replace_run_id)
                .values(workflow_id=workflow_id, run_id=run_id, version=version, acquired_at=now)
            ).rowcount
            if not taken:
                current = _get_lock(conn, namespace, path)
                if current is not None:
                    raise LockHeldError(current)
                conn.execute(insert(LOCK).values(**mine))
            return _lock_record(mine)

    def get_lock(self, namespace: str, path: str) -> LockRecord | None:
        with self._read() as conn:
            return _get_lock(conn, namespace, path)

    def list_locks(self) -> list[LockRecord]:
        """Every config's lock (one row per config with a rollout running, or left by a run that
        ended without releasing it), oldest first."""
        with self._read() as conn:
            rows = conn.execute(select(LOCK).order_by(LOCK.c.acquired_at)).all()
        return [_lock_record(row._mapping) for row in rows]

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
            lock = _get_lock(conn, namespace, path, for_update=True)
            if lock is None or lock.run_id != run_id:
                return False
            if not write_audit(
                conn,
                namespace,
                path,
                at=now,
                action=f"rollout.{outcome}",
                actor=actor,
                reason=reason,
                version=lock.version,
                workflow_id=workflow_id,
                event_key=event_key,
                details={"run_id": run_id},
            ):
                return False
            conn.execute(
                update(ROLLOUT)
                .where(*config_is(ROLLOUT, namespace, path), ROLLOUT.c.run_id == run_id)
                .values(state=outcome, updated_at=now)
            )
            conn.execute(
                delete(LOCK).where(*config_is(LOCK, namespace, path), LOCK.c.run_id == run_id)
            )
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
            lock = _get_lock(conn, namespace, path, for_update=True)
            current = _get_rollout(conn, namespace, path, for_update=True)
            if current is not None and current.run_id == run_id:
                return False
            if not write_audit(
                conn,
                namespace,
                path,
                at=now,
                action="rollout.started",
                actor=actor,
                reason=reason,
                version=version,
                workflow_id=workflow_id,
                event_key=event_key,
                details={**(details or {}), "run_id": run_id},
            ):
                return False
            _require_holder(lock, namespace, path, run_id)
            require_version(conn, namespace, path, version)
            _replace_rollout(
                conn,
                namespace,
                path,
                workflow_id=workflow_id,
                run_id=run_id,
                version=version,
                at=now,
            )
            bump_revision(conn)
        return True

    def get_rollout(self, namespace: str, path: str) -> RolloutRecord | None:
        with self._read() as conn:
            return _get_rollout(conn, namespace, path)

    def publish_stage(
        self,
        namespace: str,
        path: str,
        *,
        run_id: str,
        stage: PublishedStage,
        actor: str,
        event_key: str,
    ) -> bool:
        """Upsert one stage of this run's rollout (its lease is stage.expires_at), set the rollout's
        stage_index and state `stage.published`, audit `stage.published`, bump revision.
        Raises LockHeldError when run_id no longer holds the lock (nothing is written).

        (LockLostError, a LockHeldError, when nobody holds it.) If begin_rollout was skipped, the
        rollout row is created here from the lock."""
        expires_at = aware(stage.expires_at, "expires_at")
        now = self.now()
        with self._write() as conn:
            lock = _get_lock(conn, namespace, path, for_update=True)
            if not write_audit(
                conn,
                namespace,
                path,
                at=now,
                action="stage.published",
                actor=actor,
                reason=f"stage {stage.index + 1} {stage.name!r} published",  # 1-based, as status counts
                version=lock.version if lock else None,
                workflow_id=lock.workflow_id if lock else None,
                event_key=event_key,
                details={
                    "run_id": run_id,
                    "index": stage.index,
                    "name": stage.name,
                    "channel": stage.channel,
                    "percentile": stage.percentile,
                    "labels": dict(stage.labels),
                    "expires_at": expires_at.isoformat(),
                },
            ):
                return False
            lock = _require_holder(lock, namespace, path, run_id)
            rollout = _get_rollout(conn, namespace, path, for_update=True)
            if rollout is None or rollout.run_id != run_id:
                require_version(conn, namespace, path, lock.version)
                rollout = _replace_rollout(
                    conn,
                    namespace,
                    path,
                    workflow_id=lock.workflow_id,
                    run_id=run_id,
                    version=lock.version,
                    at=now,
                )
            upsert(
                conn,
                STAGE,
                {
                    "namespace": namespace,
                    "path": path,
                    "stage_index": stage.index,
                    "run_id": run_id,
                    "name": stage.name,
                    "channel": stage.channel,
                    "percentile": None if stage.percentile is None else float(stage.percentile),
                    "labels": canonical_json(dict(stage.labels)),
                    "expires_at": expires_at,
                    "published_at": now,
                    "bucket_key": stage.bucket_key,
                },
                keys=("namespace", "path", "stage_index"),
            )
            conn.execute(
                update(ROLLOUT)
                .where(*config_is(ROLLOUT, namespace, path))
                .values(
                    stage_index=max(rollout.stage_index, stage.index),
                    state="stage.published",
                    updated_at=now,
                )
            )
            bump_revision(conn)
        return True

    def renew_leases(
        self, namespace: str, path: str, *, run_id: str, leases: list[StageLease]
    ) -> int:
        """Set expires_at of this run's published stages; returns rows updated. Not audited
        (renewals are routine); bumps revision."""
        renewed = [(lease.index, aware(lease.expires_at, "expires_at")) for lease in leases]
        if not renewed:
            return 0
        count = 0
        with self._write() as conn:
            for index, expires_at in renewed:
                count += conn.execute(
                    update(STAGE)
                    .where(
                        *config_is(STAGE, namespace, path),
                        STAGE.c.stage_index == index,
                        STAGE.c.run_id == run_id,
                    )
                    .values(expires_at=expires_at)
                ).rowcount
            if count:
                bump_revision(conn)
        return count

    def promote(
        self,
        namespace: str,
        path: str,
        *,
        run_id: str,
        workflow_id: str,
        version: str,
        actor: str,
        reason: str,
        event_key: str,
    ) -> bool:
        """In one transaction: stable := version, clear this run's rollout and stages, release the
        lock, audit `rollout.promoted`. Idempotent by event_key.

        Requires run_id to hold the lock (LockHeldError otherwise, LockLostError when free; nothing
        written), so a stale run can never overwrite stable after a newer run took over."""
        now = self.now()
        with self._write() as conn:
            lock = _get_lock(conn, namespace, path, for_update=True)
            if not write_audit(
                conn,
                namespace,
                path,
                at=now,
                action="rollout.promoted",
                actor=actor,
                reason=reason,
                version=version,
                workflow_id=workflow_id,
                event_key=event_key,
                details={"run_id": run_id},
            ):
                return False
            _require_holder(lock, namespace, path, run_id)
            require_version(conn, namespace, path, version)
            make_stable(
                conn,
                namespace,
                path,
                version,
                at=now,
                actor=actor,
                reason=reason,
                workflow_id=workflow_id,
            )
            # The lock holder owns the config: any rollout row here is this run's or a dead run's.
            _clear_rollout(conn, namespace, path)
            conn.execute(
                delete(LOCK).where(*config_is(LOCK, namespace, path), LOCK.c.run_id == run_id)
            )
            bump_revision(conn)
        return True

    def revert(
        self,
        namespace: str,
        path: str,
        *,
        run_id: str,
        workflow_id: str,
        actor: str,
        reason: str,
        outcome: str,
        event_key: str,
        audit_always: bool = False,
    ) -> bool:
        """In one transaction: clear this run's rollout and stages (clients fall back to stable),
        release the lock if this run holds it, audit `rollout.<outcome>` with the reason.
        Safe from every state, including when nothing was published. Idempotent by event_key.

        True when something was cleared or released; False, writing nothing, when this run has
        neither the lock nor the rollout (already reverted, or it never got the lock), except
        the audit row with `audit_always` (a failed prepare, which may have taken nothing)."""
        now = self.now()
        with self._write() as conn:
            lock = _get_lock(conn, namespace, path, for_update=True)
            rollout = _get_rollout(conn, namespace, path, for_update=True)
            holds_lock = lock is not None and lock.run_id == run_id
            clears = rollout is not None and (rollout.run_id == run_id or holds_lock)
            if not (holds_lock or clears):
                if audit_always:
                    write_audit(
                        conn,
                        namespace,
                        path,
                        at=now,
                        action=f"rollout.{outcome}",
                        actor=actor,
                        reason=reason,
                        workflow_id=workflow_id,
                        event_key=event_key,
                        details={"run_id": run_id, "stage_index": None},
                    )
                return False
            version = (
                rollout.version
                if rollout is not None and clears
                else (lock.version if lock else None)
            )
            if not write_audit(
                conn,
                namespace,
                path,
                at=now,
                action=f"rollout.{outcome}",
                actor=actor,
                reason=reason,
                version=version,
                workflow_id=workflow_id,
                event_key=event_key,
                details={
                    "run_id": run_id,
                    "stage_index": rollout.stage_index if rollout and clears else None,
                },
            ):
                return False
            if clears:
                _clear_rollout(conn, namespace, path)
            if holds_lock:
                conn.execute(
                    delete(LOCK).where(*config_is(LOCK, namespace, path), LOCK.c.run_id == run_id)
                )
            bump_revision(conn)
        return True


def _lock_record(values: Mapping[Any, Any]) -> LockRecord:
    # Any keys: a dict of values, or a row's mapping (SQLAlchemy types its keys wider than str).
    return LockRecord(
        namespace=values["namespace"],
        path=values["path"],
        workflow_id=values["workflow_id"],
        run_id=values["run_id"],
        version=values["version"],
        acquired_at=values["acquired_at"],
    )


def _get_lock(
    conn: Connection, namespace: str, path: str, *, for_update: bool = False
) -> LockRecord | None:
    statement = select(LOCK).where(*config_is(LOCK, namespace, path))
    if for_update:
        statement = statement.with_for_update()
    row = conn.execute(statement).first()
    return None if row is None else _lock_record(row._mapping)


def _require_holder(lock: LockRecord | None, namespace: str, path: str, run_id: str) -> LockRecord:
    if lock is None:
        raise LockLostError(namespace, path, run_id)
    if lock.run_id != run_id:
        raise LockHeldError(lock)
    return lock


def _rollout_record(values: Mapping[Any, Any]) -> RolloutRecord:
    return RolloutRecord(
        namespace=values["namespace"],
        path=values["path"],
        workflow_id=values["workflow_id"],
        run_id=values["run_id"],
        version=values["version"],
        state=values["state"],
        stage_index=values["stage_index"],
        started_at=values["started_at"],
        updated_at=values["updated_at"],
    )


def _get_rollout(
    conn: Connection,
    namespace: str,
    path: str,
    *,
    for_update: bool = False,
) -> RolloutRecord | None:
    statement = select(ROLLOUT).where(*config_is(ROLLOUT, namespace, path))
    if for_update:
        statement = statement.with_for_update()
    row = conn.execute(statement).first()
    return None if row is None else _rollout_record(row._mapping)


def _clear_rollout(conn: Connection, namespace: str, path: str) -> None:
    conn.execute(delete(STAGE).where(*config_is(STAGE, namespace, path)))
    conn.execute(delete(ROLLOUT).where(*config_is(ROLLOUT, namespace, path)))


def _replace_rollout(
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
    _clear_rollout(conn, namespace, path)
    conn.execute(insert(ROLLOUT).values(**values))
    return _rollout_record(values)
