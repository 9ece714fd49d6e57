"""Distribution: configs as clients resolve them (stable, staged version, published stages)."""

from __future__ import annotations

import json

from sqlalchemy import Connection, and_, select

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
from tempoconf.store.engine import read_revision

__all__ = ["DistributionMixin"]


class DistributionMixin(StoreBase):
    """Snapshots of configs for the API to serve (a part of Store)."""

    # -- distribution ------------------------------------------------------------------------------
    def load_snapshots_with_revision(self) -> tuple[int, dict[tuple[str, str], ConfigSnapshot]]:
        """`revision()` and every known config keyed by (namespace, path), read from one consistent
        snapshot of the database (a handful of queries, not one per config)."""
        with self._read(consistent=True) as conn:
            return read_revision(conn), _snapshots(conn)


def _snapshots(conn: Connection) -> dict[tuple[str, str], ConfigSnapshot]:
    """Four queries whatever the number of configs: known configs, stables, rollouts, stages."""
    known = conn.execute(select(VERSION.c.namespace, VERSION.c.path).distinct()).all()
    stables = {
        (row.namespace, row.path): version_record(row)
        for row in conn.execute(select(VERSION).join(STABLE, same_version(STABLE)))
    }
    staged = {
        (row.namespace, row.path): version_record(row)
        for row in conn.execute(select(VERSION).join(ROLLOUT, same_version(ROLLOUT)))
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
