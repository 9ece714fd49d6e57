"""What one poll asks for, and what it is answered (DESIGN.md, Distribution API).

Kept apart from the route so the long-poll can re-run `serve_config` on each snapshot change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import QueryParams

from api.errors import ApiError
from api.etag import config_etag
from api.snapshots import SnapshotCache, SnapshotsNotLoadedError
from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem, path_problem
from tempoconf.resolution import STABLE, ClientIdentity, ConfigSnapshot, Resolution, resolve

__all__ = ["ConfigQuery", "ServedConfig", "parse_config_query", "serve_config"]

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no", ""})


@dataclass(frozen=True)
class ConfigQuery:
    """One poll: which config, who asks, and whether it wants stable regardless of stages."""

    namespace: str
    path: str
    client: ClientIdentity
    anonymous: bool
    """No `client` given: percentile stages never match, channel and label stages may."""
    stable_only: bool = False


@dataclass(frozen=True)
class ServedConfig:
    """The answer to one poll, and its ETag."""

    namespace: str
    path: str
    resolution: Resolution
    etag: str

    def body(self) -> dict[str, Any]:
        record = self.resolution.record
        expires_at = self.resolution.expires_at
        return {
            "namespace": self.namespace,
            "path": self.path,
            "version": record.version,
            "stage": self.resolution.stage,
            "value": record.value,
            "expires_at": expires_at.astimezone(UTC).isoformat() if expires_at else None,
            "metadata": record.metadata(),
        }


def parse_config_query(path: str, params: QueryParams) -> ConfigQuery:
    """Read a poll from its path and query parameters.

    Raises ApiError(400) naming the parameter that is wrong.
    """
    problem = path_problem(path)
    if problem is not None:
        raise ApiError(400, f"invalid config path in the URL: {problem}")
    namespace = params.get("namespace", DEFAULT_NAMESPACE)
    problem = namespace_problem(namespace)
    if problem is not None:
        raise ApiError(400, f"invalid query parameter namespace: {problem}")
    client_id = params.get("client") or ""
    channel = params.get("channel") or None
    labels = _parse_labels(params.getlist("label"))
    stable_only = _parse_bool("stable", params.get("stable", ""))
    return ConfigQuery(
        namespace=namespace,
        path=path,
        client=ClientIdentity(client_id=client_id, channel=channel, labels=labels),
        anonymous=client_id == "",
        stable_only=stable_only,
    )


def serve_config(cache: SnapshotCache, query: ConfigQuery, now: datetime) -> ServedConfig:
    """Resolve a poll against the cached snapshots at `now`.

    Raises ApiError: 404 for an unknown config or one with nothing to serve this client yet,
    503 while the snapshots have never been loaded.
    """
    where = f"config {query.path!r} in namespace {query.namespace!r}"
    try:
        snapshot = cache.get(query.namespace, query.path)
    except SnapshotsNotLoadedError as exc:
        raise ApiError(503, f"cannot serve {where}: {exc}") from exc
    if snapshot is None:
        raise ApiError(404, f"unknown {where}")
    resolution = _resolve(snapshot, query, now)
    if resolution is None:
        if query.stable_only:
            raise ApiError(404, f"{where} has no stable version yet")
        raise ApiError(
            404,
            f"{where} has no stable version yet, "
            "and no stage of its rollout applies to this client",
        )
    etag = config_etag(query.namespace, query.path, resolution.record.version, resolution.stage)
    return ServedConfig(query.namespace, query.path, resolution, etag)


def _resolve(snapshot: ConfigSnapshot, query: ConfigQuery, now: datetime) -> Resolution | None:
    if query.stable_only:
        return Resolution(snapshot.stable, STABLE, None) if snapshot.stable is not None else None
    if query.anonymous and any(stage.percentile is not None for stage in snapshot.stages):
        # Every anonymous client would share one bucket, so a percentile would take all or none.
        stages = tuple(stage for stage in snapshot.stages if stage.percentile is None)
        snapshot = dataclasses.replace(snapshot, stages=stages)
    return resolve(snapshot, query.client, now)


def _parse_labels(raw: list[str]) -> Mapping[str, str]:
    labels: dict[str, str] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep:
            raise ApiError(400, f"invalid query parameter label={item!r}: expected label=key=value")
        if not key:
            raise ApiError(400, f"invalid query parameter label={item!r}: the label key is empty")
        if labels.get(key, value) != value:
            raise ApiError(
                400,
                f"invalid query parameter label: {key!r} is given twice "
                f"({labels[key]!r} and {value!r})",
            )
        labels[key] = value
    return labels


def _parse_bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ApiError(400, f"invalid query parameter {name}={raw!r}: expected true or false")
