"""The resolution bundle: a config's snapshot as JSON, for clients that resolve it themselves
(docs/contract.md, Resolution bundles).

`GET /v1/bundles/{path}` answers the same bundle to every client: the stable version, the staged
one and the live rollout's stages with their cohort rules and leases. A client (the SDK's local
evaluation, an edge relay) parses it back into a `ConfigSnapshot` here and resolves any identity
with `tempoconf.resolution.resolve`, which is the server's own resolution.

The body is canonical JSON (tempoconf.canonical) and its ETag a digest of those bytes, so anyone
who holds the same bundle computes the same ETag: an edge that re-serves a parsed bundle answers
the origin's ETag, byte for byte the origin's body.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tempoconf.canonical import canonical_json
from tempoconf.paths import namespace_problem, path_problem
from tempoconf.resolution import ConfigSnapshot, PublishedStage, VersionRecord

__all__ = [
    "BUNDLES_PREFIX",
    "BundleError",
    "bundle_body",
    "bundle_etag",
    "bundle_from_snapshot",
    "parse_bundle_body",
    "snapshot_from_bundle",
]

BUNDLES_PREFIX = "/v1/bundles/"
"""Where the API serves bundles: this, then the config path."""
_ETAG_HEX = 32
"""128 bits of SHA-256: two bundles with one ETag cannot be crafted."""


class BundleError(ValueError):
    """A bundle that is not one: names the field that is wrong (e.g. `stages[0].expires_at`)."""


# -- serialising -------------------------------------------------------------------------------


def bundle_from_snapshot(snapshot: ConfigSnapshot) -> dict[str, Any]:
    """The bundle of `snapshot`, as JSON-ready data (stages in evaluation order)."""
    return {
        "namespace": snapshot.namespace,
        "path": snapshot.path,
        "stable": _record(snapshot.stable),
        "staged": _record(snapshot.staged),
        "stages": [_stage(stage) for stage in sorted(snapshot.stages, key=lambda s: s.index)],
    }


def bundle_body(bundle: Mapping[str, Any]) -> bytes:
    """The bytes served: canonical JSON (sorted keys, no whitespace), so equal bundles are equal
    bytes and have one ETag wherever they are serialised."""
    return canonical_json(bundle).encode("utf-8")


def bundle_etag(body: bytes) -> str:
    """The strong ETag of a bundle's body: quoted, the first 128 bits of its SHA-256 in hex."""
    return f'"{hashlib.sha256(body).hexdigest()[:_ETAG_HEX]}"'


def _record(record: VersionRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {"version": record.version, "value": record.value, **record.metadata()}


def _stage(stage: PublishedStage) -> dict[str, Any]:
    return {
        "index": stage.index,
        "name": stage.name,
        "channel": stage.channel,
        # One JSON form per number (10 and 10.0 would be two bodies, two ETags).
        "percentile": float(stage.percentile) if stage.percentile is not None else None,
        "labels": dict(stage.labels),
        "expires_at": stage.expires_at.astimezone(UTC).isoformat(),
        "bucket_key": stage.bucket_key,
    }


# -- parsing -----------------------------------------------------------------------------------


def parse_bundle_body(body: bytes | str) -> ConfigSnapshot:
    """`snapshot_from_bundle` of a body as served; BundleError when it is not JSON either."""
    try:
        data = json.loads(body)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        raise BundleError(f"bundle is not JSON: {exc}") from exc
    return snapshot_from_bundle(data)


def snapshot_from_bundle(data: Any) -> ConfigSnapshot:
    """The `ConfigSnapshot` a bundle describes. Raises BundleError naming the first wrong field.

    Fields this version does not know are ignored: a newer server may add some."""
    bundle = _object(data, "bundle")
    namespace = _string(bundle, "namespace", "namespace")
    problem = namespace_problem(namespace)
    if problem is not None:
        raise BundleError(f"bundle field namespace: {problem}")
    path = _string(bundle, "path", "path")
    problem = path_problem(path)
    if problem is not None:
        raise BundleError(f"bundle field path: {problem}")
    stages_data = _field(bundle, "stages", "stages")
    if not isinstance(stages_data, list):
        raise BundleError(f"bundle field stages: expected a list, got {_kind(stages_data)}")
    stages = tuple(_parse_stage(item, f"stages[{n}]") for n, item in enumerate(stages_data))
    indexes = [stage.index for stage in stages]
    if len(set(indexes)) != len(indexes):
        raise BundleError(f"bundle field stages: two stages share an index ({indexes})")
    return ConfigSnapshot(
        namespace=namespace,
        path=path,
        stable=_parse_record(_field(bundle, "stable", "stable"), "stable"),
        staged=_parse_record(_field(bundle, "staged", "staged"), "staged"),
        stages=stages,
    )


def _parse_record(data: Any, where: str) -> VersionRecord | None:
    if data is None:
        return None
    record = _object(data, where)
    version = _string(record, "version", f"{where}.version")
    if not version:
        raise BundleError(f"bundle field {where}.version: empty")
    return VersionRecord(
        version=version,
        value=_field(record, "value", f"{where}.value"),
        author=_string(record, "author", f"{where}.author"),
        commit=_string(record, "commit", f"{where}.commit"),
        message=_string(record, "message", f"{where}.message"),
        created_at=_timestamp(
            _field(record, "created_at", f"{where}.created_at"),
            f"{where}.created_at",
            nullable=True,
        ),
    )


def _parse_stage(data: Any, where: str) -> PublishedStage:
    stage = _object(data, where)
    index = _field(stage, "index", f"{where}.index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise BundleError(f"bundle field {where}.index: expected an integer from 0, got {index!r}")
    percentile = _field(stage, "percentile", f"{where}.percentile")
    if percentile is not None:
        if (
            not isinstance(percentile, int | float)
            or isinstance(percentile, bool)
            or not math.isfinite(percentile)
            or not 0 <= percentile <= 100
        ):
            raise BundleError(
                f"bundle field {where}.percentile: expected a number from 0 to 100 or null, "
                f"got {percentile!r}"
            )
        percentile = float(percentile)
    labels = _object(_field(stage, "labels", f"{where}.labels"), f"{where}.labels")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise BundleError(
                f"bundle field {where}.labels.{key}: expected a string, got {_kind(value)}"
            )
    expires_at = _timestamp(
        _field(stage, "expires_at", f"{where}.expires_at"), f"{where}.expires_at", nullable=False
    )
    assert expires_at is not None  # nullable=False
    return PublishedStage(
        index=index,
        name=_string(stage, "name", f"{where}.name"),
        channel=_optional_string(stage, "channel", f"{where}.channel"),
        percentile=percentile,
        labels=dict(labels),
        expires_at=expires_at,
        bucket_key=_optional_string(stage, "bucket_key", f"{where}.bucket_key"),
    )


def _field(data: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in data:
        raise BundleError(f"bundle field {where}: missing")
    return data[name]


def _object(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise BundleError(f"bundle field {where}: expected an object, got {_kind(data)}")
    return data


def _string(data: Mapping[str, Any], name: str, where: str) -> str:
    value = _field(data, name, where)
    if not isinstance(value, str):
        raise BundleError(f"bundle field {where}: expected a string, got {_kind(value)}")
    return value


def _optional_string(data: Mapping[str, Any], name: str, where: str) -> str | None:
    value = _field(data, name, where)
    if value is not None and not isinstance(value, str):
        raise BundleError(f"bundle field {where}: expected a string or null, got {_kind(value)}")
    return value


def _timestamp(value: Any, where: str, *, nullable: bool) -> datetime | None:
    if value is None and nullable:
        return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            # A lease is compared with the reader's clock: without an offset it names no instant.
            if parsed.tzinfo is not None or nullable:
                return parsed
    wanted = "an ISO 8601 date-time with a UTC offset" + (" or null" if nullable else "")
    raise BundleError(f"bundle field {where}: expected {wanted}, got {value!r}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
