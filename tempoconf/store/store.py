"""Data access for tempoconf (sqlmodel): schemas, versions, stable, rollouts, locks, audit log.

INTERFACE CONTRACT (implementations must keep it):
- Every method opens its own short transaction; nothing is half-written (one transaction per call).
- Every write an activity makes is idempotent: methods that take `event_key` insert an audit row
  with that unique key in the same transaction, and do nothing at all (returning False) when the
  key exists already, so an activity retried after a crash writes nothing twice.
- Every change that alters what a client resolves to bumps `revision()` in the same transaction.
- Times are timezone-aware UTC datetimes in and out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tempoconf.resolution import ConfigSnapshot, PublishedStage, VersionRecord
from tempoconf.store.records import AuditEntry, LockRecord, RolloutRecord, StageLease, VersionInfo

__all__ = ["Store", "LockHeldError"]


class LockHeldError(RuntimeError):
    """The config's rollout lock is held by another workflow run."""

    def __init__(self, holder: LockRecord) -> None:
        self.holder = holder
        super().__init__(
            f"config {holder.namespace}/{holder.path} already has a running rollout: workflow "
            f"{holder.workflow_id!r} (run {holder.run_id}) of version {holder.version}"
        )


class Store:
    """The one store of a deployment. `url` is an SQLAlchemy URL (sqlite:///... or postgresql+psycopg://...)."""

    def __init__(self, url: str) -> None:
        """Connect, and bring the schema to the latest migration (safe from several processes)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- change feed -------------------------------------------------------------------------
    def revision(self) -> int:
        """A counter that grows with every change visible to clients (cheap: one row)."""
        raise NotImplementedError

    # -- schemas -----------------------------------------------------------------------------
    def set_schema(self, namespace: str, path: str, schema: Any, *, actor: str, reason: str = "") -> None:
        """Register (or replace) the JSON Schema of a config; audited as `schema.set`."""
        raise NotImplementedError

    def get_schema(self, namespace: str, path: str) -> Any | None:
        raise NotImplementedError

    # -- versions ----------------------------------------------------------------------------
    def put_version(self, namespace: str, path: str, record: VersionRecord) -> bool:
        """Store an immutable version; True if new, False if it existed (never overwritten)."""
        raise NotImplementedError

    def get_version(self, namespace: str, path: str, version: str) -> VersionRecord | None:
        raise NotImplementedError

    def list_versions(self, namespace: str, path: str) -> list[VersionInfo]:
        """Newest first, each with the times it became stable."""
        raise NotImplementedError

    # -- stable ------------------------------------------------------------------------------
    def get_stable(self, namespace: str, path: str) -> VersionRecord | None:
        raise NotImplementedError

    def set_stable(
        self, namespace: str, path: str, version: str, *, actor: str, reason: str, event_key: str,
        workflow_id: str | None = None,
    ) -> bool:
        """Make a stored version stable (history + audit `stable.set`). Idempotent by event_key."""
        raise NotImplementedError

    # -- lock --------------------------------------------------------------------------------
    def acquire_lock(
        self, namespace: str, path: str, *, workflow_id: str, run_id: str, version: str,
        replace_run_id: str | None = None,
    ) -> LockRecord:
        """Take the per-config lock for this run.

        Succeeds when the lock is free or already held by `run_id` (idempotent). When held by
        `replace_run_id` (a run the caller verified is no longer running), takes it over atomically.
        Otherwise raises LockHeldError naming the holder.
        """
        raise NotImplementedError

    def get_lock(self, namespace: str, path: str) -> LockRecord | None:
        raise NotImplementedError

    # -- rollout -----------------------------------------------------------------------------
    def begin_rollout(
        self, namespace: str, path: str, *, workflow_id: str, run_id: str, version: str, actor: str,
        reason: str, event_key: str,
    ) -> bool:
        """Create the active-rollout row for this run (state `started`), audited `rollout.started`.
        Requires the lock to be held by run_id (raises LockHeldError otherwise)."""
        raise NotImplementedError

    def get_rollout(self, namespace: str, path: str) -> RolloutRecord | None:
        raise NotImplementedError

    def publish_stage(
        self, namespace: str, path: str, *, run_id: str, stage: PublishedStage, actor: str, event_key: str,
    ) -> bool:
        """Upsert one stage of this run's rollout (its lease is stage.expires_at), set the rollout's
        stage_index and state `stage.published`, audit `stage.published`, bump revision.
        Raises LockHeldError when run_id no longer holds the lock (nothing is written)."""
        raise NotImplementedError

    def renew_leases(self, namespace: str, path: str, *, run_id: str, leases: list[StageLease]) -> int:
        """Set expires_at of this run's published stages; returns rows updated. Not audited
        (renewals are routine); bumps revision."""
        raise NotImplementedError

    def set_rollout_state(
        self, namespace: str, path: str, *, run_id: str, state: str, actor: str, reason: str,
        event_key: str, details: dict[str, Any] | None = None,
    ) -> bool:
        """Record a transition of this run's rollout (audit action `rollout.<state>`)."""
        raise NotImplementedError

    def promote(
        self, namespace: str, path: str, *, run_id: str, workflow_id: str, version: str, actor: str,
        reason: str, event_key: str,
    ) -> bool:
        """In one transaction: stable := version, clear this run's rollout and stages, release the
        lock, audit `rollout.promoted`. Idempotent by event_key."""
        raise NotImplementedError

    def revert(
        self, namespace: str, path: str, *, run_id: str, workflow_id: str, actor: str, reason: str,
        outcome: str, event_key: str,
    ) -> bool:
        """In one transaction: clear this run's rollout and stages (clients fall back to stable),
        release the lock if this run holds it, audit `rollout.<outcome>` with the reason.
        Safe from every state, including when nothing was published. Idempotent by event_key."""
        raise NotImplementedError

    # -- audit -------------------------------------------------------------------------------
    def record_event(
        self, namespace: str, path: str, *, action: str, actor: str, reason: str = "",
        version: str | None = None, workflow_id: str | None = None, event_key: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> bool:
        raise NotImplementedError

    def history(self, namespace: str, path: str, *, limit: int = 100) -> list[AuditEntry]:
        """Audit log of a config, oldest first (the last `limit` entries)."""
        raise NotImplementedError

    # -- distribution --------------------------------------------------------------------------
    def load_snapshot(self, namespace: str, path: str) -> ConfigSnapshot | None:
        """A config as clients see it (stable, staged version, published stages); None if unknown.
        A config is known once it has a version."""
        raise NotImplementedError

    def load_snapshots(self) -> dict[tuple[str, str], ConfigSnapshot]:
        """Every known config, keyed by (namespace, path); a handful of queries, not one per config."""
        raise NotImplementedError

    def now(self) -> datetime:
        """The current UTC time (aware)."""
        raise NotImplementedError
