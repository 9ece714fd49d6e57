"""Distribution: configs as clients resolve them (stable, staged version, published stages)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, Table, and_, select, tuple_

from tempoconf.resolution import ConfigSnapshot, PublishedStage
from tempoconf.store._base import (
    ROLLOUT,
    STABLE,
    STAGE,
    VERSION,
    StoreBase,
    same_version,
    version_record,
)
from tempoconf.store.change_log import changed_since
from tempoconf.store.engine import read_revision
from tempoconf.store.records import SnapshotDelta

__all__ = ["DistributionMixin"]


class DistributionMixin(StoreBase):
    """Snapshots of configs for the API to serve (a part of Store)."""

    # -- distribution ------------------------------------------------------------------------------
    def load_snapshots_with_revision(self) -> tuple[int, dict[tuple[str, str], ConfigSnapshot]]:
        """`revision()` and every known config keyed by (namespace, path), read from one consistent
        snapshot of the database (a handful of queries, not one per config)."""
        with self._read(consistent=True) as conn:
            return read_revision(conn), _snapshots(conn)

    def load_snapshots_since(self, revision: int) -> SnapshotDelta | None:
        """The current revision and the snapshot of each config changed after `revision` (None
        for one the store no longer knows), read from one consistent snapshot of the database:
        the work grows with the changes, not with the configs. None when the change log cannot
        say what changed (`revision` was pruned from it, or is ahead of this store): load every
        snapshot then (`load_snapshots_with_revision`)."""
        with self._read(consistent=True) as conn:
            since = changed_since(conn, revision)
            if since is None:
                return None
            current, keys = since
            ordered = sorted(keys)
            loaded: dict[tuple[str, str], ConfigSnapshot] = {}
            for start in range(0, len(ordered), _KEYS_PER_QUERY):
                loaded.update(_snapshots(conn, ordered[start : start + _KEYS_PER_QUERY]))
        return SnapshotDelta(revision=current, changed={key: loaded.get(key) for key in ordered})


_KEYS_PER_QUERY = 500
"""Configs named in one query's `(namespace, path) IN (...)`: 1000 parameters, well within
SQLite's and PostgreSQL's limits."""


def _snapshots(
    conn: Connection, keys: Sequence[tuple[str, str]] | None = None
) -> dict[tuple[str, str], ConfigSnapshot]:
    """Four queries whatever the number of configs: known configs, stables, rollouts, stages.
    `keys`: only those configs (None: every one)."""
    if keys is not None and not keys:
        return {}

    def among(statement: Select[Any], t: Table) -> Select[Any]:
        if keys is None:
            return statement
        return statement.where(tuple_(t.c.namespace, t.c.path).in_(keys))

    known = conn.execute(
        among(select(VERSION.c.namespace, VERSION.c.path).distinct(), VERSION)
    ).all()
    stables = {
        (row.namespace, row.path): version_record(row)
        for row in conn.execute(among(select(VERSION).join(STABLE, same_version(STABLE)), STABLE))
    }
    staged = {
        (row.namespace, row.path): version_record(row)
        for row in conn.execute(
            among(select(VERSION).join(ROLLOUT, same_version(ROLLOUT)), ROLLOUT)
        )
    }
    stages: dict[tuple[str, str], list[PublishedStage]] = {}
    for row in conn.execute(
        among(select(STAGE), STAGE)
        .join(
            ROLLOUT,
            and_(
                ROLLOUT.c.namespace == STAGE.c.namespace,
                ROLLOUT.c.path == STAGE.c.path,
                ROLLOUT.c.run_id == STAGE.c.run_id,
            ),
        )
        .order_by(STAGE.c.namespace, STAGE.c.path, STAGE.c.stage_index)
    ):
        stages.setdefault((row.namespace, row.path), []).append(
            PublishedStage(
                index=row.stage_index,
                name=row.name,
                channel=row.channel,
                percentile=row.percentile,
                labels=json.loads(row.labels),
                expires_at=row.expires_at,
                bucket_key=row.bucket_key,
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
