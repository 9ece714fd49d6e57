"""Shared by the scale benchmarks: a store of many configs seeded fast, rollouts on any config
written straight to the store (as the worker's activities write them), and rollouts that keep
writing in the background (lease renewals and stages nobody is on), on a timer.

There is no bulk write in `Store` (every method is one config's short transaction, audited), so
`seed_configs` inserts the versions and stables of many configs with executemany through the
store's own transaction and tables, and bumps the revision once, as `put_version` and
`set_stable` would for each. It leaves out what serving never reads (stable history, audit rows).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from _common import LEASE, NAMESPACE, log
from sqlalchemy import insert

from tempoconf.canonical import canonical_json, version_id
from tempoconf.resolution import PublishedStage, VersionRecord
from tempoconf.store._base import STABLE, VERSION
from tempoconf.store.engine import bump_revision
from tempoconf.store.records import StageLease
from tempoconf.store.store import Store

__all__ = [
    "BackgroundRollouts",
    "PathRollout",
    "config_path",
    "config_value",
    "seed_configs",
]

SEED_CHUNK = 2000
"""Rows per executemany: large enough to be fast, small enough to keep memory flat."""
NOBODY = "bench-nobody"
"""A channel no client is on: a stage on it changes the snapshot and moves nobody."""


def config_path(i: int) -> str:
    return f"fleet/svc-{i:06d}"


def config_value(i: int, generation: int = 0) -> dict[str, Any]:
    """A realistic service config of 1-2 KB of JSON (canonical), the same for the same `i` and
    `generation`: resources, timeouts, flags, endpoints, an allowlist."""
    rng = random.Random(i * 1_000_003 + generation)
    name = f"svc-{i:06d}"
    return {
        "service": name,
        "owner": f"team-{i % 97:02d}",
        "generation": generation,
        "replicas": rng.randint(1, 50),
        "resources": {
            "cpu": f"{rng.randint(1, 8) * 250}m",
            "memory": f"{rng.randint(1, 16) * 256}Mi",
        },
        "timeouts_ms": {"connect": rng.randint(50, 500), "read": rng.randint(500, 5000)},
        "retry": {"attempts": rng.randint(1, 5), "backoff_ms": rng.randint(10, 200)},
        "features": {f"feature_{k:02d}": rng.random() < 0.5 for k in range(rng.randint(12, 30))},
        "endpoints": [
            f"https://{name}-{k}.internal.example:{8000 + k}/v1" for k in range(rng.randint(3, 6))
        ],
        "allowlist": [
            f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.0/24"
            for _ in range(rng.randint(20, 44))
        ],
    }


def seed_configs(store: Store, count: int) -> dict[str, Any]:
    """`count` configs `fleet/svc-NNNNNN`, each with one stable version; returns the figures."""
    began = time.monotonic()
    now = datetime.now(UTC)
    sizes = []
    # No bulk write in the store: its own transaction, its tables, executemany.
    with store._write() as conn:
        for start in range(0, count, SEED_CHUNK):
            versions, stables = [], []
            for i in range(start, min(count, start + SEED_CHUNK)):
                value = config_value(i)
                document = canonical_json(value)
                sizes.append(len(document))
                version = version_id(value)
                row = {"namespace": NAMESPACE, "path": config_path(i), "version": version}
                versions.append(
                    {**row, "value": document, "author": "bench", "commit": "", "message": ""}
                    | {"created_at": now}
                )
                stables.append({**row, "updated_at": now})
            conn.execute(insert(VERSION), versions)
            conn.execute(insert(STABLE), stables)
        # One revision for the lot, naming every config seeded (the store's change log).
        bump_revision(conn, [(NAMESPACE, config_path(i)) for i in range(count)])
    sizes.sort()
    figures = {
        "configs": count,
        "seconds": round(time.monotonic() - began, 2),
        "value_bytes": {"min": sizes[0], "median": sizes[len(sizes) // 2], "max": sizes[-1]},
    }
    log(f"seeded {count} configs: {figures}")
    return figures


@dataclass
class PathRollout:
    """A rollout of config `path`, written to the store as the workflow's activities write it."""

    store: Store
    path: str
    run_id: str = field(default_factory=lambda: f"bench-{secrets.token_hex(4)}")
    version: str = ""

    @property
    def workflow_id(self) -> str:
        return f"bench:{self.run_id}"

    def begin(self, value: dict[str, Any]) -> None:
        """Store `value` as a new version, take the lock, begin the rollout (one transaction)."""
        self.version = version_id(value)
        with self.store.atomically():
            self.store.put_version(
                NAMESPACE, self.path, VersionRecord(self.version, value, author="bench")
            )
            self.store.acquire_locks(
                {(NAMESPACE, self.path): self.version},
                workflow_id=self.workflow_id,
                run_id=self.run_id,
            )
            self.store.begin_rollout(
                NAMESPACE,
                self.path,
                workflow_id=self.workflow_id,
                run_id=self.run_id,
                version=self.version,
                actor="bench",
                reason="bench",
                event_key=f"{self.run_id}:begin",
            )

    def publish(
        self, index: int, *, channel: str | None = None, percentile: float | None = None
    ) -> None:
        stage = PublishedStage(
            index=index,
            name=f"channel:{channel}" if channel else f"{percentile:g}%",
            channel=channel,
            percentile=percentile,
            labels={},
            expires_at=datetime.now(UTC) + LEASE,
        )
        self.store.publish_stage(
            NAMESPACE,
            self.path,
            run_id=self.run_id,
            stage=stage,
            actor="bench",
            event_key=f"{self.run_id}:stage:{index}",
        )

    def renew(self, stages: int) -> None:
        """Renew the leases of the first `stages` stages (as the workflow does during a hold)."""
        expires_at = datetime.now(UTC) + LEASE
        self.store.renew_leases(
            NAMESPACE,
            self.path,
            run_id=self.run_id,
            leases=[StageLease(index, expires_at) for index in range(stages)],
        )

    def revert(self) -> None:
        self.store.revert(
            NAMESPACE,
            self.path,
            run_id=self.run_id,
            workflow_id=self.workflow_id,
            actor="bench",
            reason="bench",
            outcome="reverted",
            event_key=f"{self.run_id}:revert",
        )

    def stage_everyone(self, value: dict[str, Any]) -> int:
        """Begin with `value` and publish a 100% stage, in ONE commit (one change of the
        store); returns time.time_ns() right after it committed."""
        with self.store.atomically():
            self.begin(value)
            self.publish(0, percentile=100)
        return time.time_ns()

    def revert_now(self) -> int:
        """Revert (every client back on stable); returns time.time_ns() after the commit."""
        self.revert()
        return time.time_ns()


class BackgroundRollouts:
    """Rollouts that stay live on configs `paths` and write on a timer, `writes_per_second` in
    all (one rollout after the other): a lease renewal, and every third write a new stage on a
    channel nobody is on (up to 4 stages). Every write changes the store's revision and that
    config's snapshot, and moves no client."""

    MAX_STAGES = 4

    def __init__(self, store: Store, paths: list[str], writes_per_second: float) -> None:
        self.rollouts = [PathRollout(store, path) for path in paths]
        self.interval = 1.0 / writes_per_second
        self.writes = 0
        self._stages = [1] * len(paths)

    def begin(self) -> None:
        """Begin every rollout with a first stage (on the channel nobody is on)."""
        for n, rollout in enumerate(self.rollouts):
            with rollout.store.atomically():
                rollout.begin({"background": n, "stage": "nobody"})
                rollout.publish(0, channel=NOBODY)

    def _write_one(self) -> None:
        number = self.writes % len(self.rollouts)
        rollout = self.rollouts[number]
        if self.writes % 3 == 2 and self._stages[number] < self.MAX_STAGES:
            rollout.publish(self._stages[number], channel=NOBODY)
            self._stages[number] += 1
        else:
            rollout.renew(self._stages[number])
        self.writes += 1

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await asyncio.to_thread(self._write_one)
            next_at += self.interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[BackgroundRollouts]:
        if not self.rollouts:
            yield self
            return
        task = asyncio.create_task(self._run(), name="background-rollouts")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
