"""Client health reports: add_report, report_totals (summed per version and baseline as the
health checks read them), prune_reports; and the PostgreSQL change notification sent with every revision bump."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tempoconf.store.records import ReportTotals, SeenClient
from tempoconf.store.store import CHANGE_CHANNEL, Store
from tests.store.helpers import NS, PATH, ReportSums, last_report_error, put, report_sums

NEW = "aaaaaaaaaaaaaaaa"
OLD = "bbbbbbbbbbbbbbbb"


def test_reports_of_a_version(store: Store) -> None:
    now = datetime.now(UTC)
    store.add_report(
        NS,
        PATH,
        client="host-1",
        version=NEW,
        ok=90,
        failed=10,
        error="boom 1",
        received_at=now - timedelta(seconds=30),
    )
    store.add_report(
        NS,
        PATH,
        client="host-1",
        version=NEW,
        ok=50,
        failed=0,
        received_at=now - timedelta(seconds=20),
    )
    store.add_report(
        NS,
        PATH,
        client="host-2",
        version=NEW,
        ok=40,
        failed=10,
        error="boom 2",
        received_at=now - timedelta(seconds=10),
    )
    store.add_report(NS, PATH, client="host-3", version=NEW, ok=0, failed=0, error="")
    # Other versions, other configs, other namespaces, and an old report: not counted.
    store.add_report(NS, PATH, client="host-9", version=OLD, ok=1, failed=99, error="old")
    store.add_report(NS, "other/config", client="host-1", version=NEW, ok=1, failed=1)
    store.add_report("team", PATH, client="host-1", version=NEW, ok=1, failed=1)
    store.add_report(
        NS,
        PATH,
        client="host-8",
        version=NEW,
        ok=0,
        failed=1000,
        received_at=now - timedelta(hours=2),
    )

    stats = report_sums(store, NS, PATH, NEW, since=now - timedelta(minutes=5))

    assert stats == ReportSums(clients=3, ok=180, failed=20, reports=4)
    assert last_report_error(store, NS, PATH, NEW) == "boom 2"


def test_the_baseline_excludes_the_version(store: Store) -> None:
    since = datetime.now(UTC) - timedelta(minutes=1)
    store.add_report(NS, PATH, client="canary-1", version=NEW, ok=1, failed=9, error="new bug")
    store.add_report(NS, PATH, client="host-1", version=OLD, ok=99, failed=1, error="old flake")
    store.add_report(NS, PATH, client="host-2", version="cccccccccccccccc", ok=100, failed=0)

    baseline = report_sums(store, NS, PATH, NEW, since=since, exclude_version=True)

    assert baseline == ReportSums(clients=2, ok=199, failed=1, reports=2)


def test_reports_without_reports_or_operations(store: Store) -> None:
    since = datetime.now(UTC) - timedelta(minutes=1)
    empty = report_sums(store, NS, PATH, NEW, since=since)
    store.add_report(NS, PATH, client="host-1", version=NEW, ok=0, failed=0)
    idle = report_sums(store, NS, PATH, NEW, since=since)

    assert empty == ReportSums(clients=0, ok=0, failed=0, reports=0)
    assert idle == ReportSums(clients=1, ok=0, failed=0, reports=1)
    assert last_report_error(store, NS, PATH) is None


def test_report_totals_per_client_version_and_identity(store: Store) -> None:
    now = datetime.now(UTC)
    since = now - timedelta(minutes=1)
    store.record_seen_clients(NS, PATH, [SeenClient("poller", "canary", {"zone": "eu"}, now)])
    store.add_report(
        NS,
        PATH,
        client="canary-1",
        version=NEW,
        ok=90,
        failed=10,
        channel="canary",
        received_at=since,
    )  # at `since` exactly: counted
    store.add_report(NS, PATH, client="canary-1", version=NEW, ok=10, failed=0, channel="canary")
    store.add_report(NS, PATH, client="canary-1", version=OLD, ok=5, failed=0, channel="canary")
    store.add_report(
        NS, PATH, client="labelled", version=NEW, ok=3, failed=0, labels={"zone": "eu"}
    )
    store.add_report(NS, PATH, client="poller", version=NEW, ok=7, failed=1)  # names no identity
    # Before `since`, another config, another namespace: not counted.
    store.add_report(
        NS,
        PATH,
        client="canary-1",
        version=NEW,
        ok=0,
        failed=500,
        channel="canary",
        received_at=since - timedelta(milliseconds=1),
    )
    store.add_report(NS, "other/config", client="canary-1", version=NEW, ok=1, failed=1)
    store.add_report("team", PATH, client="canary-1", version=NEW, ok=1, failed=1)

    totals = store.report_totals(NS, PATH, since=since)

    assert sorted(totals, key=lambda row: (row.client, row.version)) == [
        ReportTotals("canary-1", NEW, ok=100, failed=10, reports=2, channel="canary", labels={}),
        ReportTotals("canary-1", OLD, ok=5, failed=0, reports=1, channel="canary", labels={}),
        ReportTotals(
            "labelled", NEW, ok=3, failed=0, reports=1, channel=None, labels={"zone": "eu"}
        ),
        ReportTotals(
            "poller",
            NEW,
            ok=7,
            failed=1,
            reports=1,
            channel=None,
            labels=None,
            seen_channel="canary",
            seen_labels={"zone": "eu"},
        ),
    ]
    assert store.report_totals(NS, PATH, since=now + timedelta(minutes=1)) == []


def test_report_totals_sum_the_latency_per_client_and_version(store: Store) -> None:
    since = datetime.now(UTC) - timedelta(minutes=1)
    store.add_report(
        NS, PATH, client="host-1", version=NEW, ok=10, failed=0,
        latency_count=10, latency_sum_ms=125.5,
    )  # fmt: skip
    store.add_report(
        NS, PATH, client="host-1", version=NEW, ok=4, failed=1,
        latency_count=5, latency_sum_ms=0.25,
    )  # fmt: skip
    store.add_report(NS, PATH, client="host-1", version=NEW, ok=3, failed=0)  # timed nothing
    store.add_report(
        NS, PATH, client="host-1", version=OLD, ok=1, failed=0,
        latency_count=1, latency_sum_ms=9.0,
    )  # fmt: skip
    # latency only: stored and summed as any other report
    store.add_report(
        NS, PATH, client="host-2", version=NEW, ok=0, failed=0,
        latency_count=2, latency_sum_ms=3.5,
    )  # fmt: skip
    store.add_report(NS, PATH, client="host-3", version=NEW, ok=1, failed=0)
    # before `since`: not counted
    store.add_report(
        NS, PATH, client="host-1", version=NEW, ok=1, failed=0,
        latency_count=1, latency_sum_ms=1000.0, received_at=since - timedelta(seconds=1),
    )  # fmt: skip

    latency = {
        (row.client, row.version): (row.latency_count, row.latency_sum_ms, row.reports)
        for row in store.report_totals(NS, PATH, since=since)
    }

    assert latency == {
        ("host-1", NEW): (15, 125.75, 3),
        ("host-1", OLD): (1, 9.0, 1),
        ("host-2", NEW): (2, 3.5, 1),
        ("host-3", NEW): (0, 0.0, 1),
    }
    assert all(
        isinstance(row.latency_sum_ms, float) for row in store.report_totals(NS, PATH, since=since)
    )


def test_bad_latency_figures_are_refused_and_not_stored(store: Store) -> None:
    since = datetime.now(UTC) - timedelta(minutes=1)
    for count, sum_ms, words in (
        (-1, 0.0, "latency_count must be an int >= 0"),
        (1.5, 1.0, "latency_count must be an int >= 0"),
        (True, 1.0, "latency_count must be an int >= 0"),
        (1, -0.5, "latency_sum_ms must be a finite number >= 0"),
        (1, float("nan"), "latency_sum_ms must be a finite number >= 0"),
        (1, float("inf"), "latency_sum_ms must be a finite number >= 0"),
        (0, 2.0, "latency_sum_ms=2.0 with latency_count=0"),
    ):
        with pytest.raises(ValueError, match=words):
            store.add_report(
                NS, PATH, client="host-1", version=NEW, ok=1, failed=0,
                latency_count=count, latency_sum_ms=sum_ms,  # type: ignore[arg-type]
            )  # fmt: skip
    assert store.report_totals(NS, PATH, since=since) == []


def test_reports_do_not_bump_the_revision(store: Store) -> None:
    before = store.revision()
    store.add_report(NS, PATH, client="host-1", version=NEW, ok=1, failed=0)
    assert store.revision() == before


def test_bad_reports_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="negative"):
        store.add_report(NS, PATH, client="host-1", version=NEW, ok=-1, failed=0)
    with pytest.raises(ValueError, match="naive"):
        store.report_totals(NS, PATH, since=datetime.now())


def test_prune_reports_deletes_only_older_ones(store: Store) -> None:
    now = datetime.now(UTC)
    store.add_report(
        NS, PATH, client="old", version=NEW, ok=1, failed=0, received_at=now - timedelta(days=8)
    )
    store.add_report(
        NS, PATH, client="new", version=NEW, ok=1, failed=0, received_at=now - timedelta(hours=1)
    )

    assert store.prune_reports(now - timedelta(days=7)) == 1
    assert store.prune_reports(now - timedelta(days=7)) == 0
    stats = report_sums(store, NS, PATH, NEW, since=now - timedelta(days=30))
    assert (stats.clients, stats.reports) == (1, 1)


def test_listen_conninfo_is_postgresql_only(store: Store) -> None:
    conninfo = store.listen_conninfo()
    if store.dialect == "sqlite":
        assert conninfo is None
        return
    assert conninfo is not None and conninfo.startswith("postgresql://")
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_every_revision_bump_notifies_listeners_at_commit(postgresql_url: str) -> None:
    store = Store(postgresql_url, migrate=True)
    try:
        conninfo = store.listen_conninfo()
        assert conninfo is not None
        with psycopg.connect(conninfo, autocommit=True) as listener:
            listener.execute(f"LISTEN {CHANGE_CHANNEL}")
            put(store, {"v": 1})
            store.add_report(NS, PATH, client="host-1", version=NEW, ok=1, failed=0)  # no bump
            put(store, {"v": 2})

            payloads: list[str] = []
            deadline = time.monotonic() + 10
            while len(payloads) < 2 and time.monotonic() < deadline:
                for notify in listener.notifies(timeout=1, stop_after=2 - len(payloads)):
                    assert notify.channel == CHANGE_CHANNEL
                    payloads.append(notify.payload)

            assert payloads == [str(store.revision() - 1), str(store.revision())]
    finally:
        store.close()
