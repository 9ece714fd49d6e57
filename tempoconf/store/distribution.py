"""Distribution: configs as clients resolve them (stable, staged version, published stages)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, Table, and_, select

from tempoconf.resolution import ConfigSnapshot, PublishedStage
from tempoconf.store._base import (
    ROLLOUT,
    STABLE,
    STAGE,
    VERSION,
    StoreBase,
    config_is,
    same_version,
    version_record,
)
from tempoconf.store.engine import read_revision

__all__ = ["DistributionMixin"]


class DistributionMixin(StoreBase):
    """Snapshots of configs for the API to serve (a part of Store)."""

    # -- distribution ------------------------------------------------------------------------------
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


def _snapshots(
    conn: Connection,
    only: tuple[str, str] | None,
) -> dict[tuple[str, str], ConfigSnapshot]:
    """Four queries whatever the number of configs: known configs, stables, rollouts, stages."""

    def scope(t: Table) -> tuple[Any, ...]:
        return () if only is None else config_is(t, *only)

    known = conn.execute(
        select(VERSION.c.namespace, VERSION.c.path).where(*scope(VERSION)).distinct()
    ).all()
    stables = {
        (row.namespace, row.path): version_record(row)
        for row in conn.execute(
            select(VERSION).join(STABLE, same_version(STABLE)).where(*scope(STABLE))
        )
    }
    staged = {
        (row.namespace, row.path): version_record(row)
        for row in conn.execute(
            select(VERSION).join(ROLLOUT, same_version(ROLLOUT)).where(*scope(ROLLOUT))
        )
    }
    stages: dict[tuple[str, str], list[PublishedStage]] = {}
    for row in conn.execute(
        select(STAGE)
        .join(
            ROLLOUT,
            and_(
                ROLLOUT.c.namespace == STAGE.c.namespace,
                ROLLOUT.c.path == STAGE.c.path,
                ROLLOUT.c.run_id == STAGE.c.run_id,
            ),
        )
        .where(*scope(STAGE))
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
