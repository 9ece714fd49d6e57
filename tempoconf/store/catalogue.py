"""The catalogue: config schemas, immutable versions and the stable version of each config, and
what is served of every config at once (configs as code compare a directory with it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, Table, select

from tempoconf.canonical import canonical_id, canonical_json
from tempoconf.resolution import VersionRecord
from tempoconf.store._base import (
    LOCK,
    SCHEMA,
    STABLE,
    STABLE_HISTORY,
    VERSION,
    StoreBase,
    aware,
    config_is,
    dialect_insert,
    make_stable,
    row_record,
    same_version,
    upsert,
    version_record,
    write_audit,
)
from tempoconf.store.engine import bump_revision
from tempoconf.store.records import LockRecord, ServedConfig, VersionInfo
from tempoconf.store.rollout_rows import lock_record

__all__ = ["CatalogueMixin"]


class CatalogueMixin(StoreBase):
    """Schemas, versions and stable (a part of Store)."""

    # -- schemas -----------------------------------------------------------------------------------
    def set_schema(
        self, namespace: str, path: str, schema: Any, *, actor: str, reason: str = ""
    ) -> None:
        """Register (or replace) the JSON Schema of a config; audited as `schema.set`."""
        document = canonical_json(schema)
        now = self.now()
        with self._write() as conn:
            upsert(
                conn,
                SCHEMA,
                {
                    "namespace": namespace,
                    "path": path,
                    "document": document,
                    "updated_at": now,
                    "updated_by": actor,
                },
                keys=("namespace", "path"),
            )
            write_audit(
                conn, namespace, path, at=now, action="schema.set", actor=actor, reason=reason
            )

    def get_schema(self, namespace: str, path: str) -> Any | None:
        with self._read() as conn:
            document = conn.execute(
                select(SCHEMA.c.document).where(*config_is(SCHEMA, namespace, path))
            ).scalar_one_or_none()
        return None if document is None else json.loads(document)

    # -- versions ----------------------------------------------------------------------------------
    def put_version(self, namespace: str, path: str, record: VersionRecord) -> bool:
        """Store an immutable version; True if new, False if it existed (never overwritten)."""
        created_at = aware(record.created_at, "created_at") if record.created_at else self.now()
        values = {
            "namespace": namespace,
            "path": path,
            "version": record.version,
            "value": canonical_json(record.value),
            "author": record.author,
            "commit": record.commit,
            "message": record.message,
            "created_at": created_at,
        }
        with self._write() as conn:
            inserted = (
                conn.execute(
                    dialect_insert(conn, VERSION)
                    .values(**values)
                    .on_conflict_do_nothing()
                    .returning(VERSION.c.version)
                ).first()
                is not None
            )
            if inserted:
                # A config is known (listed by load_snapshots_with_revision) from its first version on.
                bump_revision(conn, [(namespace, path)])
        return inserted

    def get_version(self, namespace: str, path: str, version: str) -> VersionRecord | None:
        with self._read() as conn:
            return _get_version(conn, namespace, path, version)

    def list_versions(self, namespace: str, path: str) -> list[VersionInfo]:
        """Newest first, each with the times it became stable."""
        with self._read() as conn:
            rows = conn.execute(
                select(VERSION)
                .where(*config_is(VERSION, namespace, path))
                .order_by(VERSION.c.created_at.desc(), VERSION.c.version)
            ).all()
            history = conn.execute(
                select(STABLE_HISTORY.c.version, STABLE_HISTORY.c.at)
                .where(*config_is(STABLE_HISTORY, namespace, path))
                .order_by(STABLE_HISTORY.c.id)
            ).all()
            stable = conn.execute(
                select(STABLE.c.version).where(*config_is(STABLE, namespace, path))
            ).scalar_one_or_none()
        since: dict[str, list[datetime]] = {}
        for version, at in history:
            since.setdefault(version, []).append(at)
        return [
            row_record(
                VersionInfo,
                row,
                stable_since=since.get(row.version, []),
                is_stable=row.version == stable,
            )
            for row in rows
        ]

    # -- stable ------------------------------------------------------------------------------------
    def get_stable(self, namespace: str, path: str) -> VersionRecord | None:
        with self._read() as conn:
            row = conn.execute(
                select(VERSION)
                .join(STABLE, same_version(STABLE))
                .where(*config_is(STABLE, namespace, path))
            ).first()
        return None if row is None else version_record(row)

    def set_stable(
        self,
        namespace: str,
        path: str,
        version: str,
        *,
        actor: str,
        reason: str,
        event_key: str,
        workflow_id: str | None = None,
    ) -> bool:
        """Make a stored version stable (history + audit `stable.set`). Idempotent by event_key.

        Raises UnknownVersionError (nothing written) when the version was never stored."""
        now = self.now()
        with self._write() as conn:
            if not write_audit(
                conn,
                namespace,
                path,
                at=now,
                action="stable.set",
                actor=actor,
                reason=reason,
                version=version,
                workflow_id=workflow_id,
                event_key=event_key,
            ):
                return False
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
            bump_revision(conn, [(namespace, path)])
        return True

    # -- what is served ----------------------------------------------------------------------------
    def served_configs(self, namespaces: Sequence[str] | None = None) -> list[ServedConfig]:
        """Every config the store knows in `namespaces` (None: every namespace), sorted by
        (namespace, path): its stable version, its schema's digest and its lock. Four queries
        whatever the number of configs, from one consistent snapshot of the database."""
        if namespaces is not None and not namespaces:
            return []

        def of(statement: Select[Any], t: Table) -> Select[Any]:
            if namespaces is None:
                return statement
            return statement.where(t.c.namespace.in_(sorted(set(namespaces))))

        with self._read(consistent=True) as conn:
            known = conn.execute(
                of(select(VERSION.c.namespace, VERSION.c.path).distinct(), VERSION)
            )
            configs: set[tuple[str, str]] = {(row.namespace, row.path) for row in known}
            stables: dict[tuple[str, str], str] = {
                (row.namespace, row.path): row.version
                for row in conn.execute(
                    of(select(STABLE.c.namespace, STABLE.c.path, STABLE.c.version), STABLE)
                )
            }
            # The stored document is canonical JSON (set_schema), so its id is the text's hash:
            # version_id(json.loads(document)) without parsing any schema.
            schemas: dict[tuple[str, str], str] = {
                (row.namespace, row.path): canonical_id(row.document)
                for row in conn.execute(
                    of(select(SCHEMA.c.namespace, SCHEMA.c.path, SCHEMA.c.document), SCHEMA)
                )
            }
            locks: dict[tuple[str, str], LockRecord] = {
                (row.namespace, row.path): lock_record(row._mapping)
                for row in conn.execute(of(select(LOCK), LOCK))
            }
        configs.update(stables, schemas, locks)
        # Sorted here, not by the database: PostgreSQL's collation may not order by code point.
        return [
            ServedConfig(
                namespace=namespace,
                path=path,
                stable_version=stables.get((namespace, path)),
                schema_digest=schemas.get((namespace, path)),
                lock=locks.get((namespace, path)),
            )
            for namespace, path in sorted(configs)
        ]


def _get_version(conn: Connection, namespace: str, path: str, version: str) -> VersionRecord | None:
    row = conn.execute(
        select(VERSION).where(*config_is(VERSION, namespace, path), VERSION.c.version == version)
    ).first()
    return None if row is None else version_record(row)
