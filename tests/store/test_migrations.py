"""Opening the store: migrations, the startup race between processes, SQLite settings, concurrency."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tempoconf.store.engine import head_revision, revisions_in_order
from tempoconf.store.store import Store
from tempoconf.store.tables import metadata
from tests.store.helpers import NS, PATH, migrate_to, put, schema_of

ROOT = Path(__file__).resolve().parents[2]

_OPEN_AT_ONCE = textwrap.dedent(
    """
    import sys, time
    from tempoconf.resolution import VersionRecord
    from tempoconf.store.store import Store
    url, start_at, n = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    time.sleep(max(0.0, start_at - time.time()))  # a start line: every process opens at once
    store = Store(url, migrate=True)
    store.put_version("default", "race/config", VersionRecord("v" + n, int(n)))
    print(store.revision())
    store.close()
    """
)


def test_processes_opening_a_fresh_database_at_once_all_succeed(database_url: str) -> None:
    """The API and the worker start together on an empty database: one migrates, none fails."""
    processes = 6
    start_at = time.time() + 2.0  # after every interpreter has imported everything
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AT_ONCE, database_url, str(start_at), str(n)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(processes)
    ]
    results = [child.communicate(timeout=120) + (child.returncode,) for child in children]
    for _out, err, code in results:
        assert code == 0, err
    store = Store(database_url, migrate=True)
    try:
        assert store.revision() == processes
        assert {info.version for info in store.list_versions(NS, "race/config")} == {
            f"v{n}" for n in range(processes)
        }
    finally:
        store.close()


def test_reopening_keeps_data_and_migration_state(database_url: str) -> None:
    first = Store(database_url, migrate=True)
    version = put(first, {"kept": True})
    first.set_stable(NS, PATH, version, actor="op", reason="", event_key="k")
    first.close()
    second = Store(database_url)
    try:
        stable = second.get_stable(NS, PATH)
        assert stable is not None and stable.value == {"kept": True}
        assert second.revision() == 2
    finally:
        second.close()
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            assert conn.execute(
                text("SELECT version_num FROM alembic_version")
            ).scalars().all() == [head_revision()]
    finally:
        engine.dispose()


def test_migrations_create_exactly_the_tables_the_models_describe(store: Store) -> None:
    engine = create_engine(store.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
            assert set(inspect(conn).get_table_names()) >= {
                "config_schema",
                "config_version",
                "stable",
                "stable_history",
                "rollout",
                "rollout_stage",
                "config_lock",
                "audit_log",
                "store_revision",
                "alembic_version",
                "client_report",
                "client_seen",
                "config_change",
            }
    finally:
        engine.dispose()


def test_sqlite_file_settings(sqlite_url: str) -> None:
    database = Path(make_url(sqlite_url).database or "")
    assert not database.parent.exists()
    store = Store(sqlite_url, migrate=True)
    try:
        assert database.exists(), "the data dir is created when missing"
        with store._engine.connect() as conn:  # white-box: the pragmas every pooled connection gets
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    finally:
        store.close()


def test_in_memory_sqlite_works_for_quick_scripts() -> None:
    with Store("sqlite://", migrate=True) as store:
        version = put(store, 1)
        assert store.get_version(NS, PATH, version) is not None
        assert store.revision() == 1


def test_concurrent_writers_lose_no_update(database_url: str) -> None:
    """Threads (and so processes) writing at once: every bump lands, each event key once."""
    threads, per_thread = 6, 10
    stores = [Store(database_url, migrate=True) for _ in range(2)]
    try:
        version = put(stores[0], 1)
        outcomes: list[bool] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(n: int) -> None:
            store = stores[n % 2]
            try:
                for i in range(per_thread):
                    unique = store.set_stable(
                        NS, PATH, version, actor="t", reason="", event_key=f"t{n}-{i}"
                    )
                    shared = store.set_stable(
                        NS, PATH, version, actor="t", reason="", event_key=f"shared-{i}"
                    )
                    with lock:
                        outcomes.extend([unique, shared])
            except BaseException as error:  # surfaced below, in the test's thread
                errors.append(error)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        assert errors == []
        assert outcomes.count(True) == threads * per_thread + per_thread
        assert stores[1].revision() == 1 + threads * per_thread + per_thread
        assert len(stores[1].history(NS, PATH, limit=10_000)) == threads * per_thread + per_thread
    finally:
        for store in stores:
            store.close()


def test_concurrent_lock_acquisition_has_one_winner(database_url: str) -> None:
    stores = [Store(database_url, migrate=True) for _ in range(3)]
    try:
        version = put(stores[0], 1)
        winners: list[str] = []
        losers: list[str] = []
        barrier = threading.Barrier(6)

        def contend(n: int) -> None:
            barrier.wait()
            try:
                stores[n % 3].acquire_locks(
                    {(NS, PATH): version}, workflow_id=f"w{n}", run_id=f"r{n}"
                )
                winners.append(f"r{n}")
            except Exception as error:  # LockHeldError expected for every loser
                losers.append(type(error).__name__)

        workers = [threading.Thread(target=contend, args=(n,)) for n in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert len(winners) == 1 and losers == ["LockHeldError"] * 5
        lock = stores[2].get_lock(NS, PATH)
        assert lock is not None and lock.run_id == winners[0]
    finally:
        for store in stores:
            store.close()


def test_a_database_at_0001_is_upgraded_keeping_its_data(database_url: str) -> None:
    migrate_to(database_url, "0001_initial")
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE store_revision SET revision = 7 WHERE id = 1"))
    finally:
        engine.dispose()

    store = Store(database_url, migrate=True)
    try:
        assert store.revision() == 7
        store.add_report(NS, PATH, client="host-1", version="v1", ok=1, failed=0)
    finally:
        store.close()


def test_reports_from_before_0004_keep_their_figures_and_have_no_identity(
    database_url: str,
) -> None:
    """0004 adds the identity a report names; reports stored before it named none."""
    migrate_to(database_url, "0003_client_seen")
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO client_report (namespace, path, version, client, ok, failed, received_at) "
                    "VALUES (:ns, :path, 'v1', 'host-1', 9, 1, CURRENT_TIMESTAMP)"
                ),
                {"ns": NS, "path": PATH},
            )
    finally:
        engine.dispose()

    store = Store(database_url, migrate=True)
    try:
        store.add_report(
            NS,
            PATH,
            client="host-2",
            version="v1",
            ok=5,
            failed=0,
            channel="canary",
            labels={"region": "eu"},
        )
        totals = {
            row.client: row
            for row in store.report_totals(NS, PATH, since=datetime(2000, 1, 1, tzinfo=UTC))
        }
    finally:
        store.close()
    assert (totals["host-1"].ok, totals["host-1"].failed) == (9, 1)
    assert (totals["host-1"].channel, totals["host-1"].labels) == (None, None)
    assert (totals["host-2"].channel, totals["host-2"].labels) == ("canary", {"region": "eu"})

    # And back: the downgrade drops the two columns and keeps the reports.
    migrate_to(database_url, "0003_client_seen", down=True)
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            columns = {column["name"] for column in inspect(conn).get_columns("client_report")}
            assert conn.execute(text("SELECT count(*) FROM client_report")).scalar_one() == 2
    finally:
        engine.dispose()
    assert "channel" not in columns and "labels" not in columns


def test_every_migration_only_adds_so_the_previous_version_keeps_serving(
    database_url: str,
) -> None:
    """An upgrade (deploy/upgrade.sh) migrates the store first, then replaces the previous
    version's API replicas and workers, which run on the migrated store until they are stopped.
    So no migration may take away or change what the previous version reads and writes: every
    table and column stays as it was, a column added to a table is nullable or has a default (the
    previous version's inserts do not name it), and no existing table gains a uniqueness rule."""
    revisions = revisions_in_order()
    assert revisions[-1] == head_revision() and len(revisions) >= 7, revisions
    migrate_to(database_url, revisions[0])
    before = schema_of(database_url)
    for revision in revisions[1:]:
        migrate_to(database_url, revision)
        after = schema_of(database_url)
        for table, shape in before.items():
            assert table in after, f"{revision} drops table {table}"
            columns = after[table]["columns"]
            assert isinstance(columns, dict) and isinstance(shape["columns"], dict)
            for column, kept in shape["columns"].items():
                assert columns.get(column) == kept, (
                    f"{revision} changes {table}.{column}: {kept} -> {columns.get(column)}"
                )
            for column, (_type, nullable, has_default) in columns.items():
                if column not in shape["columns"]:
                    assert nullable or has_default, (
                        f"{revision} adds {table}.{column} NOT NULL without a default: the "
                        "previous version's inserts would fail"
                    )
            assert after[table]["unique"] == shape["unique"], (
                f"{revision} changes the uniqueness rules of {table}: "
                f"{shape['unique']} -> {after[table]['unique']}"
            )
        before = after


def test_reports_from_before_0008_carry_no_latency_and_sum_with_newer_ones(
    database_url: str,
) -> None:
    """0008 adds a report's latency figures; reports stored before it (and inserts that do not
    name them, as the previous version's) count 0 timed operations."""
    migrate_to(database_url, "0007_applied_versions")
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO client_report (namespace, path, version, client, ok, failed, received_at) "
                    "VALUES (:ns, :path, 'v1', 'host-1', 9, 1, CURRENT_TIMESTAMP)"
                ),
                {"ns": NS, "path": PATH},
            )
    finally:
        engine.dispose()

    store = Store(database_url, migrate=True)
    try:
        store.add_report(
            NS, PATH, client="host-1", version="v1", ok=5, failed=0,
            latency_count=5, latency_sum_ms=62.5,
        )  # fmt: skip
        [totals] = store.report_totals(NS, PATH, since=datetime(2000, 1, 1, tzinfo=UTC))
    finally:
        store.close()
    assert (totals.ok, totals.failed, totals.reports) == (14, 1, 2)
    assert (totals.latency_count, totals.latency_sum_ms) == (5, 62.5)

    # And back: the downgrade drops the two columns and keeps the reports.
    migrate_to(database_url, "0007_applied_versions", down=True)
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            columns = {column["name"] for column in inspect(conn).get_columns("client_report")}
            assert conn.execute(text("SELECT count(*) FROM client_report")).scalar_one() == 2
    finally:
        engine.dispose()
    assert "latency_count" not in columns and "latency_sum_ms" not in columns
    assert {"ok", "failed", "channel", "labels"} <= columns


def test_a_store_from_before_0009_logs_the_changes_after_its_revision(database_url: str) -> None:
    """0009 adds the change log; it starts empty, at the revision the store is at, so a reader
    holding an older revision is told to load everything."""
    migrate_to(database_url, "0008_report_latency")
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE store_revision SET revision = 7 WHERE id = 1"))
    finally:
        engine.dispose()

    store = Store(database_url, migrate=True)
    try:
        assert store.revision() == 7
        assert store.load_snapshots_since(6) is None
        unchanged = store.load_snapshots_since(7)
        assert unchanged is not None and dict(unchanged.changed) == {}
        put(store, 1)
        delta = store.load_snapshots_since(7)
        assert delta is not None and (delta.revision, set(delta.changed)) == (8, {(NS, PATH)})
    finally:
        store.close()

    # And back: the downgrade drops the log and its floor, and keeps the revision.
    migrate_to(database_url, "0008_report_latency", down=True)
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            columns = {column["name"] for column in inspect(conn).get_columns("store_revision")}
            revision = conn.execute(text("SELECT revision FROM store_revision")).scalar_one()
    finally:
        engine.dispose()
    assert "config_change" not in tables and "change_floor" not in columns
    assert revision == 8
