"""The change log: every write that bumps the revision names the configs it changed, and
`load_snapshots_since` reads back exactly those, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tempoconf.activities.prepare import begin_run
from tempoconf.resolution import PublishedStage
from tempoconf.store import change_log
from tempoconf.store.engine import bump_revision
from tempoconf.store.records import StageLease
from tempoconf.store.store import Store
from tempoconf.store.tables import ConfigChange
from tests.store.helpers import NS, PATH, count_rows, put, snapshots_of, stage, start
from tests.store.test_changeset_writes import lock_all, validated

OTHER = "other/config"
"""A config no write of a test touches: it is never in the delta."""

Key = tuple[str, str]


def changed_by(store: Store, write: Callable[[], object]) -> set[Key]:
    """The configs the change log names for what `write` did (it bumps the revision)."""
    before = store.revision()
    write()
    assert store.revision() > before, "the write bumped the revision"
    delta = store.load_snapshots_since(before)
    assert delta is not None and delta.revision == store.revision()
    return set(delta.changed)


@pytest.fixture
def known(store: Store) -> Store:
    """A store with PATH (stable v1, v2 stored) and OTHER (stable)."""
    v1 = put(store, 1)
    put(store, 2)
    store.set_stable(NS, PATH, v1, actor="op", reason="", event_key="s1")
    store.set_stable(NS, OTHER, put(store, "o", path=OTHER), actor="op", reason="", event_key="so")
    return store


def test_a_version_created_logs_its_config(known: Store) -> None:
    assert changed_by(known, lambda: put(known, 3)) == {(NS, PATH)}


def test_a_stable_set_logs_its_config(known: Store) -> None:
    v2 = put(known, 2)
    write = lambda: known.set_stable(NS, PATH, v2, actor="op", reason="", event_key="s2")  # noqa: E731
    assert changed_by(known, write) == {(NS, PATH)}


def test_a_rollout_begun_logs_its_config(known: Store) -> None:
    assert changed_by(known, lambda: start(known, put(known, 2))) == {(NS, PATH)}


def test_a_stage_published_logs_its_config(known: Store) -> None:
    start(known, put(known, 2))
    write = lambda: known.publish_stage(  # noqa: E731
        NS, PATH, run_id="run-1", stage=stage(0, channel="c"), actor="w", event_key="p0"
    )
    assert changed_by(known, write) == {(NS, PATH)}


def test_a_lease_renewed_logs_its_config(known: Store) -> None:
    start(known, put(known, 2))
    known.publish_stage(
        NS, PATH, run_id="run-1", stage=stage(0, channel="c"), actor="w", event_key="p0"
    )
    lease = StageLease(0, known.now() + timedelta(hours=2))
    write = lambda: known.renew_leases(NS, PATH, run_id="run-1", leases=[lease])  # noqa: E731
    assert changed_by(known, write) == {(NS, PATH)}


def test_a_promotion_logs_its_config(known: Store) -> None:
    v2 = put(known, 2)
    start(known, v2)
    write = lambda: known.promote(  # noqa: E731
        NS, PATH, run_id="run-1", workflow_id="w", version=v2, actor="w", reason="", event_key="pr"
    )
    assert changed_by(known, write) == {(NS, PATH)}


def test_a_revert_logs_its_config(known: Store) -> None:
    start(known, put(known, 2))
    write = lambda: known.revert(  # noqa: E731
        NS, PATH, run_id="run-1", workflow_id="w", actor="w", reason="", outcome="reverted",
        event_key="rv",
    )  # fmt: skip
    assert changed_by(known, write) == {(NS, PATH)}


def test_a_schema_set_changes_no_snapshot_and_logs_nothing(known: Store) -> None:
    before = known.revision()
    known.set_schema(NS, PATH, {"type": "integer"}, actor="op")
    delta = known.load_snapshots_since(before)
    assert delta is not None and (delta.revision, dict(delta.changed)) == (before, {})


def test_each_step_of_a_changeset_logs_every_config_it_writes(store: Store) -> None:
    paths = ["cs/a", "cs/b"]
    for path in [*paths, OTHER]:
        store.set_stable(NS, path, put(store, 1, path=path), actor="o", reason="", event_key=path)
    check = validated(paths)
    lock_all(store, check)
    every = {(NS, path) for path in paths}
    assert (
        changed_by(
            store,
            lambda: begin_run(
                store, check, workflow_id="cs", run_id="run-cs", actor="t", details={}
            ),
        )
        == every
    )
    published = PublishedStage(
        0, "50%", None, 50, {}, datetime.now(UTC) + timedelta(hours=1), bucket_key="changeset:k"
    )
    assert (
        changed_by(
            store,
            lambda: store.publish_stage(
                NS, paths[0], run_id="run-cs", stage=published, actor="w", event_key="cs:p0"
            ),
        )
        == every
    )
    lease = StageLease(0, store.now() + timedelta(hours=2))
    assert (
        changed_by(store, lambda: store.renew_leases(NS, paths[0], run_id="run-cs", leases=[lease]))
        == every
    )
    version = check.configs()[0].version
    assert changed_by(
        store,
        lambda: store.promote(
            NS, paths[0], run_id="run-cs", workflow_id="cs", version=version, actor="w",
            reason="", event_key="cs:promote",
        ),
    ) == every  # fmt: skip


def test_load_snapshots_since_reads_exactly_the_changed_configs(store: Store) -> None:
    for n in range(5):
        store.set_stable(
            NS, f"c{n}", put(store, n, path=f"c{n}"), actor="o", reason="", event_key=f"k{n}"
        )
    since = store.revision()
    start(store, put(store, "new", path="c1"), path="c1")
    store.set_stable(
        NS, "c3", put(store, "three", path="c3"), actor="o", reason="", event_key="k3b"
    )
    put(store, "fresh", path="c9")  # a config known from its first version on

    delta = store.load_snapshots_since(since)

    assert delta is not None and delta.revision == store.revision()
    everything = snapshots_of(store)
    assert dict(delta.changed) == {
        key: everything[key] for key in [(NS, "c1"), (NS, "c3"), (NS, "c9")]
    }
    unchanged = store.load_snapshots_since(store.revision())
    assert unchanged is not None and dict(unchanged.changed) == {}


def test_many_changed_configs_are_read_in_chunks(store: Store) -> None:
    """More configs than one `IN (...)` names: each is read, none twice, none missing."""
    since = store.revision()
    with store.atomically():
        for n in range(1234):
            put(store, n, path=f"bulk/{n}")
    delta = store.load_snapshots_since(since)
    assert delta is not None and len(delta.changed) == 1234
    assert dict(delta.changed) == snapshots_of(store)


def test_a_revision_ahead_of_the_store_or_unlogged_gets_no_delta(store: Store) -> None:
    put(store, 1)
    assert store.load_snapshots_since(store.revision() + 1) is None  # another (or a reset) store
    # A writer of a tempoconf from before the log (still running during an upgrade) bumps the
    # revision without naming a config: the log cannot say what changed.
    since = store.revision()
    engine = create_engine(store.url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE store_revision SET revision = revision + 1 WHERE id = 1"))
    finally:
        engine.dispose()
    put(store, 2)
    assert store.load_snapshots_since(since) is None
    assert store.load_snapshots_since(store.revision() - 1) is not None  # after the gap


def test_a_bump_that_names_no_config_is_refused(store: Store) -> None:
    with store._write() as conn, pytest.raises(ValueError, match="namespace, path"):  # white-box
        bump_revision(conn, [])
    assert store.revision() == 0


def test_the_log_keeps_its_window_and_says_when_a_revision_fell_out(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_log, "CHANGE_LOG_RETENTION", 10)
    monkeypatch.setattr(change_log, "CHANGE_LOG_PRUNE_EVERY", 5)
    for n in range(1, 31):
        put(store, n, path=f"c{n % 3}")
    assert store.revision() == 30
    # Pruned at 30: the rows of revisions 1..20 are gone, and so is a delta from before 20.
    assert count_rows(store, ConfigChange) == 10
    assert store.load_snapshots_since(19) is None
    delta = store.load_snapshots_since(20)
    assert delta is not None and set(delta.changed) == {(NS, f"c{n}") for n in range(3)}
    for n in range(31, 35):  # not a multiple of 5: no pruning, the window grows until the next
        put(store, n, path="c0")
    assert count_rows(store, ConfigChange) == 14
    assert store.load_snapshots_since(19) is None and store.load_snapshots_since(20) is not None
