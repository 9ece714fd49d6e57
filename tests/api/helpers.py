"""Write config states through the real Store, the way the rollout activities do."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tempoconf.canonical import version_id
from tempoconf.resolution import PublishedStage, VersionRecord
from tempoconf.resolution.bucketing import bucket, percentile_threshold
from tempoconf.store.store import Store
from tests.fixtures.waiting import eventually

NS = "default"
ACTOR = "tests"


def record(value: Any, *, message: str = "test value") -> VersionRecord:
    return VersionRecord(
        version=version_id(value),
        value=value,
        author="alice@example.com",
        commit="3f2a9c1",
        message=message,
        created_at=datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
    )


def make_stable(store: Store, path: str, value: Any, *, namespace: str = NS) -> VersionRecord:
    rec = record(value)
    store.put_version(namespace, path, rec)
    store.set_stable(
        namespace, path, rec.version, actor=ACTOR, reason="test", event_key=_key("stable")
    )
    return rec


def start_rollout(
    store: Store, path: str, value: Any, *, run_id: str = "run-1", namespace: str = NS
) -> VersionRecord:
    rec = record(value, message="staged value")
    store.put_version(namespace, path, rec)
    workflow_id = f"rollout:{namespace}/{path}"
    store.acquire_locks({(namespace, path): rec.version}, workflow_id=workflow_id, run_id=run_id)
    store.begin_rollout(
        namespace,
        path,
        workflow_id=workflow_id,
        run_id=run_id,
        version=rec.version,
        actor=ACTOR,
        reason="test",
        event_key=_key("begin"),
    )
    return rec


def publish(
    store: Store,
    path: str,
    *,
    index: int,
    name: str,
    channel: str | None = None,
    percentile: float | None = None,
    labels: Mapping[str, str] | None = None,
    expires_in: timedelta = timedelta(hours=1),
    run_id: str = "run-1",
    namespace: str = NS,
) -> PublishedStage:
    stage = PublishedStage(
        index=index,
        name=name,
        channel=channel,
        percentile=percentile,
        labels=dict(labels or {}),
        expires_at=datetime.now(UTC) + expires_in,
    )
    store.publish_stage(
        namespace, path, run_id=run_id, stage=stage, actor=ACTOR, event_key=_key("publish")
    )
    return stage


def client_in(path: str, percentile: float, *, inside: bool, prefix: str = "host-") -> str:
    """A client id whose bucket for `path` is inside (or outside) the cohort of `percentile`."""
    threshold = percentile_threshold(percentile)
    for n in range(100_000):
        candidate = f"{prefix}{n}"
        if (bucket(path, candidate) < threshold) == inside:
            return candidate
    raise AssertionError(f"no client {'inside' if inside else 'outside'} {percentile}%")


async def long_polls_waiting(http: httpx.AsyncClient, count: int) -> None:
    """Wait until the API's own gauge says `count` long-polls are held (so one is "in")."""

    async def gauge() -> bool:
        text = (await http.get("/metrics")).text
        waiting = sample(text, "tempoconf_api_long_polls_waiting")
        assert waiting == count, f"tempoconf_api_long_polls_waiting is {waiting}"
        return True

    await eventually(gauge, what=f"{count} long-poll(s) held by the API")


def _key(kind: str) -> str:
    return f"{kind}:{uuid.uuid4()}"


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name` with exactly `labels` in a Prometheus exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    return None
