"""tempoconf.resolution.bundles: a snapshot survives the bundle both ways, byte for byte, and a malformed
bundle is refused naming the field that is wrong."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tempoconf.resolution import ConfigSnapshot, PublishedStage, VersionRecord
from tempoconf.resolution.bundles import (
    BundleError,
    bundle_body,
    bundle_etag,
    bundle_from_snapshot,
    parse_bundle_body,
    snapshot_from_bundle,
)

LEASE = datetime(2026, 12, 1, 6, 30, 0, 123456, tzinfo=UTC)
SNAPSHOT = ConfigSnapshot(
    namespace="default",
    path="payments/limits",
    stable=VersionRecord("aaaa", {"limit": 1}, "alice", "3f2a9c1", "first", LEASE - timedelta(1)),
    staged=VersionRecord("bbbb", [1, "two", None], "bob", "", "", None),
    stages=(
        PublishedStage(1, "10%", None, 10.0, {"zone": "eu"}, LEASE, bucket_key="changeset:x"),
        PublishedStage(0, "channel:canary", "canary", None, {}, LEASE),
    ),
)


def test_a_snapshot_round_trips_and_its_body_and_etag_are_stable() -> None:
    bundle = bundle_from_snapshot(SNAPSHOT)
    body = bundle_body(bundle)

    parsed = parse_bundle_body(body)

    assert [stage["index"] for stage in bundle["stages"]] == [0, 1]
    assert parsed.stable == SNAPSHOT.stable
    assert parsed.staged == SNAPSHOT.staged
    assert sorted(parsed.stages, key=lambda s: s.index) == sorted(
        SNAPSHOT.stages, key=lambda s: s.index
    )
    assert bundle_body(bundle_from_snapshot(parsed)) == body  # an edge re-serves the same bytes
    assert bundle_etag(body) == bundle_etag(bytes(body))
    assert bundle_etag(body) != bundle_etag(body + b" ")
    assert bundle_etag(body).startswith('"') and bundle_etag(body).endswith('"')


def test_an_integer_percentile_is_one_body_with_its_float() -> None:
    as_int = ConfigSnapshot(
        "default", "a/b", None, SNAPSHOT.staged,
        (PublishedStage(0, "10%", None, 10, {}, LEASE),),  # type: ignore[arg-type]
    )  # fmt: skip
    as_float = ConfigSnapshot(
        "default", "a/b", None, SNAPSHOT.staged, (PublishedStage(0, "10%", None, 10.0, {}, LEASE),)
    )

    assert bundle_body(bundle_from_snapshot(as_int)) == bundle_body(bundle_from_snapshot(as_float))


def _with(change: Any) -> dict[str, Any]:
    bundle = copy.deepcopy(bundle_from_snapshot(SNAPSHOT))
    change(bundle)
    return bundle


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b.pop("namespace"), "namespace: missing"),
        (lambda b: b.update(path="Not/Valid"), "path:"),
        (lambda b: b.update(stages={}), "stages: expected a list"),
        (lambda b: b["stable"].pop("version"), "stable.version: missing"),
        (lambda b: b["staged"].update(author=3), "staged.author: expected a string"),
        (lambda b: b["stable"].update(created_at="yesterday"), "stable.created_at"),
        (lambda b: b["stages"][1].update(expires_at="2026-12-01T06:30:00"), "stages[1].expires_at"),
        (lambda b: b["stages"][0].update(index=True), "stages[0].index"),
        (lambda b: b["stages"][1].update(percentile=101), "stages[1].percentile"),
        (lambda b: b["stages"][1].update(labels={"zone": 1}), "stages[1].labels.zone"),
        (lambda b: b["stages"][0].update(channel=[]), "stages[0].channel"),
        (lambda b: b["stages"][1].update(index=0), "stages: two stages share an index"),
        (lambda b: b.update(stable="x"), "stable: expected an object"),
    ],
)
def test_a_malformed_bundle_is_refused_naming_the_field(change: Any, field: str) -> None:
    with pytest.raises(BundleError, match="bundle field " + field.replace("[", r"\[")):
        snapshot_from_bundle(_with(change))


def test_unknown_fields_are_ignored_and_a_body_that_is_not_json_is_refused() -> None:
    newer = _with(lambda b: b.update(served_by="a newer server"))

    assert snapshot_from_bundle(newer).stable == SNAPSHOT.stable
    with pytest.raises(BundleError, match="not JSON"):
        parse_bundle_body(b"{")
    with pytest.raises(BundleError, match="bundle field bundle: expected an object"):
        parse_bundle_body(b"[]")
