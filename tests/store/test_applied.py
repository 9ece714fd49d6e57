"""Applied versions per client: record_applied (success, failure keeping the last success, a
success then a failure in one batch, only moving forward), applied_states, prune_applied; on
SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tempoconf.store import AppliedReport
from tempoconf.store.store import Store
from tests.store.helpers import NS, PATH

V1 = "aaaaaaaaaaaaaaaa"
V2 = "bbbbbbbbbbbbbbbb"


def test_success_then_failure_keeps_the_last_applied_version(store: Store) -> None:
    now = datetime.now(UTC)
    before = store.revision()
    store.record_applied(
        NS,
        PATH,
        [
            AppliedReport("host-1", V1, now - timedelta(seconds=30), channel="canary"),
            AppliedReport("host-2", V1, now - timedelta(seconds=30), labels={"zone": "eu"}),
        ],
    )
    store.record_applied(
        NS, PATH, [AppliedReport("host-1", V2, now, error="reload: exit 3", channel="canary")]
    )

    states = store.applied_states(NS, PATH)
    assert [state.client for state in states] == ["host-1", "host-2"]
    failed, fine = states
    assert (failed.version, failed.error, failed.error_version) == (V1, "reload: exit 3", V2)
    assert failed.applied_at is not None and failed.reported_at > failed.applied_at
    assert (fine.version, fine.error, fine.labels, fine.channel) == (V1, None, {"zone": "eu"}, None)
    assert store.revision() == before  # not a client-visible change

    # A later success clears the error; an older report changes nothing.
    store.record_applied(NS, PATH, [AppliedReport("host-1", V2, now + timedelta(seconds=1))])
    store.record_applied(NS, PATH, [AppliedReport("host-1", V1, now - timedelta(minutes=5))])
    (state,) = store.applied_states(NS, PATH, since=now)
    assert (state.client, state.version, state.error, state.error_version) == (
        "host-1",
        V2,
        None,
        None,
    )


def test_a_success_and_a_failure_in_one_batch(store: Store) -> None:
    now = datetime.now(UTC)
    store.record_applied(
        NS,
        PATH,
        [
            AppliedReport("host-1", V2, now, error="exit 1"),
            AppliedReport("host-1", V1, now - timedelta(seconds=1)),
            AppliedReport("host-2", V2, now, error="exit 2"),
        ],
    )
    first, second = store.applied_states(NS, PATH)
    assert (first.version, first.error, first.error_version) == (V1, "exit 1", V2)
    assert (second.version, second.applied_at, second.error) == (None, None, "exit 2")


def test_prune_forgets_clients_that_stopped_reporting(store: Store) -> None:
    now = datetime.now(UTC)
    store.record_applied(
        NS,
        PATH,
        [
            AppliedReport("old", V1, now - timedelta(days=8)),
            AppliedReport("new", V1, now),
        ],
    )
    assert store.prune_applied(now - timedelta(days=7)) == 1
    assert [state.client for state in store.applied_states(NS, PATH)] == ["new"]


def test_migration_0005_adds_and_drops_the_table(database_url: str) -> None:
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.pool import NullPool

    from tests.store.helpers import migrate_to

    def tables() -> set[str]:
        engine = create_engine(database_url, poolclass=NullPool)
        try:
            return set(inspect(engine).get_table_names())
        finally:
            engine.dispose()

    migrate_to(database_url, "0004_report_identity")
    assert "client_applied" not in tables()
    migrate_to(database_url, "0007_applied_versions")
    assert "client_applied" in tables()
    migrate_to(database_url, "0004_report_identity", down=True)
    assert "client_applied" not in tables() and "client_seen" in tables()
