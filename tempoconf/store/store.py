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

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    Table,
    and_,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url

from tempoconf.canonical import canonical_json
from tempoconf.resolution import ConfigSnapshot, PublishedStage, VersionRecord
from tempoconf.store.engine import (
    CHANGE_CHANNEL,
    MIGRATIONS,
    WRITE_OPTION,
    bump_revision,
    make_engine,
    read_revision,
    upgrade,
)
from tempoconf.store.errors import LockError, LockHeldError, LockLostError, UnknownVersionError
from tempoconf.store.records import (
    AuditEntry,
    LockRecord,
    ReportStats,
    ReportTotals,
    RolloutRecord,
    SeenClient,
    StageLease,
    VersionInfo,
)
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

__all__ = [
    "CHANGE_CHANNEL",
    "Store",
    "LockError",
    "LockHeldError",
    "LockLostError",
    "UnknownVersionError",
]

_SCHEMA = table(ConfigSchema)
_VERSION = table(ConfigVersion)
_STABLE = table(Stable)
_STABLE_HISTORY = table(StableHistory)
_ROLLOUT = table(Rollout)
_STAGE = table(RolloutStage)
_LOCK = table(ConfigLock)
_AUDIT = table(AuditLog)
_REPORT = table(ClientReport)
_SEEN = table(ClientSeen)

_MIGRATIONS = MIGRATIONS  # the alembic folder, under its old name (tests migrate with it)


class Store:
    """The one store of a deployment. `url` is an SQLAlchemy URL (sqlite:///... or postgresql+psycopg://...)."""

    def __init__(self, url: str) -> None:
        """Connect, and bring the schema to the latest migration (safe from several processes)."""
        self.url = url
        self._engine = make_engine(url)
        try:
            upgrade(self._engine)
        except BaseException:
            self._engine.dispose()
            raise

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self._engine.dialect.name

    # -- change feed -------------------------------------------------------------------------
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

    # -- schemas -----------------------------------------------------------------------------
    def set_schema(self, namespace: str, path: str, schema: Any, *, actor: str, reason: str = "") -> None:
        """Register (or replace) the JSON Schema of a config; audited as `schema.set`."""
        document = canonical_json(schema)
        now = self.now()
        with self._write() as conn:
            _upsert(
                conn,
                _SCHEMA,
                {"namespace": namespace, "path": path, "document": document, "updated_at": now,
                 "updated_by": actor},
                keys=("namespace", "path"),
            )
            _audit(conn, namespace, path, at=now, action="schema.set", actor=actor, reason=reason)

    def get_schema(self, namespace: str, path: str) -> Any | None:
        with self._read() as conn:
            document = conn.execute(
                select(_SCHEMA.c.document).where(*_config(_SCHEMA, namespace, path))
            ).scalar_one_or_none()
        return None if document is None else json.loads(document)

    # -- versions ----------------------------------------------------------------------------
    def put_version(self, namespace: str, path: str, record: VersionRecord) -> bool:
        """Store an immutable version; True if new, False if it existed (never overwritten)."""
        created_at = _aware(record.created_at, "created_at") if record.created_at else self.now()
        values = {
            "namespace": namespace, "path": path, "version": record.version,
            "value": canonical_json(record.value), "author": record.author, "commit": record.commit,
            "message": record.message, "created_at": created_at,
        }
        with self._write() as conn:
            inserted = conn.execute(
                _insert(conn, _VERSION).values(**values).on_conflict_do_nothing()
                .returning(_VERSION.c.version)
            ).first() is not None
            if inserted:
                # A config is known (listed by load_snapshots) from its first version on.
                bump_revision(conn)
        return inserted

    def get_version(self, namespace: str, path: str, version: str) -> VersionRecord | None:
        with self._read() as conn:
            return _get_version(conn, namespace, path, version)

    def list_versions(self, namespace: str, path: str) -> list[VersionInfo]:
        """Newest first, each with the times it became stable."""
        with self._read() as conn:
            rows = conn.execute(
                select(_VERSION)
                .where(*_config(_VERSION, namespace, path))
                .order_by(_VERSION.c.created_at.desc(), _VERSION.c.version)
            ).all()
            history = conn.execute(
                select(_STABLE_HISTORY.c.version, _STABLE_HISTORY.c.at)
                .where(*_config(_STABLE_HISTORY, namespace, path))
                .order_by(_STABLE_HISTORY.c.id)
            ).all()
            stable = conn.execute(
                select(_STABLE.c.version).where(*_config(_STABLE, namespace, path))
            ).scalar_one_or_none()
        since: dict[str, list[datetime]] = {}
        for version, at in history:
            since.setdefault(version, []).append(at)
        return [
            VersionInfo(
                version=row.version, author=row.author, commit=row.commit, message=row.message,
                created_at=row.created_at, stable_since=since.get(row.version, []),
                is_stable=row.version == stable,
            )
            for row in rows
        ]

    # -- stable ------------------------------------------------------------------------------
    def get_stable(self, namespace: str, path: str) -> VersionRecord | None:
        with self._read() as conn:
            row = conn.execute(
                select(_VERSION)
                .join(_STABLE, _same_version(_STABLE))
                .where(*_config(_STABLE, namespace, path))
            ).first()
        return None if row is None else _version_record(row)

    def set_stable(
        self, namespace: str, path: str, version: str, *, actor: str, reason: str, event_key: str,
        workflow_id: str | None = None,
    ) -> bool:
        """Make a stored version stable (history + audit `stable.set`). Idempotent by event_key.

        Raises UnknownVersionError (nothing written) when the version was never stored."""
        now = self.now()
        with self._write() as conn:
            if not _audit(
                conn, namespace, path, at=now, action="stable.set", actor=actor, reason=reason,
                version=version, workflow_id=workflow_id, event_key=event_key,
            ):
                return False
            _require_version(conn, namespace, path, version)
            _make_stable(conn, namespace, path, version, at=now, actor=actor, reason=reason,
                         workflow_id=workflow_id)
            bump_revision(conn)
        return True

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
        now = self.now()
        mine = {"namespace": namespace, "path": path, "workflow_id": workflow_id, "run_id": run_id,
                "version": version, "acquired_at": now}
        with self._write() as conn:
            taken_free = conn.execute(
                _insert(conn, _LOCK).values(**mine).on_conflict_do_nothing().returning(_LOCK.c.run_id)
            ).first()
            if taken_free is not None:
                return _lock_record(mine)
            holder = _get_lock(conn, namespace, path, for_update=True)
            if holder is None:  # released between the two statements: only PostgreSQL gets here
                conn.execute(insert(_LOCK).values(**mine))
                return _lock_record(mine)
            if holder.run_id == run_id:
                return holder
            if replace_run_id is None or holder.run_id != replace_run_id:
                raise LockHeldError(holder)
            # Compare-and-set (the row is also locked FOR UPDATE above): not audited here, the
            # caller knows why the old run is dead and records `lock.reclaimed` with its own key.
            taken = conn.execute(
                update(_LOCK)
                .where(*_config(_LOCK, namespace, path), _LOCK.c.run_id == replace_run_id)
                .values(workflow_id=workflow_id, run_id=run_id, version=version, acquired_at=now)
            ).rowcount
            if not taken:
                current = _get_lock(conn, namespace, path)
                if current is not None:
                    raise LockHeldError(current)
                conn.execute(insert(_LOCK).values(**mine))
            return _lock_record(mine)

    def get_lock(self, namespace: str, path: str) -> LockRecord | None:
        with self._read() as conn:
            return _get_lock(conn, namespace, path)

    # -- rollout -----------------------------------------------------------------------------
    def begin_rollout(
        self, namespace: str, path: str, *, workflow_id: str, run_id: str, version: str, actor: str,
        reason: str, event_key: str, details: Mapping[str, Any] | None = None,
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
            if not _audit(
                conn, namespace, path, at=now, action="rollout.started", actor=actor, reason=reason,
                version=version, workflow_id=workflow_id, event_key=event_key,
                details={**(details or {}), "run_id": run_id},
            ):
                return False
            _require_holder(lock, namespace, path, run_id)
            _require_version(conn, namespace, path, version)
            _replace_rollout(conn, namespace, path, workflow_id=workflow_id, run_id=run_id,
                             version=version, at=now)
            bump_revision(conn)
        return True

    def get_rollout(self, namespace: str, path: str) -> RolloutRecord | None:
        with self._read() as conn:
            return _get_rollout(conn, namespace, path)

    def publish_stage(
        self, namespace: str, path: str, *, run_id: str, stage: PublishedStage, actor: str, event_key: str,
    ) -> bool:
        """Upsert one stage of this run's rollout (its lease is stage.expires_at), set the rollout's
        stage_index and state `stage.published`, audit `stage.published`, bump revision.
        Raises LockHeldError when run_id no longer holds the lock (nothing is written).

        (LockLostError, a LockHeldError, when nobody holds it.) If begin_rollout was skipped, the
        rollout row is created here from the lock."""
        expires_at = _aware(stage.expires_at, "expires_at")
        now = self.now()
        with self._write() as conn:
            lock = _get_lock(conn, namespace, path, for_update=True)
            if not _audit(
                conn, namespace, path, at=now, action="stage.published", actor=actor,
                reason=f"stage {stage.index + 1} {stage.name!r} published",  # 1-based, as status counts
                version=lock.version if lock else None,
                workflow_id=lock.workflow_id if lock else None, event_key=event_key,
                details={"run_id": run_id, "index": stage.index, "name": stage.name,
                         "channel": stage.channel, "percentile": stage.percentile,
                         "labels": dict(stage.labels), "expires_at": expires_at.isoformat()},
            ):
                return False
            lock = _require_holder(lock, namespace, path, run_id)
            rollout = _get_rollout(conn, namespace, path, for_update=True)
            if rollout is None or rollout.run_id != run_id:
                _require_version(conn, namespace, path, lock.version)
                rollout = _replace_rollout(conn, namespace, path, workflow_id=lock.workflow_id,
                                           run_id=run_id, version=lock.version, at=now)
            _upsert(
                conn,
                _STAGE,
                {"namespace": namespace, "path": path, "stage_index": stage.index, "run_id": run_id,
                 "name": stage.name, "channel": stage.channel,
                 "percentile": None if stage.percentile is None else float(stage.percentile),
                 "labels": canonical_json(dict(stage.labels)), "expires_at": expires_at,
                 "published_at": now},
                keys=("namespace", "path", "stage_index"),
            )
            conn.execute(
                update(_ROLLOUT)
                .where(*_config(_ROLLOUT, namespace, path))
                .values(stage_index=max(rollout.stage_index, stage.index), state="stage.published",
                        updated_at=now)
            )
            bump_revision(conn)
        return True

    def renew_leases(self, namespace: str, path: str, *, run_id: str, leases: list[StageLease]) -> int:
        """Set expires_at of this run's published stages; returns rows updated. Not audited
        (renewals are routine); bumps revision."""
        renewed = [(lease.index, _aware(lease.expires_at, "expires_at")) for lease in leases]
        if not renewed:
            return 0
        count = 0
        with self._write() as conn:
            for index, expires_at in renewed:
                count += conn.execute(
                    update(_STAGE)
                    .where(*_config(_STAGE, namespace, path), _STAGE.c.stage_index == index,
                           _STAGE.c.run_id == run_id)
                    .values(expires_at=expires_at)
                ).rowcount
            if count:
                bump_revision(conn)
        return count

    def set_rollout_state(
        self, namespace: str, path: str, *, run_id: str, state: str, actor: str, reason: str,
        event_key: str, details: dict[str, Any] | None = None,
    ) -> bool:
        """Record a transition of this run's rollout (audit action `rollout.<state>`).

        False (nothing written) when the config's rollout is not this run's. Not a client-visible
        change: revision is not bumped."""
        now = self.now()
        with self._write() as conn:
            rollout = _get_rollout(conn, namespace, path, for_update=True)
            if rollout is None or rollout.run_id != run_id:
                return False
            if not _audit(
                conn, namespace, path, at=now, action=f"rollout.{state}", actor=actor, reason=reason,
                version=rollout.version, workflow_id=rollout.workflow_id, event_key=event_key,
                details=details,
            ):
                return False
            conn.execute(
                update(_ROLLOUT)
                .where(*_config(_ROLLOUT, namespace, path), _ROLLOUT.c.run_id == run_id)
                .values(state=state, updated_at=now)
            )
        return True

    def promote(
        self, namespace: str, path: str, *, run_id: str, workflow_id: str, version: str, actor: str,
        reason: str, event_key: str,
    ) -> bool:
        """In one transaction: stable := version, clear this run's rollout and stages, release the
        lock, audit `rollout.promoted`. Idempotent by event_key.

        Requires run_id to hold the lock (LockHeldError otherwise, LockLostError when free; nothing
        written), so a stale run can never overwrite stable after a newer run took over."""
        now = self.now()
        with self._write() as conn:
            lock = _get_lock(conn, namespace, path, for_update=True)
            if not _audit(
                conn, namespace, path, at=now, action="rollout.promoted", actor=actor, reason=reason,
                version=version, workflow_id=workflow_id, event_key=event_key,
                details={"run_id": run_id},
            ):
                return False
            _require_holder(lock, namespace, path, run_id)
            _require_version(conn, namespace, path, version)
            _make_stable(conn, namespace, path, version, at=now, actor=actor, reason=reason,
                         workflow_id=workflow_id)
            # The lock holder owns the config: any rollout row here is this run's or a dead run's.
            _clear_rollout(conn, namespace, path)
            conn.execute(delete(_LOCK).where(*_config(_LOCK, namespace, path), _LOCK.c.run_id == run_id))
            bump_revision(conn)
        return True

    def revert(
        self, namespace: str, path: str, *, run_id: str, workflow_id: str, actor: str, reason: str,
        outcome: str, event_key: str,
    ) -> bool:
        """In one transaction: clear this run's rollout and stages (clients fall back to stable),
        release the lock if this run holds it, audit `rollout.<outcome>` with the reason.
        Safe from every state, including when nothing was published. Idempotent by event_key.

        True when something was cleared or released; False, writing nothing, when this run has
        neither the lock nor the rollout (already reverted, or it never got the lock)."""
        now = self.now()
        with self._write() as conn:
            lock = _get_lock(conn, namespace, path, for_update=True)
            rollout = _get_rollout(conn, namespace, path, for_update=True)
            holds_lock = lock is not None and lock.run_id == run_id
            clears = rollout is not None and (rollout.run_id == run_id or holds_lock)
            if not (holds_lock or clears):
                return False
            version = rollout.version if rollout is not None and clears else (lock.version if lock else None)
            if not _audit(
                conn, namespace, path, at=now, action=f"rollout.{outcome}", actor=actor, reason=reason,
                version=version, workflow_id=workflow_id, event_key=event_key,
                details={"run_id": run_id, "stage_index": rollout.stage_index if rollout and clears else None},
            ):
                return False
            if clears:
                _clear_rollout(conn, namespace, path)
            if holds_lock:
                conn.execute(delete(_LOCK).where(*_config(_LOCK, namespace, path), _LOCK.c.run_id == run_id))
            bump_revision(conn)
        return True

    # -- audit -------------------------------------------------------------------------------
    def record_event(
        self, namespace: str, path: str, *, action: str, actor: str, reason: str = "",
        version: str | None = None, workflow_id: str | None = None, event_key: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> bool:
        """Append to the audit log; False (nothing written) when event_key was recorded before."""
        with self._write() as conn:
            return _audit(
                conn, namespace, path, at=self.now(), action=action, actor=actor, reason=reason,
                version=version, workflow_id=workflow_id, event_key=event_key, details=details,
            )

    def history(self, namespace: str, path: str, *, limit: int = 100) -> list[AuditEntry]:
        """Audit log of a config, oldest first (the last `limit` entries)."""
        with self._read() as conn:
            rows = conn.execute(
                select(_AUDIT)
                .where(*_config(_AUDIT, namespace, path))
                .order_by(_AUDIT.c.id.desc())
                .limit(max(limit, 0))
            ).all()
        return [
            AuditEntry(
                id=row.id, namespace=row.namespace, path=row.path, at=row.at, actor=row.actor,
                action=row.action, reason=row.reason, version=row.version,
                workflow_id=row.workflow_id, details=json.loads(row.details),
            )
            for row in reversed(rows)
        ]

    # -- client health reports --------------------------------------------------------------------
    def add_report(
        self, namespace: str, path: str, *, client: str, version: str, ok: int, failed: int,
        error: str | None = None, received_at: datetime | None = None,
        channel: str | None = None, labels: Mapping[str, str] | None = None,
    ) -> None:
        """Store one client's health report (received_at defaults to now). `channel`/`labels`:
        the identity the client polls with; a report naming neither has no identity of its own
        (see report_totals). Not a client-visible change: revision is not bumped."""
        if ok < 0 or failed < 0:
            raise ValueError(f"report counts must not be negative (ok={ok}, failed={failed})")
        at = _aware(received_at, "received_at") if received_at is not None else self.now()
        named = channel is not None or labels is not None
        with self._write() as conn:
            conn.execute(
                insert(_REPORT).values(
                    namespace=namespace, path=path, version=version, client=client, ok=ok,
                    failed=failed, error=error or None, received_at=at, channel=channel,
                    labels=canonical_json(dict(labels or {})) if named else None,
                )
            )

    def report_stats(
        self, namespace: str, path: str, version: str, *, since: datetime,
        exclude_version: bool = False,
    ) -> ReportStats:
        """Reports on `version` received at or after `since`; with `exclude_version`, reports on
        every other version of the config instead (the baseline: clients still on stable)."""
        scope = (
            *_config(_REPORT, namespace, path),
            _REPORT.c.version != version if exclude_version else _REPORT.c.version == version,
            _REPORT.c.received_at >= _aware(since, "since"),
        )
        with self._read(consistent=True) as conn:
            row = conn.execute(
                select(
                    func.count(func.distinct(_REPORT.c.client)),
                    func.coalesce(func.sum(_REPORT.c.ok), 0),
                    func.coalesce(func.sum(_REPORT.c.failed), 0),
                    func.count(),
                ).where(*scope)
            ).one()
            last_error = conn.execute(
                select(_REPORT.c.error)
                .where(*scope, _REPORT.c.error.is_not(None), _REPORT.c.error != "")
                .order_by(_REPORT.c.received_at.desc(), _REPORT.c.id.desc())
                .limit(1)
            ).scalar_one_or_none()
        clients, ok, failed, reports = (int(value) for value in row)
        operations = ok + failed
        return ReportStats(
            clients=clients, ok=ok, failed=failed,
            error_ratio=failed / operations if operations else None,
            last_error=last_error, reports=reports,
        )

    def report_totals(self, namespace: str, path: str, *, since: datetime) -> list[ReportTotals]:
        """Per client, version and reported identity: the sums of the config's reports received at
        or after `since`, with the identity the client last polled with (client_seen) beside it,
        sorted by client and version. Which of them belong to a stage's cohort is the health
        check's business (tempoconf.health)."""
        scope = (*_config(_REPORT, namespace, path), _REPORT.c.received_at >= _aware(since, "since"))
        keys = (_REPORT.c.client, _REPORT.c.version, _REPORT.c.channel, _REPORT.c.labels)
        grouped = (
            select(
                *keys,
                func.coalesce(func.sum(_REPORT.c.ok), 0).label("ok"),
                func.coalesce(func.sum(_REPORT.c.failed), 0).label("failed"),
                func.count().label("reports"),
            )
            .where(*scope)
            .group_by(*keys)
            .subquery()
        )
        seen = and_(*_config(_SEEN, namespace, path), _SEEN.c.client == grouped.c.client)
        with self._read(consistent=True) as conn:
            rows = conn.execute(
                select(grouped, _SEEN.c.channel.label("seen_channel"), _SEEN.c.labels.label("seen_labels"))
                .select_from(grouped.outerjoin(_SEEN, seen))
                .order_by(grouped.c.client, grouped.c.version, grouped.c.channel, grouped.c.labels)
            ).all()
        return [
            ReportTotals(
                client=row.client, version=row.version, ok=int(row.ok), failed=int(row.failed),
                reports=int(row.reports), channel=row.channel,
                labels=json.loads(row.labels) if row.labels is not None else None,
                seen_channel=row.seen_channel,
                seen_labels=json.loads(row.seen_labels) if row.seen_labels is not None else None,
            )
            for row in rows
        ]

    def prune_reports(self, older_than: datetime) -> int:
        """Delete reports received before `older_than`; returns how many."""
        cutoff = _aware(older_than, "older_than")
        with self._write() as conn:
            return int(conn.execute(delete(_REPORT).where(_REPORT.c.received_at < cutoff)).rowcount)

    # -- clients seen ----------------------------------------------------------------------------
    def record_seen_clients(self, namespace: str, path: str, clients: list[SeenClient]) -> None:
        """Upsert the clients the API saw polling a config, in one transaction. A row only moves
        forward: an entry older than the stored one changes nothing, so last_seen never goes back.
        Not a client-visible change: revision is not bumped."""
        latest: dict[str, SeenClient] = {}
        for seen in clients:
            kept = latest.get(seen.client)
            if kept is None or seen.last_seen >= kept.last_seen:
                # PostgreSQL refuses to upsert one row twice in one statement.
                latest[seen.client] = seen
        if not latest:
            return
        rows = [
            {"namespace": namespace, "path": path, "client": seen.client, "channel": seen.channel,
             "labels": canonical_json(dict(seen.labels)),
             "last_seen": _aware(seen.last_seen, "last_seen"), "last_version": seen.last_version}
            for seen in latest.values()
        ]
        with self._write() as conn:
            statement = _insert(conn, _SEEN)
            new = statement.excluded
            conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["namespace", "path", "client"],
                    set_={
                        "channel": new.channel,
                        "labels": new.labels,
                        "last_seen": new.last_seen,
                        "last_version": func.coalesce(new.last_version, _SEEN.c.last_version),
                    },
                    where=_SEEN.c.last_seen <= new.last_seen,
                ),
                rows,
            )

    def recent_clients(self, namespace: str, path: str, *, since: datetime) -> list[SeenClient]:
        """Clients seen polling the config at or after `since`, and clients that only sent health
        reports on it since then (with the identity their newest report named; channel None and
        labels {} when it named none), each once, sorted by client id. A client found in both keeps its polled identity and version, and the
        later of the two times."""
        cutoff = _aware(since, "since")
        with self._read(consistent=True) as conn:
            polled = conn.execute(
                select(_SEEN).where(*_config(_SEEN, namespace, path), _SEEN.c.last_seen >= cutoff)
            ).all()
            scope = (*_config(_REPORT, namespace, path), _REPORT.c.received_at >= cutoff)
            newest = (
                select(_REPORT.c.client, func.max(_REPORT.c.received_at).label("at"))
                .where(*scope)
                .group_by(_REPORT.c.client)
                .subquery()
            )
            # The newest report of each client (its version); a tie on the time picks either.
            reported = conn.execute(
                select(_REPORT.c.client, _REPORT.c.version, _REPORT.c.received_at,
                       _REPORT.c.channel, _REPORT.c.labels)
                .join(newest, and_(_REPORT.c.client == newest.c.client,
                                   _REPORT.c.received_at == newest.c.at))
                .where(*scope)
            ).all()
        clients = {
            row.client: SeenClient(
                client=row.client, channel=row.channel, labels=json.loads(row.labels),
                last_seen=row.last_seen, last_version=row.last_version,
            )
            for row in polled
        }
        for row in reported:
            known = clients.get(row.client)
            if known is None:
                clients[row.client] = SeenClient(
                    client=row.client, channel=row.channel,
                    labels=json.loads(row.labels) if row.labels is not None else {},
                    last_seen=row.received_at, last_version=row.version,
                )
            elif row.received_at > known.last_seen:
                clients[row.client] = replace(known, last_seen=row.received_at)
        return [clients[client] for client in sorted(clients)]

    def prune_seen_clients(self, older_than: datetime) -> int:
        """Forget clients last seen before `older_than`; returns how many."""
        cutoff = _aware(older_than, "older_than")
        with self._write() as conn:
            return int(conn.execute(delete(_SEEN).where(_SEEN.c.last_seen < cutoff)).rowcount)

    # -- distribution --------------------------------------------------------------------------
    def load_snapshot(self, namespace: str, path: str) -> ConfigSnapshot | None:
        """A config as clients see it (stable, staged version, published stages); None if unknown.
        A config is known once it has a version."""
        with self._read(consistent=True) as conn:
            return _snapshots(conn, (namespace, path)).get((namespace, path))

    def load_snapshots(self) -> dict[tuple[str, str], ConfigSnapshot]:
        """Every known config, keyed by (namespace, path); a handful of queries, not one per config."""
        return self.load_snapshots_with_revision()[1]

    def load_snapshots_with_revision(self) -> tuple[int, dict[tuple[str, str], ConfigSnapshot]]:
        """`revision()` and `load_snapshots()` read from one consistent snapshot of the database."""
        with self._read(consistent=True) as conn:
            return read_revision(conn), _snapshots(conn, None)

    def now(self) -> datetime:
        """The current UTC time (aware)."""
        return datetime.now(UTC)

    # -- transactions ---------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction; on SQLite it takes the write lock at BEGIN (see _sqlite_begin)."""
        with self._engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                yield conn

    @contextmanager
    def _read(self, *, consistent: bool = False) -> Iterator[Connection]:
        """A read transaction; `consistent`: every statement sees the same snapshot."""
        with self._engine.connect() as conn:
            if consistent and conn.dialect.name == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn


# -- statements -----------------------------------------------------------------------------------


def _config(t: Table, namespace: str, path: str) -> tuple[Any, Any]:
    return (t.c.namespace == namespace, t.c.path == path)


def _same_version(t: Table) -> Any:
    return and_(
        _VERSION.c.namespace == t.c.namespace,
        _VERSION.c.path == t.c.path,
        _VERSION.c.version == t.c.version,
    )


def _insert(conn: Connection, t: Table) -> postgresql.Insert | sqlite.Insert:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(t)
    return sqlite.insert(t)


def _upsert(conn: Connection, t: Table, values: dict[str, Any], *, keys: tuple[str, ...]) -> None:
    statement = _insert(conn, t).values(**values)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=list(keys),
            set_={name: value for name, value in values.items() if name not in keys},
        )
    )


def _audit(
    conn: Connection, namespace: str, path: str, *, at: datetime, action: str, actor: str,
    reason: str = "", version: str | None = None, workflow_id: str | None = None,
    event_key: str | None = None, details: Mapping[str, Any] | None = None,
) -> bool:
    """Insert an audit row; False (nothing inserted) when event_key is already recorded."""
    values = {
        "namespace": namespace, "path": path, "at": at, "actor": actor, "action": action,
        "reason": reason, "version": version, "workflow_id": workflow_id, "event_key": event_key,
        "details": canonical_json(dict(details or {})),
    }
    if event_key is None:
        conn.execute(insert(_AUDIT).values(**values))
        return True
    # ON CONFLICT also covers a concurrent duplicate on PostgreSQL: it waits for the first to commit.
    # (RETURNING, not rowcount: SQLAlchemy reports -1 as the rowcount of an INSERT on psycopg.)
    statement = (
        _insert(conn, _AUDIT).values(**values).on_conflict_do_nothing(index_elements=["event_key"])
        .returning(_AUDIT.c.id)
    )
    return conn.execute(statement).first() is not None


def _aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


def _version_record(row: Row[Any]) -> VersionRecord:
    return VersionRecord(
        version=row.version, value=json.loads(row.value), author=row.author, commit=row.commit,
        message=row.message, created_at=row.created_at,
    )


def _get_version(conn: Connection, namespace: str, path: str, version: str) -> VersionRecord | None:
    row = conn.execute(
        select(_VERSION).where(*_config(_VERSION, namespace, path), _VERSION.c.version == version)
    ).first()
    return None if row is None else _version_record(row)


def _require_version(conn: Connection, namespace: str, path: str, version: str) -> None:
    found = conn.execute(
        select(_VERSION.c.version).where(*_config(_VERSION, namespace, path),
                                         _VERSION.c.version == version)
    ).first()
    if found is None:
        raise UnknownVersionError(namespace, path, version)


def _lock_record(values: Mapping[str, Any]) -> LockRecord:
    return LockRecord(
        namespace=values["namespace"], path=values["path"], workflow_id=values["workflow_id"],
        run_id=values["run_id"], version=values["version"], acquired_at=values["acquired_at"],
    )


def _get_lock(conn: Connection, namespace: str, path: str, *, for_update: bool = False) -> LockRecord | None:
    statement = select(_LOCK).where(*_config(_LOCK, namespace, path))
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


def _rollout_record(values: Mapping[str, Any]) -> RolloutRecord:
    return RolloutRecord(
        namespace=values["namespace"], path=values["path"], workflow_id=values["workflow_id"],
        run_id=values["run_id"], version=values["version"], state=values["state"],
        stage_index=values["stage_index"], started_at=values["started_at"],
        updated_at=values["updated_at"],
    )


def _get_rollout(
    conn: Connection, namespace: str, path: str, *, for_update: bool = False,
) -> RolloutRecord | None:
    statement = select(_ROLLOUT).where(*_config(_ROLLOUT, namespace, path))
    if for_update:
        statement = statement.with_for_update()
    row = conn.execute(statement).first()
    return None if row is None else _rollout_record(row._mapping)


def _clear_rollout(conn: Connection, namespace: str, path: str) -> None:
    conn.execute(delete(_STAGE).where(*_config(_STAGE, namespace, path)))
    conn.execute(delete(_ROLLOUT).where(*_config(_ROLLOUT, namespace, path)))


def _replace_rollout(
    conn: Connection, namespace: str, path: str, *, workflow_id: str, run_id: str, version: str,
    at: datetime,
) -> RolloutRecord:
    values = {"namespace": namespace, "path": path, "workflow_id": workflow_id, "run_id": run_id,
              "version": version, "state": "started", "stage_index": -1, "started_at": at,
              "updated_at": at}
    _clear_rollout(conn, namespace, path)
    conn.execute(insert(_ROLLOUT).values(**values))
    return _rollout_record(values)


def _make_stable(
    conn: Connection, namespace: str, path: str, version: str, *, at: datetime, actor: str,
    reason: str, workflow_id: str | None,
) -> None:
    _upsert(conn, _STABLE, {"namespace": namespace, "path": path, "version": version, "updated_at": at},
            keys=("namespace", "path"))
    conn.execute(
        insert(_STABLE_HISTORY).values(
            namespace=namespace, path=path, version=version, at=at, actor=actor, reason=reason,
            workflow_id=workflow_id,
        )
    )


def _snapshots(
    conn: Connection, only: tuple[str, str] | None,
) -> dict[tuple[str, str], ConfigSnapshot]:
    """Four queries whatever the number of configs: known configs, stables, rollouts, stages."""

    def scope(t: Table) -> tuple[Any, ...]:
        return () if only is None else _config(t, *only)

    known = conn.execute(
        select(_VERSION.c.namespace, _VERSION.c.path).where(*scope(_VERSION)).distinct()
    ).all()
    stables = {
        (row.namespace, row.path): _version_record(row)
        for row in conn.execute(
            select(_VERSION).join(_STABLE, _same_version(_STABLE)).where(*scope(_STABLE))
        )
    }
    staged = {
        (row.namespace, row.path): _version_record(row)
        for row in conn.execute(
            select(_VERSION).join(_ROLLOUT, _same_version(_ROLLOUT)).where(*scope(_ROLLOUT))
        )
    }
    stages: dict[tuple[str, str], list[PublishedStage]] = {}
    for row in conn.execute(
        select(_STAGE)
        .join(_ROLLOUT, and_(_ROLLOUT.c.namespace == _STAGE.c.namespace,
                             _ROLLOUT.c.path == _STAGE.c.path, _ROLLOUT.c.run_id == _STAGE.c.run_id))
        .where(*scope(_STAGE))
        .order_by(_STAGE.c.namespace, _STAGE.c.path, _STAGE.c.stage_index)
    ):
        stages.setdefault((row.namespace, row.path), []).append(
            PublishedStage(
                index=row.stage_index, name=row.name, channel=row.channel,
                percentile=row.percentile, labels=json.loads(row.labels), expires_at=row.expires_at,
            )
        )
    return {
        (namespace, path): ConfigSnapshot(
            namespace=namespace,
            path=path,
            stable=stables.get((namespace, path)),
            staged=staged.get((namespace, path)),
            stages=tuple(stages.get((namespace, path), ())) if (namespace, path) in staged else (),
        )
        for namespace, path in known
    }

