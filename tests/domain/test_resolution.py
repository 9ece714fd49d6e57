"""Which version a client gets (docs/explanation/resolution.md, Resolution and Leases)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tempoconf.resolution import (
    STABLE,
    ClientIdentity,
    ConfigSnapshot,
    PublishedStage,
    VersionRecord,
    resolve,
    stage_matches,
)
from tempoconf.resolution.bucketing import bucket

PATH = "myproject/server_config"
NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
EARLIER = NOW - timedelta(seconds=1)

STABLE_RECORD = VersionRecord("aaaaaaaaaaaaaaaa", {"max_connections": 1000}, author="bob")
STAGED_RECORD = VersionRecord("bbbbbbbbbbbbbbbb", {"max_connections": 2000}, author="alice")


def client_with(predicate, prefix: str = "host") -> str:  # type: ignore[no-untyped-def]
    """The first client id whose bucket for PATH satisfies `predicate`."""
    for number in range(100_000):
        client_id = f"{prefix}-{number}"
        if predicate(bucket(PATH, client_id)):
            return client_id
    raise AssertionError("no such client")


IN_10 = client_with(lambda value: value < 1000)
OUT_10 = client_with(lambda value: value >= 1000)
OUT_50 = client_with(lambda value: value >= 5000)
BETWEEN_10_AND_50 = client_with(lambda value: 1000 <= value < 5000)


def stage(index: int, name: str, *, channel=None, percentile=None, labels=None, expires_at=LATER):  # type: ignore[no-untyped-def]
    return PublishedStage(index, name, channel, percentile, labels or {}, expires_at)


CANARY = stage(0, "channel:canary", channel="canary")
TEN = stage(1, "10%", percentile=10)
FIFTY = stage(2, "50%", percentile=50)


def snapshot(
    *stages: PublishedStage, stable: VersionRecord | None = STABLE_RECORD
) -> ConfigSnapshot:
    return ConfigSnapshot("default", PATH, stable, STAGED_RECORD if stages else None, tuple(stages))


def test_chosen_clients_are_where_the_tests_need_them() -> None:
    assert bucket(PATH, IN_10) < 1000 <= bucket(PATH, OUT_10)
    assert 1000 <= bucket(PATH, BETWEEN_10_AND_50) < 5000 <= bucket(PATH, OUT_50)


def test_no_rollout_everyone_gets_stable() -> None:
    resolution = resolve(snapshot(), ClientIdentity(IN_10, channel="canary"), NOW)
    assert resolution is not None
    assert resolution.record == STABLE_RECORD
    assert resolution.stage == STABLE == "stable"
    assert resolution.expires_at is None


def test_cumulative_stages_keep_the_canaries() -> None:
    snap = snapshot(CANARY, TEN)
    # a canary client outside the 10% still gets the staged version, through the canary stage
    canary = resolve(snap, ClientIdentity(OUT_10, channel="canary"), NOW)
    assert canary is not None
    assert (canary.record, canary.stage, canary.expires_at) == (
        STAGED_RECORD,
        "channel:canary",
        LATER,
    )
    # a non-canary client inside the 10% gets it through the 10% stage
    in_ten = resolve(snap, ClientIdentity(IN_10, channel="stable-channel"), NOW)
    assert in_ten is not None
    assert (in_ten.record, in_ten.stage) == (STAGED_RECORD, "10%")
    # a client with no channel inside the 10% as well
    assert resolve(snap, ClientIdentity(IN_10), NOW).stage == "10%"  # type: ignore[union-attr]
    # anyone else stays on stable
    other = resolve(snap, ClientIdentity(OUT_10, channel="prod"), NOW)
    assert other is not None
    assert (other.record, other.stage) == (STABLE_RECORD, STABLE)


def test_first_matching_stage_wins() -> None:
    # a canary client inside the 10% matches both stages: the first one is reported
    resolution = resolve(snapshot(CANARY, TEN), ClientIdentity(IN_10, channel="canary"), NOW)
    assert resolution is not None and resolution.stage == "channel:canary"
    # order comes from the stage index, not from the tuple's order
    resolution = resolve(snapshot(TEN, CANARY), ClientIdentity(IN_10, channel="canary"), NOW)
    assert resolution is not None and resolution.stage == "channel:canary"
    # a wider later stage is not reported for a client the narrower earlier stage already has
    resolution = resolve(snapshot(CANARY, TEN, FIFTY), ClientIdentity(IN_10), NOW)
    assert resolution is not None and resolution.stage == "10%"
    resolution = resolve(snapshot(CANARY, TEN, FIFTY), ClientIdentity(BETWEEN_10_AND_50), NOW)
    assert resolution is not None and resolution.stage == "50%"


def test_first_match_reports_that_stages_lease() -> None:
    early = stage(0, "channel:canary", channel="canary", expires_at=NOW + timedelta(minutes=5))
    resolution = resolve(snapshot(early, TEN), ClientIdentity(IN_10, channel="canary"), NOW)
    assert resolution is not None and resolution.expires_at == NOW + timedelta(minutes=5)


def test_channel_and_percentile_must_both_match() -> None:
    both = stage(0, "channel:beta 10%", channel="beta", percentile=10)
    snap = snapshot(both)
    assert resolve(snap, ClientIdentity(IN_10, channel="beta"), NOW).stage == "channel:beta 10%"  # type: ignore[union-attr]
    assert resolve(snap, ClientIdentity(OUT_10, channel="beta"), NOW).stage == STABLE  # type: ignore[union-attr]
    assert resolve(snap, ClientIdentity(IN_10, channel="prod"), NOW).stage == STABLE  # type: ignore[union-attr]
    assert resolve(snap, ClientIdentity(IN_10), NOW).stage == STABLE  # type: ignore[union-attr]


def test_channel_labels_and_percentile_conjunction() -> None:
    all_three = stage(0, "x", channel="beta", percentile=10, labels={"region": "eu"})
    good = ClientIdentity(IN_10, channel="beta", labels={"region": "eu", "zone": "b"})
    assert stage_matches(all_three, PATH, good)
    assert not stage_matches(all_three, PATH, ClientIdentity(OUT_10, "beta", {"region": "eu"}))
    assert not stage_matches(all_three, PATH, ClientIdentity(IN_10, "alpha", {"region": "eu"}))
    assert not stage_matches(all_three, PATH, ClientIdentity(IN_10, "beta", {"region": "us"}))


def test_labels_must_all_match() -> None:
    eu_b = stage(0, "labels:region=eu,zone=b", labels={"region": "eu", "zone": "b"})
    assert stage_matches(eu_b, PATH, ClientIdentity("h", labels={"region": "eu", "zone": "b"}))
    assert stage_matches(
        eu_b, PATH, ClientIdentity("h", labels={"region": "eu", "zone": "b", "x": "y"})
    )
    assert not stage_matches(eu_b, PATH, ClientIdentity("h", labels={"region": "eu"}))
    assert not stage_matches(eu_b, PATH, ClientIdentity("h", labels={"region": "eu", "zone": "c"}))
    assert not stage_matches(eu_b, PATH, ClientIdentity("h"))
    resolution = resolve(snapshot(eu_b), ClientIdentity("h", labels={"zone": "b"}), NOW)
    assert resolution is not None and resolution.stage == STABLE


def test_percentile_stage_uses_the_configs_path_for_bucketing() -> None:
    ten = stage(0, "10%", percentile=10)
    assert stage_matches(ten, PATH, ClientIdentity(IN_10))
    other_path = "other/config"
    expected = bucket(other_path, IN_10) < 1000
    assert stage_matches(ten, other_path, ClientIdentity(IN_10)) == expected


def test_percentile_edges() -> None:
    nobody = stage(0, "0%", percentile=0)
    everybody = stage(0, "100%", percentile=100)
    for client in (IN_10, OUT_10, OUT_50):
        assert not stage_matches(nobody, PATH, ClientIdentity(client))
        assert stage_matches(everybody, PATH, ClientIdentity(client))


def test_expired_stage_is_ignored_and_the_client_falls_back_to_stable() -> None:
    expired = stage(0, "channel:canary", channel="canary", expires_at=EARLIER)
    resolution = resolve(snapshot(expired), ClientIdentity(IN_10, channel="canary"), NOW)
    assert resolution is not None
    assert (resolution.record, resolution.stage, resolution.expires_at) == (
        STABLE_RECORD,
        STABLE,
        None,
    )


def test_a_stage_expiring_right_now_is_expired() -> None:
    at_now = stage(0, "channel:canary", channel="canary", expires_at=NOW)
    resolution = resolve(snapshot(at_now), ClientIdentity(IN_10, channel="canary"), NOW)
    assert resolution is not None and resolution.stage == STABLE


def test_expired_first_stage_lets_a_later_live_stage_match() -> None:
    expired = stage(0, "channel:canary", channel="canary", expires_at=EARLIER)
    resolution = resolve(snapshot(expired, TEN), ClientIdentity(IN_10, channel="canary"), NOW)
    assert resolution is not None and resolution.stage == "10%"


def test_no_stable_and_no_match_is_none() -> None:
    snap = snapshot(CANARY, stable=None)
    assert resolve(snap, ClientIdentity(OUT_10, channel="prod"), NOW) is None
    assert resolve(ConfigSnapshot("default", PATH, None), ClientIdentity(IN_10), NOW) is None
    # but a matching client of a first rollout (no stable yet) gets the staged version
    resolution = resolve(snap, ClientIdentity(OUT_10, channel="canary"), NOW)
    assert resolution is not None and resolution.record == STAGED_RECORD


def test_stages_without_a_staged_version_serve_stable() -> None:
    snap = ConfigSnapshot("default", PATH, STABLE_RECORD, None, (CANARY,))
    resolution = resolve(snap, ClientIdentity(IN_10, channel="canary"), NOW)
    assert resolution is not None and resolution.stage == STABLE


@pytest.mark.parametrize("channel", ["Canary", "canary ", ""])
def test_channel_match_is_exact(channel: str) -> None:
    assert not stage_matches(CANARY, PATH, ClientIdentity(IN_10, channel=channel))


def test_version_record_metadata() -> None:
    created = datetime(2025, 1, 1, tzinfo=UTC)
    record = VersionRecord("v", 1, author="a", commit="c", message="m", created_at=created)
    assert record.metadata() == {
        "author": "a",
        "commit": "c",
        "message": "m",
        "created_at": "2025-01-01T00:00:00+00:00",
    }
    assert VersionRecord("v", 1).metadata()["created_at"] is None
