"""Clients seen polling: record_seen_clients (batch upsert, last_seen only moves forward),
recent_clients (since filter, union with clients that only reported), prune_seen_clients."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tempoconf.store import SeenClient
from tempoconf.store.store import Store
from tests.store.helpers import NS, PATH

V1 = "aaaaaaaaaaaaaaaa"
V2 = "bbbbbbbbbbbbbbbb"


def seen(
    client: str,
    at: datetime,
    *,
    channel: str | None = None,
    version: str | None = V1,
    **labels: str,
) -> SeenClient:
    return SeenClient(
        client=client, channel=channel, labels=labels, last_seen=at, last_version=version
    )


def test_record_and_read_back_a_batch(store: Store) -> None:
    now = datetime.now(UTC)
    batch = [
        seen("host-2", now, zone="eu", tier="web"),
        seen("host-1", now, channel="canary"),
        seen("host-3", now - timedelta(seconds=5), version=None),
    ]
    before = store.revision()

    store.record_seen_clients(NS, PATH, batch)

    assert store.recent_clients(NS, PATH, since=now - timedelta(minutes=1)) == sorted(
        batch, key=lambda c: c.client
    )
    assert store.revision() == before, "not a client-visible change"
    store.record_seen_clients(NS, PATH, [])  # nothing to do is fine


def test_upsert_updates_the_identity_and_last_seen_only_moves_forward(store: Store) -> None:
    now = datetime.now(UTC)
    store.record_seen_clients(NS, PATH, [seen("host-1", now - timedelta(seconds=10), zone="a")])
    store.record_seen_clients(
        NS, PATH, [seen("host-1", now, channel="canary", version=V2, zone="b")]
    )
    # Older news (a late flush from another API process) changes nothing.
    store.record_seen_clients(NS, PATH, [seen("host-1", now - timedelta(seconds=5), zone="old")])
    # A sighting without a version keeps the version known.
    later = now + timedelta(seconds=1)
    store.record_seen_clients(
        NS, PATH, [seen("host-1", later, channel="canary", version=None, zone="b")]
    )

    assert store.recent_clients(NS, PATH, since=now - timedelta(minutes=1)) == [
        seen("host-1", later, channel="canary", version=V2, zone="b")
    ]


def test_one_batch_may_name_a_client_twice_the_newest_wins(store: Store) -> None:
    now = datetime.now(UTC)
    store.record_seen_clients(
        NS,
        PATH,
        [
            seen("host-1", now, zone="new"),
            seen("host-1", now - timedelta(seconds=3), zone="old"),
        ],
    )

    assert store.recent_clients(NS, PATH, since=now - timedelta(minutes=1)) == [
        seen("host-1", now, zone="new")
    ]


def test_recent_clients_filters_by_time_and_config(store: Store) -> None:
    now = datetime.now(UTC)
    store.record_seen_clients(
        NS, PATH, [seen("fresh", now), seen("stale", now - timedelta(hours=2))]
    )
    store.record_seen_clients(NS, "other/config", [seen("elsewhere", now)])
    store.record_seen_clients("team", PATH, [seen("other-namespace", now)])

    recent = store.recent_clients(NS, PATH, since=now - timedelta(hours=1))
    everything = store.recent_clients(NS, PATH, since=now - timedelta(hours=3))

    assert [c.client for c in recent] == ["fresh"]
    assert [c.client for c in everything] == ["fresh", "stale"]
    assert store.recent_clients(NS, "unknown/config", since=now - timedelta(hours=3)) == []


def test_recent_clients_include_clients_that_only_reported(store: Store) -> None:
    now = datetime.now(UTC)
    store.record_seen_clients(
        NS, PATH, [seen("poller", now - timedelta(seconds=30), channel="canary", zone="eu")]
    )
    # A poller that also reported: listed once, with its polled identity and the later time.
    store.add_report(NS, PATH, client="poller", version=V2, ok=1, failed=0, received_at=now)
    # Report-only clients: their newest report gives the time and the version.
    store.add_report(
        NS,
        PATH,
        client="reporter",
        version=V1,
        ok=1,
        failed=0,
        received_at=now - timedelta(seconds=20),
    )
    store.add_report(
        NS,
        PATH,
        client="reporter",
        version=V2,
        ok=1,
        failed=0,
        received_at=now - timedelta(seconds=10),
    )
    store.add_report(
        NS,
        PATH,
        client="reporter",
        version=V1,
        ok=1,
        failed=0,
        received_at=now - timedelta(hours=3),
    )
    # Too old, or about another config: not listed.
    store.add_report(
        NS,
        PATH,
        client="old-reporter",
        version=V1,
        ok=1,
        failed=0,
        received_at=now - timedelta(hours=2),
    )
    store.add_report(NS, "other/config", client="other", version=V1, ok=1, failed=0)
    # A report-only client whose newest report names its identity: listed with it.
    store.add_report(
        NS,
        PATH,
        client="named",
        version=V1,
        ok=1,
        failed=0,
        channel="beta",
        received_at=now - timedelta(seconds=40),
    )
    store.add_report(
        NS,
        PATH,
        client="named",
        version=V2,
        ok=1,
        failed=0,
        channel="canary",
        labels={"zone": "us"},
        received_at=now - timedelta(seconds=5),
    )

    recent = store.recent_clients(NS, PATH, since=now - timedelta(hours=1))

    assert recent == [
        seen("named", now - timedelta(seconds=5), channel="canary", version=V2, zone="us"),
        seen("poller", now, channel="canary", version=V1, zone="eu"),
        seen("reporter", now - timedelta(seconds=10), version=V2),
    ]


def test_prune_seen_clients_deletes_only_older_ones(store: Store) -> None:
    now = datetime.now(UTC)
    store.record_seen_clients(
        NS, PATH, [seen("old", now - timedelta(days=8)), seen("new", now - timedelta(hours=1))]
    )

    assert store.prune_seen_clients(now - timedelta(days=7)) == 1
    assert store.prune_seen_clients(now - timedelta(days=7)) == 0
    assert [c.client for c in store.recent_clients(NS, PATH, since=now - timedelta(days=30))] == [
        "new"
    ]


def test_naive_times_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="naive"):
        store.record_seen_clients(NS, PATH, [seen("host-1", datetime.now())])
    with pytest.raises(ValueError, match="naive"):
        store.recent_clients(NS, PATH, since=datetime.now())
    with pytest.raises(ValueError, match="naive"):
        store.prune_seen_clients(datetime.now())
