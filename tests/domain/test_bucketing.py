"""The published bucketing function (docs/explanation/resolution.md, Bucketing), pinned by test vectors."""

from __future__ import annotations

import hashlib

import pytest

from tempoconf.resolution.bucketing import BUCKETS, bucket, in_percentile, percentile_threshold


def published_bucket(path: str, client_id: str) -> int:
    """The formula exactly as docs/explanation/resolution.md publishes it, written apart from the code."""
    digest = hashlib.md5(path.encode() + client_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10000


# Literal values computed once from the published formula: a change of the implementation (hash,
# byte order, slice, modulus, concatenation) moves these and fails the test.
VECTORS = [
    ("myproject/server_config", "host-1", 7346),
    ("myproject/server_config", "host-2", 633),
    ("myproject/server_config", "web-01.example.com", 1849),
    ("myproject/server_config", "", 9790),
    ("a", "b", 1180),
    ("payments/limits", "pod-7f9c", 2144),
    ("payments/limits", "host-1", 1948),
    ("x/y.z", "client_ü", 28),
    ("team-a/feature_flags", "10.0.0.1", 3469),
    ("default", "canary-1", 7287),
]

CLIENTS = [f"host-{number:04d}" for number in range(2000)]
PATH = "myproject/server_config"


@pytest.mark.parametrize(("path", "client_id", "expected"), VECTORS)
def test_bucket_matches_the_hard_coded_vectors(path: str, client_id: str, expected: int) -> None:
    assert bucket(path, client_id) == expected


@pytest.mark.parametrize(("path", "client_id", "expected"), VECTORS)
def test_vectors_follow_the_published_formula(path: str, client_id: str, expected: int) -> None:
    assert published_bucket(path, client_id) == expected


def test_bucket_agrees_with_the_formula_over_many_clients() -> None:
    for client in CLIENTS:
        assert bucket(PATH, client) == published_bucket(PATH, client)


def test_bucket_is_the_hash_of_the_plain_concatenation() -> None:
    # the formula hashes path + client_id without a separator, so these two collide by design
    assert bucket("myproject/server_confighost-", "1") == bucket(
        "myproject/server_config", "host-1"
    )


def test_buckets_range_and_depend_on_the_path() -> None:
    assert BUCKETS == 10_000
    buckets = [bucket(PATH, client) for client in CLIENTS]
    assert all(0 <= value < BUCKETS for value in buckets)
    other = [bucket("other/config", client) for client in CLIENTS]
    assert buckets != other  # each config slices the fleet differently
    assert len(set(buckets)) > 1500  # spread, not a constant


@pytest.mark.parametrize(
    ("percentile", "threshold"),
    [
        (0, 0),
        (100, 10000),
        (10, 1000),
        (12.34, 1234),
        (0.01, 1),
        (0.29, 29),
        (99.99, 9999),
        (50.5, 5050),
    ],
)
def test_percentile_threshold_has_two_decimals(percentile: float, threshold: int) -> None:
    assert percentile_threshold(percentile) == threshold


def test_percentile_zero_matches_nobody_and_hundred_everybody() -> None:
    assert not any(in_percentile(PATH, client, 0) for client in CLIENTS)
    assert all(in_percentile(PATH, client, 100) for client in CLIENTS)


def test_membership_is_bucket_below_threshold() -> None:
    for client in CLIENTS[:300]:
        value = published_bucket(PATH, client)
        assert in_percentile(PATH, client, 12.34) == (value < 1234)
        # the boundary: a client is in exactly the percentile just above its bucket
        assert in_percentile(PATH, client, (value + 1) / 100)
        assert not in_percentile(PATH, client, value / 100)


def test_cohorts_only_grow_as_the_percentile_rises() -> None:
    previous: set[str] = set()
    for percentile in [0, 0.01, 0.5, 1, 5, 10, 12.34, 25, 50, 75, 99.99, 100]:
        cohort = {client for client in CLIENTS if in_percentile(PATH, client, percentile)}
        assert previous <= cohort
        previous = cohort
    assert previous == set(CLIENTS)


@pytest.mark.parametrize("percentile", [1, 10, 25, 50, 90])
def test_roughly_p_percent_of_clients_land_in_p(percentile: float) -> None:
    clients = [f"client-{number}" for number in range(10_000)]
    share = sum(in_percentile(PATH, client, percentile) for client in clients) / len(clients) * 100
    assert abs(share - percentile) < max(1.5, percentile * 0.1)


# Changesets (docs/explanation/resolution.md, Bucketing): the key is `changeset:` + the first 16 hex of the
# SHA-256 of the sorted `namespace/path` lines joined by "\n"; buckets use the same md5 formula.
CHANGESET_VECTORS = [
    (
        ["default/myproject/server_config", "default/myproject/feature_flags"],
        "changeset:892a8e2b5fddee28",
        [("host-1", 7052), ("host-2", 9875), ("web-01.example.com", 2050)],
    ),
    (
        ["default/a/x", "default/a/y"],
        "changeset:38e6d067b6e495ee",
        [("host-1", 1961), ("host-2", 100), ("web-01.example.com", 9588)],
    ),
    (
        ["default/a/x", "payments/a/y", "default/b"],
        "changeset:a290b0051ccb9bef",
        [("host-1", 5076), ("host-2", 7639), ("web-01.example.com", 8159)],
    ),
]


def published_changeset_key(configs: list[str]) -> str:
    """The key exactly as docs/explanation/resolution.md publishes it, written independently of the code."""
    return "changeset:" + hashlib.sha256("\n".join(sorted(configs)).encode()).hexdigest()[:16]


@pytest.mark.parametrize(("configs", "key", "buckets"), CHANGESET_VECTORS)
def test_changeset_keys_and_buckets_match_the_vectors(
    configs: list[str], key: str, buckets: list[tuple[str, int]]
) -> None:
    from tempoconf.rollout.changesets import changeset_key, changeset_workflow_id

    pairs = [tuple(config.split("/", 1)) for config in configs]
    assert published_changeset_key(configs) == key
    assert changeset_key(pairs) == key  # type: ignore[arg-type]
    assert changeset_key(reversed(pairs)) == key  # type: ignore[arg-type]  # order does not count
    assert changeset_workflow_id(pairs) == key  # type: ignore[arg-type]
    for client_id, expected in buckets:
        assert bucket(key, client_id) == expected == published_bucket(key, client_id)


def test_a_changeset_stage_buckets_every_config_by_the_changeset_key() -> None:
    from datetime import UTC, datetime

    from tempoconf.resolution import ClientIdentity, PublishedStage, stage_matches

    key = "changeset:38e6d067b6e495ee"
    stage = PublishedStage(0, "50%", None, 50, {}, datetime.now(UTC), bucket_key=key)
    for client in CLIENTS[:300]:
        expected = bucket(key, client) < 5000
        identity = ClientIdentity(client)
        assert stage_matches(stage, "a/x", identity) == expected
        assert stage_matches(stage, "a/y", identity) == expected
