"""A run's steps: publish a stage, renew its leases, promote, revert. Each writes every config of
the run (`run_configs`: the config it was started for, and a changeset's others) in ONE
transaction; a single config's rollout is a changeset of one, keyed as it always was."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, update

from tempoconf.canonical import canonical_json
from tempoconf.resolution import PublishedStage
from tempoconf.store._base import (
    ROLLOUT,
    STAGE,
    StoreBase,
    aware,
    config_is,
    make_stable,
    require_version,
    upsert,
)
from tempoconf.store.engine import bump_revision
from tempoconf.store.records import StageLease
from tempoconf.store.rollout_rows import (
    ConfigWrite,
    clear_rollout,
    get_lock,
    get_rollout,
    keyed,
    release_lock,
    replace_rollout,
    require_holder,
    run_configs,
)

__all__ = ["StepsMixin"]


def _config_steps(
    conn: Connection,
    namespace: str,
    path: str,
    *,
    run_id: str,
    actor: str,
    event_key: str,
    at: datetime,
) -> list[ConfigWrite]:
    """The run's configs (`run_configs`), each with its key of the step (`keyed`)."""
    return [
        ConfigWrite(conn, config.namespace, config.path, config.version, run_id, actor, key, at)
        for config, key in keyed(run_configs(conn, namespace, path, run_id), event_key)
    ]


class StepsMixin(StoreBase):
    """The steps of a run, over each config it changes (a part of Store).

    `namespace` and `path` name the config the run was started for; a changeset's run also
    writes every other config whose lock it holds. Idempotent by event key: a config's row of a
    step is keyed `event_key` (a single config) or `event_key@namespace/path` (a changeset's).
    Each returns True when any config was written (a list, not a generator, under any(): every
    config is written)."""

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
        """Upsert one stage of the run's rollout of each config (its lease is stage.expires_at),
        set the rollout's stage_index and state `stage.published`, audit `stage.published`, bump
        revision.

        Raises LockHeldError when the run no longer holds a config's lock (LockLostError, a
        LockHeldError, when nobody holds it): nothing is written. If begin_rollout was skipped,
        the rollout row is created here from the lock."""
        expires_at = aware(stage.expires_at, "expires_at")
        now = self.now()
        with self._write() as conn:
            steps = _config_steps(
                conn, namespace, path, run_id=run_id, actor=actor, event_key=event_key, at=now
            )
            return any([_publish(step, stage, expires_at) for step in steps])

    def renew_leases(
        self, namespace: str, path: str, *, run_id: str, leases: list[StageLease]
    ) -> int:
        """Set expires_at of the run's published stages of each config; returns rows updated. Not
        audited (renewals are routine); bumps revision once per config renewed."""
        renewed = [(lease.index, aware(lease.expires_at, "expires_at")) for lease in leases]
        if not renewed:
            return 0
        count = 0
        with self._write() as conn:
            for config in run_configs(conn, namespace, path, run_id):
                renewed_here = 0
                for index, expires_at in renewed:
                    renewed_here += conn.execute(
                        update(STAGE)
                        .where(
                            *config_is(STAGE, config.namespace, config.path),
                            STAGE.c.stage_index == index,
                            STAGE.c.run_id == run_id,
                        )
                        .values(expires_at=expires_at)
                    ).rowcount
                if renewed_here:
                    bump_revision(conn, [(config.namespace, config.path)])
                count += renewed_here
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
        """In one transaction, for each config: stable := its version (the first config's is
        `version`, each other's the one its lock was taken for), clear the run's rollout and
        stages, release the lock, audit `rollout.promoted`.

        Requires the run to hold each lock (LockHeldError otherwise, LockLostError when free;
        nothing written), so a stale run can never overwrite stable after a newer run took over."""
        now = self.now()
        with self._write() as conn:
            first, *others = _config_steps(
                conn, namespace, path, run_id=run_id, actor=actor, event_key=event_key, at=now
            )
            return any(
                [
                    _promote(first, workflow_id, version, reason),
                    *(
                        _promote(step, workflow_id, step.locked_version or version, reason)
                        for step in others
                    ),
                ]
            )

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
        """In one transaction, for each config: clear the run's rollout and stages (clients fall
        back to stable), release the lock if the run holds it, audit `rollout.<outcome>` with the
        reason. Safe from every state, including when nothing was published.

        True when something was cleared or released; False, writing nothing, when the run has
        neither the lock nor the rollout (already reverted, or it never got the lock), except
        the audit row with `audit_always` (a failed prepare, which may have taken nothing)."""
        now = self.now()
        with self._write() as conn:
            steps = _config_steps(
                conn, namespace, path, run_id=run_id, actor=actor, event_key=event_key, at=now
            )
            return any(
                [_revert(step, workflow_id, reason, outcome, audit_always) for step in steps]
            )


def _publish(step: ConfigWrite, stage: PublishedStage, expires_at: datetime) -> bool:
    conn, namespace, path = step.conn, step.namespace, step.path
    lock = get_lock(conn, namespace, path, for_update=True)
    if not step.audit(
        "stage.published",
        reason=f"stage {stage.index + 1} {stage.name!r} published",  # 1-based, as status counts
        version=lock.version if lock else None,
        workflow_id=lock.workflow_id if lock else None,
        details={
            "run_id": step.run_id,
            "index": stage.index,
            "name": stage.name,
            "channel": stage.channel,
            "percentile": stage.percentile,
            "labels": dict(stage.labels),
            "expires_at": expires_at.isoformat(),
        },
    ):
        return False
    lock = require_holder(lock, namespace, path, step.run_id)
    rollout = get_rollout(conn, namespace, path, for_update=True)
    if rollout is None or rollout.run_id != step.run_id:
        require_version(conn, namespace, path, lock.version)
        rollout = replace_rollout(
            conn,
            namespace,
            path,
            workflow_id=lock.workflow_id,
            run_id=step.run_id,
            version=lock.version,
            at=step.at,
        )
    upsert(
        conn,
        STAGE,
        {
            "namespace": namespace,
            "path": path,
            "stage_index": stage.index,
            "run_id": step.run_id,
            "name": stage.name,
            "channel": stage.channel,
            "percentile": None if stage.percentile is None else float(stage.percentile),
            "labels": canonical_json(dict(stage.labels)),
            "expires_at": expires_at,
            "published_at": step.at,
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
            updated_at=step.at,
        )
    )
    bump_revision(conn, [(namespace, path)])
    return True


def _promote(step: ConfigWrite, workflow_id: str, version: str, reason: str) -> bool:
    conn, namespace, path = step.conn, step.namespace, step.path
    lock = get_lock(conn, namespace, path, for_update=True)
    if not step.audit(
        "rollout.promoted",
        reason=reason,
        version=version,
        workflow_id=workflow_id,
        details={"run_id": step.run_id},
    ):
        return False
    require_holder(lock, namespace, path, step.run_id)
    make_stable(
        conn,
        namespace,
        path,
        version,
        at=step.at,
        actor=step.actor,
        reason=reason,
        workflow_id=workflow_id,
    )
    # The lock holder owns the config: any rollout row here is this run's or a dead run's.
    clear_rollout(conn, namespace, path)
    release_lock(conn, namespace, path, step.run_id)
    bump_revision(conn, [(namespace, path)])
    return True


def _revert(
    step: ConfigWrite, workflow_id: str, reason: str, outcome: str, audit_always: bool
) -> bool:
    conn, namespace, path, run_id = step.conn, step.namespace, step.path, step.run_id
    lock = get_lock(conn, namespace, path, for_update=True)
    rollout = get_rollout(conn, namespace, path, for_update=True)
    holds_lock = lock is not None and lock.run_id == run_id
    clears = rollout is not None and (rollout.run_id == run_id or holds_lock)
    action = f"rollout.{outcome}"
    if not (holds_lock or clears):
        if audit_always:
            step.audit(
                action,
                reason=reason,
                version=None,
                workflow_id=workflow_id,
                details={"run_id": run_id, "stage_index": None},
            )
        return False
    if not step.audit(
        action,
        reason=reason,
        version=(
            rollout.version if rollout is not None and clears else (lock.version if lock else None)
        ),
        workflow_id=workflow_id,
        details={
            "run_id": run_id,
            "stage_index": rollout.stage_index if rollout and clears else None,
        },
    ):
        return False
    if clears:
        clear_rollout(conn, namespace, path)
    if holds_lock:
        release_lock(conn, namespace, path, run_id)
    bump_revision(conn, [(namespace, path)])
    return True
