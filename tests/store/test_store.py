"""The Store against real SQLite and PostgreSQL: every method, idempotency, locks, revision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from tempoconf.resolution import VersionRecord
from tempoconf.store.records import StageLease
from tempoconf.store.store import (
    LockError,
    LockHeldError,
    LockLostError,
    Store,
    UnknownVersionError,
)
from tempoconf.store.tables import ConfigLock, Rollout, RolloutStage, StableHistory
from tests.store.helpers import (
    NS,
    PATH,
    count_rows,
    put,
    snapshot_of,
    snapshots_of,
    stage,
    start,
)


def _is_utc(value: datetime) -> bool:
    return value.tzinfo is not None and value.utcoffset() == timedelta(0)


def _actions(store: Store, namespace: str = NS, path: str = PATH) -> list[str]:
    return [entry.action for entry in store.history(namespace, path)]


# -- revision and schemas ---------------------------------------------------------------------------


def test_fresh_store_has_revision_zero_and_no_configs(store: Store) -> None:
    assert store.revision() == 0
    assert snapshots_of(store) == {}
    assert snapshot_of(store, NS, PATH) is None
    assert store.get_stable(NS, PATH) is None
    assert store.get_rollout(NS, PATH) is None
    assert store.get_lock(NS, PATH) is None
    assert store.list_versions(NS, PATH) == []
    assert store.history(NS, PATH) == []


def test_schema_set_replace_get_and_audit(store: Store) -> None:
    assert store.get_schema(NS, PATH) is None
    schema = {"type": "object", "properties": {"max_connections": {"type": "integer"}}}
    store.set_schema(NS, PATH, schema, actor="alice", reason="first")
    assert store.get_schema(NS, PATH) == schema
    store.set_schema(NS, PATH, {"type": "object"}, actor="bob")
    assert store.get_schema(NS, PATH) == {"type": "object"}
    assert store.get_schema("other", PATH) is None
    entries = store.history(NS, PATH)
    assert [(e.action, e.actor, e.reason) for e in entries] == [
        ("schema.set", "alice", "first"),
        ("schema.set", "bob", ""),
    ]
    assert store.revision() == 0, "a schema changes nothing a client resolves to"


# -- versions -----------------------------------------------------------------------------------------


def test_put_version_is_immutable_and_round_trips(store: Store) -> None:
    created = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    record = VersionRecord(
        "v1",
        {"b": [1, 2.5, None], "a": "ü"},
        author="alice",
        commit="3f2a9c1",
        message="raise",
        created_at=created,
    )
    assert store.put_version(NS, PATH, record) is True
    assert (
        store.put_version(NS, PATH, VersionRecord("v1", {"other": True}, author="mallory")) is False
    )
    assert store.get_version(NS, PATH, "v1") == record
    assert store.get_version(NS, PATH, "nope") is None
    assert store.get_version("elsewhere", PATH, "v1") is None


def test_put_version_stamps_created_at_and_normalises_to_utc(store: Store) -> None:
    before = store.now()
    store.put_version(NS, PATH, VersionRecord("v1", 1))
    stamped = store.get_version(NS, PATH, "v1")
    assert stamped is not None and stamped.created_at is not None
    assert _is_utc(stamped.created_at) and before <= stamped.created_at <= store.now()

    plus_two = datetime(2024, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    store.put_version(NS, PATH, VersionRecord("v2", 2, created_at=plus_two))
    shifted = store.get_version(NS, PATH, "v2")
    assert shifted is not None and shifted.created_at == plus_two
    assert shifted.created_at.tzinfo == UTC and shifted.created_at.hour == 10


def test_naive_datetimes_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        store.put_version(NS, PATH, VersionRecord("v1", 1, created_at=datetime(2024, 1, 1)))
    assert store.get_version(NS, PATH, "v1") is None


def test_list_versions_newest_first_with_stable_times(store: Store) -> None:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    for i, version in enumerate(["v1", "v2", "v3"]):
        store.put_version(
            NS, PATH, VersionRecord(version, i, author=f"a{i}", created_at=t0 + timedelta(days=i))
        )
    store.set_stable(NS, PATH, "v1", actor="op", reason="", event_key="s1")
    store.set_stable(NS, PATH, "v2", actor="op", reason="", event_key="s2")
    store.set_stable(NS, PATH, "v1", actor="op", reason="rollback", event_key="s3")
    infos = store.list_versions(NS, PATH)
    assert [info.version for info in infos] == ["v3", "v2", "v1"]
    by_version = {info.version: info for info in infos}
    assert [info.is_stable for info in infos] == [False, False, True]
    assert len(by_version["v1"].stable_since) == 2
    assert len(by_version["v2"].stable_since) == 1
    assert by_version["v3"].stable_since == []
    assert (
        by_version["v1"].stable_since[0]
        < by_version["v2"].stable_since[0]
        < by_version["v1"].stable_since[1]
    )
    assert by_version["v2"].author == "a1"
    assert all(_is_utc(t) for info in infos for t in [info.created_at, *info.stable_since])


# -- stable -------------------------------------------------------------------------------------------


def test_set_stable_is_idempotent_by_event_key(store: Store) -> None:
    version = put(store, {"max_connections": 2000})
    revision = store.revision()
    assert (
        store.set_stable(
            NS, PATH, version, actor="alice", reason="initial", event_key="k1", workflow_id="wf"
        )
        is True
    )
    assert (
        store.set_stable(
            NS, PATH, version, actor="alice", reason="initial", event_key="k1", workflow_id="wf"
        )
        is False
    )
    assert store.revision() == revision + 1
    assert _actions(store) == ["stable.set"]
    assert count_rows(store, StableHistory) == 1
    entry = store.history(NS, PATH)[0]
    assert (entry.version, entry.workflow_id, entry.reason) == (version, "wf", "initial")
    stable = store.get_stable(NS, PATH)
    assert (
        stable is not None
        and stable.version == version
        and stable.value == {"max_connections": 2000}
    )


def test_set_stable_of_unknown_version_writes_nothing(store: Store) -> None:
    put(store, 1)
    revision = store.revision()
    with pytest.raises(UnknownVersionError):
        store.set_stable(NS, PATH, "0000000000000000", actor="op", reason="", event_key="k")
    assert store.revision() == revision
    assert store.history(NS, PATH) == []
    assert store.get_stable(NS, PATH) is None
    # The failed call consumed nothing: the key still works for a valid call.
    assert store.set_stable(NS, PATH, put(store, 1), actor="op", reason="", event_key="k") is True


# -- lock ---------------------------------------------------------------------------------------------


def test_acquire_lock_when_free_and_again_by_the_same_run(store: Store) -> None:
    version = put(store, 1)
    (lock,) = store.acquire_locks(
        {(NS, PATH): version}, workflow_id="rollout:default/x", run_id="r1"
    )
    assert (lock.workflow_id, lock.run_id, lock.version) == ("rollout:default/x", "r1", version)
    assert _is_utc(lock.acquired_at)
    again = store.acquire_locks(
        {(NS, PATH): version}, workflow_id="rollout:default/x", run_id="r1"
    )[0]
    assert again == lock
    assert store.get_lock(NS, PATH) == lock
    other = store.acquire_locks({(NS, "another/config"): version}, workflow_id="w2", run_id="r2")[0]
    assert other.run_id == "r2"


def test_lock_held_by_another_run_names_the_holder(store: Store) -> None:
    version = put(store, 1)
    store.acquire_locks({(NS, PATH): version}, workflow_id="rollout:default/held", run_id="r1")
    with pytest.raises(LockHeldError, match="rollout:default/held") as raised:
        store.acquire_locks({(NS, PATH): version}, workflow_id="other-workflow", run_id="r2")
    assert raised.value.holder.run_id == "r1"
    assert "r1" in str(raised.value)
    with pytest.raises(LockHeldError):  # naming a run that is not the holder takes nothing over
        store.acquire_locks(
            {(NS, PATH): version},
            workflow_id="other-workflow",
            run_id="r2",
            replace={(NS, PATH): "r0"},
        )
    lock = store.get_lock(NS, PATH)
    assert lock is not None and lock.run_id == "r1"


def test_lock_reclaim_with_replace_run_id(store: Store) -> None:
    v1, v2 = put(store, 1), put(store, 2)
    store.acquire_locks({(NS, PATH): v1}, workflow_id="dead", run_id="r1")
    lock = store.acquire_locks(
        {(NS, PATH): v2}, workflow_id="alive", run_id="r2", replace={(NS, PATH): "r1"}
    )[0]
    assert (lock.workflow_id, lock.run_id, lock.version) == ("alive", "r2", v2)
    assert store.get_lock(NS, PATH) == lock
    # A second reclaim of the same dead run finds it no longer holds the lock.
    with pytest.raises(LockHeldError, match="alive"):
        store.acquire_locks(
            {(NS, PATH): v2}, workflow_id="third", run_id="r3", replace={(NS, PATH): "r1"}
        )
    assert store.history(NS, PATH) == [], "the caller audits the reclaim (it knows why)"


def test_replace_run_id_on_a_free_lock_just_takes_it(store: Store) -> None:
    version = put(store, 1)
    lock = store.acquire_locks(
        {(NS, PATH): version}, workflow_id="w", run_id="r2", replace={(NS, PATH): "r1"}
    )[0]
    assert lock.run_id == "r2"


# -- rollout --------------------------------------------------------------------------------------------


def test_begin_rollout_requires_the_lock(store: Store) -> None:
    version = put(store, 1)
    with pytest.raises(LockLostError):
        store.begin_rollout(
            NS,
            PATH,
            workflow_id="w",
            run_id="r1",
            version=version,
            actor="w",
            reason="",
            event_key="b1",
        )
    store.acquire_locks({(NS, PATH): version}, workflow_id="holder-wf", run_id="r0")
    with pytest.raises(LockHeldError, match="holder-wf"):
        store.begin_rollout(
            NS,
            PATH,
            workflow_id="w",
            run_id="r1",
            version=version,
            actor="w",
            reason="",
            event_key="b1",
        )
    assert store.get_rollout(NS, PATH) is None
    assert store.history(NS, PATH) == []


def test_begin_rollout_creates_the_row_once(store: Store) -> None:
    version = put(store, 1)
    store.acquire_locks({(NS, PATH): version}, workflow_id="w", run_id="r1")
    revision = store.revision()
    kwargs = dict(workflow_id="w", run_id="r1", version=version, actor="alice", reason="go")
    assert store.begin_rollout(NS, PATH, event_key="b1", **kwargs) is True
    assert store.begin_rollout(NS, PATH, event_key="b1", **kwargs) is False
    assert store.begin_rollout(NS, PATH, event_key="b2", **kwargs) is False
    rollout = store.get_rollout(NS, PATH)
    assert rollout is not None
    assert (
        rollout.run_id,
        rollout.workflow_id,
        rollout.version,
        rollout.state,
        rollout.stage_index,
    ) == ("r1", "w", version, "started", -1)
    assert _is_utc(rollout.started_at) and _is_utc(rollout.updated_at)
    assert _actions(store) == ["rollout.started"]
    assert store.revision() == revision + 1
    snapshot = snapshot_of(store, NS, PATH)
    assert snapshot is not None and snapshot.staged is not None and snapshot.stages == ()


def test_publish_stage_is_idempotent_and_visible(store: Store) -> None:
    stable = put(store, {"n": 1})
    store.set_stable(NS, PATH, stable, actor="op", reason="", event_key="s")
    version = put(store, {"n": 2})
    start(store, version, run_id="r1", workflow_id="w")
    revision = store.revision()
    canary = stage(0, channel="canary", name="channel:canary")
    assert (
        store.publish_stage(NS, PATH, run_id="r1", stage=canary, actor="w", event_key="p0") is True
    )
    assert (
        store.publish_stage(NS, PATH, run_id="r1", stage=canary, actor="w", event_key="p0") is False
    )
    assert store.revision() == revision + 1
    assert _actions(store).count("stage.published") == 1
    ten = stage(1, percentile=10.25, labels={"region": "eu"}, name="10%")
    assert store.publish_stage(NS, PATH, run_id="r1", stage=ten, actor="w", event_key="p1") is True
    rollout = store.get_rollout(NS, PATH)
    assert rollout is not None and (rollout.state, rollout.stage_index) == ("stage.published", 1)
    snapshot = snapshot_of(store, NS, PATH)
    assert snapshot is not None
    assert snapshot.stable is not None and snapshot.stable.version == stable
    assert snapshot.staged is not None and snapshot.staged.value == {"n": 2}
    assert snapshot.stages == (canary, ten)
    assert all(_is_utc(s.expires_at) for s in snapshot.stages)
    published = store.history(NS, PATH)[-1]
    assert (published.action, published.version, published.workflow_id) == (
        "stage.published",
        version,
        "w",
    )
    assert published.details["index"] == 1


def test_republishing_a_stage_replaces_its_row(store: Store) -> None:
    version = put(store, 1)
    start(store, version, run_id="r1")
    store.publish_stage(
        NS, PATH, run_id="r1", stage=stage(0, channel="a"), actor="w", event_key="p0"
    )
    store.publish_stage(
        NS, PATH, run_id="r1", stage=stage(0, channel="b"), actor="w", event_key="p0b"
    )
    snapshot = snapshot_of(store, NS, PATH)
    assert snapshot is not None and [s.channel for s in snapshot.stages] == ["b"]


def test_publish_without_begin_rollout_creates_the_rollout_from_the_lock(store: Store) -> None:
    version = put(store, 1)
    store.acquire_locks({(NS, PATH): version}, workflow_id="w", run_id="r1")
    assert store.publish_stage(
        NS, PATH, run_id="r1", stage=stage(0, percentile=5), actor="w", event_key="p0"
    )
    rollout = store.get_rollout(NS, PATH)
    assert rollout is not None and (rollout.run_id, rollout.version, rollout.stage_index) == (
        "r1",
        version,
        0,
    )


def test_stale_run_cannot_publish_over_a_newer_run(store: Store) -> None:
    v1, v2 = put(store, 1), put(store, 2)
    start(store, v1, run_id="old", workflow_id="w-old")
    store.publish_stage(
        NS, PATH, run_id="old", stage=stage(0, channel="c"), actor="w", event_key="o0"
    )
    store.acquire_locks(
        {(NS, PATH): v2}, workflow_id="w-new", run_id="new", replace={(NS, PATH): "old"}
    )
    store.begin_rollout(
        NS,
        PATH,
        workflow_id="w-new",
        run_id="new",
        version=v2,
        actor="w",
        reason="",
        event_key="n-begin",
    )
    # The new run's rollout replaced the dead run's row and its stages.
    snapshot = snapshot_of(store, NS, PATH)
    assert snapshot is not None and snapshot.staged is not None and snapshot.staged.version == v2
    assert snapshot.stages == ()
    before = (store.revision(), len(store.history(NS, PATH)))
    with pytest.raises(LockHeldError, match="w-new"):
        store.publish_stage(
            NS, PATH, run_id="old", stage=stage(1, percentile=50), actor="w", event_key="o1"
        )
    assert (store.revision(), len(store.history(NS, PATH))) == before
    assert store.renew_leases(NS, PATH, run_id="old", leases=[StageLease(0, store.now())]) == 0
    assert (
        store.revert(
            NS,
            PATH,
            run_id="old",
            workflow_id="w-old",
            actor="w",
            reason="late",
            outcome="reverted",
            event_key="o-revert",
        )
        is False
    )
    with pytest.raises(LockHeldError):
        store.promote(
            NS,
            PATH,
            run_id="old",
            workflow_id="w-old",
            version=v1,
            actor="w",
            reason="",
            event_key="o-promote",
        )
    rollout = store.get_rollout(NS, PATH)
    assert rollout is not None and rollout.run_id == "new" and rollout.state == "started"
    assert store.get_stable(NS, PATH) is None
    assert (store.revision(), len(store.history(NS, PATH))) == before


def test_publish_after_the_lock_is_released_raises_lock_lost(store: Store) -> None:
    version = put(store, 1)
    start(store, version, run_id="r1")
    store.revert(
        NS,
        PATH,
        run_id="r1",
        workflow_id="w",
        actor="w",
        reason="",
        outcome="halted",
        event_key="rv",
    )
    with pytest.raises(LockHeldError) as raised:  # LockLostError is a LockHeldError
        store.publish_stage(
            NS, PATH, run_id="r1", stage=stage(0, channel="c"), actor="w", event_key="p"
        )
    assert isinstance(raised.value, LockLostError) and isinstance(raised.value, LockError)
    assert raised.value.holder is None and "r1" in str(raised.value)
    assert store.get_rollout(NS, PATH) is None


def test_renew_leases_of_this_runs_stages(store: Store) -> None:
    version = put(store, 1)
    start(store, version, run_id="r1")
    store.publish_stage(
        NS, PATH, run_id="r1", stage=stage(0, channel="c"), actor="w", event_key="p0"
    )
    store.publish_stage(
        NS, PATH, run_id="r1", stage=stage(1, percentile=10), actor="w", event_key="p1"
    )
    revision = store.revision()
    later = datetime(2099, 1, 1, 0, 0, tzinfo=UTC)
    leases = [
        StageLease(0, later),
        StageLease(1, later + timedelta(minutes=1)),
        StageLease(7, later),
    ]
    assert store.renew_leases(NS, PATH, run_id="r1", leases=leases) == 2
    assert store.revision() == revision + 1
    snapshot = snapshot_of(store, NS, PATH)
    assert snapshot is not None
    assert [s.expires_at for s in snapshot.stages] == [later, later + timedelta(minutes=1)]
    assert store.renew_leases(NS, PATH, run_id="r1", leases=[]) == 0
    assert store.renew_leases(NS, PATH, run_id="other", leases=leases) == 0
    assert store.revision() == revision + 1
    assert "lease" not in " ".join(_actions(store)), "renewals are not audited"
    with pytest.raises(ValueError, match="timezone-aware"):
        store.renew_leases(NS, PATH, run_id="r1", leases=[StageLease(0, datetime(2099, 1, 1))])


def test_promote_makes_stable_and_clears_everything(store: Store) -> None:
    old, new = put(store, {"n": 1}), put(store, {"n": 2})
    store.set_stable(NS, PATH, old, actor="op", reason="", event_key="s")
    start(store, new, run_id="r1", workflow_id="w")
    store.publish_stage(
        NS, PATH, run_id="r1", stage=stage(0, channel="c"), actor="w", event_key="p0"
    )
    store.publish_stage(
        NS, PATH, run_id="r1", stage=stage(1, percentile=50), actor="w", event_key="p1"
    )
    revision = store.revision()
    kwargs = dict(run_id="r1", workflow_id="w", version=new, actor="w", reason="healthy")
    assert store.promote(NS, PATH, event_key="promote", **kwargs) is True
    assert store.promote(NS, PATH, event_key="promote", **kwargs) is False
    assert store.revision() == revision + 1
    stable = store.get_stable(NS, PATH)
    assert stable is not None and stable.version == new
    assert store.get_rollout(NS, PATH) is None and store.get_lock(NS, PATH) is None
    assert (
        count_rows(store, Rollout)
        == count_rows(store, RolloutStage)
        == count_rows(store, ConfigLock)
        == 0
    )
    snapshot = snapshot_of(store, NS, PATH)
    assert snapshot is not None and snapshot.staged is None and snapshot.stages == ()
    assert _actions(store).count("rollout.promoted") == 1
    infos = {info.version: info for info in store.list_versions(NS, PATH)}
    assert infos[new].is_stable and len(infos[new].stable_since) == 1
    # The lock is free again: the next rollout may start.
    store.acquire_locks({(NS, PATH): old}, workflow_id="w2", run_id="r2")


def test_promote_without_stages_right_after_the_lock(store: Store) -> None:
    version = put(store, 1)
    store.acquire_locks({(NS, PATH): version}, workflow_id="w", run_id="r1")
    assert store.promote(
        NS,
        PATH,
        run_id="r1",
        workflow_id="w",
        version=version,
        actor="w",
        reason="no stages",
        event_key="p",
    )
    stable = store.get_stable(NS, PATH)
    assert stable is not None and stable.version == version
    assert store.get_lock(NS, PATH) is None


def test_promote_requires_the_lock(store: Store) -> None:
    version = put(store, 1)
    with pytest.raises(LockLostError):
        store.promote(
            NS,
            PATH,
            run_id="r1",
            workflow_id="w",
            version=version,
            actor="w",
            reason="",
            event_key="p",
        )
    assert store.get_stable(NS, PATH) is None
    assert store.history(NS, PATH) == []


REVERT_STATES = [
    "locked",
    "begun",
    "published",
    "paused",
    "never_locked",
    "other_holds",
    "reverted",
    "promoted",
]


@pytest.mark.parametrize("state", REVERT_STATES)
def test_revert_from_every_state(store: Store, state: str) -> None:
    stable = put(store, {"n": 1})
    store.set_stable(NS, PATH, stable, actor="op", reason="", event_key="s")
    version = put(store, {"n": 2})
    run = dict(run_id="r1", workflow_id="w")
    if state in ("locked", "begun", "published", "paused", "reverted", "promoted"):
        store.acquire_locks({(NS, PATH): version}, **run)
    if state in ("begun", "published", "paused", "reverted", "promoted"):
        store.begin_rollout(NS, PATH, version=version, actor="w", reason="", event_key="b", **run)
    if state in ("published", "paused", "reverted", "promoted"):
        store.publish_stage(
            NS, PATH, run_id="r1", stage=stage(0, channel="c"), actor="w", event_key="p0"
        )
    if state == "paused":
        # As the workflow's record_transition activity records a pause: an audit row only.
        store.record_event(
            NS, PATH, action="rollout.paused", actor="w", version=version, event_key="pause"
        )
    if state == "other_holds":
        start(store, version, run_id="r2", workflow_id="w2")
    if state == "reverted":
        store.revert(
            NS, PATH, actor="w", reason="first", outcome="reverted", event_key="rv0", **run
        )
    if state == "promoted":
        store.promote(NS, PATH, version=version, actor="w", reason="", event_key="pr", **run)

    had_something = state in ("locked", "begun", "published", "paused")
    revision, entries = store.revision(), len(store.history(NS, PATH))
    result = store.revert(
        NS, PATH, actor="w", reason="unhealthy", outcome="halted", event_key="revert", **run
    )
    assert result is had_something
    assert (
        store.revert(
            NS, PATH, actor="w", reason="unhealthy", outcome="halted", event_key="revert", **run
        )
        is False
    )
    assert (
        store.revert(
            NS, PATH, actor="w", reason="again", outcome="halted", event_key="revert-2", **run
        )
        is False
    )
    if had_something:
        assert store.revision() == revision + 1
        entry = store.history(NS, PATH)[-1]
        assert (entry.action, entry.reason, entry.workflow_id) == (
            "rollout.halted",
            "unhealthy",
            "w",
        )
        assert len(store.history(NS, PATH)) == entries + 1
    else:
        assert store.revision() == revision
        assert len(store.history(NS, PATH)) == entries
    if state == "other_holds":
        lock, rollout = store.get_lock(NS, PATH), store.get_rollout(NS, PATH)
        assert lock is not None and lock.run_id == "r2"
        assert rollout is not None and rollout.run_id == "r2"
    else:
        assert store.get_lock(NS, PATH) is None
        assert store.get_rollout(NS, PATH) is None
        assert count_rows(store, RolloutStage) == 0
        snapshot = snapshot_of(store, NS, PATH)
        assert snapshot is not None and snapshot.staged is None and snapshot.stages == ()
    expected_stable = version if state == "promoted" else stable
    current = store.get_stable(NS, PATH)
    assert current is not None and current.version == expected_stable


def test_revert_clears_a_dead_runs_rollout_when_this_run_holds_the_lock(store: Store) -> None:
    v1, v2 = put(store, 1), put(store, 2)
    start(store, v1, run_id="dead")
    store.publish_stage(
        NS, PATH, run_id="dead", stage=stage(0, channel="c"), actor="w", event_key="d0"
    )
    store.acquire_locks(
        {(NS, PATH): v2}, workflow_id="w2", run_id="r2", replace={(NS, PATH): "dead"}
    )
    assert (
        store.revert(
            NS,
            PATH,
            run_id="r2",
            workflow_id="w2",
            actor="w2",
            reason="bad input",
            outcome="reverted",
            event_key="r2-revert",
        )
        is True
    )
    assert store.get_rollout(NS, PATH) is None and store.get_lock(NS, PATH) is None


# -- audit ----------------------------------------------------------------------------------------------


def test_record_event_and_history_limit(store: Store) -> None:
    for i in range(5):
        assert (
            store.record_event(
                NS, PATH, action=f"note.{i}", actor="op", reason=str(i), details={"i": i}
            )
            is True
        )
    assert (
        store.record_event(
            NS,
            PATH,
            action="health.checked",
            actor="w",
            event_key="h1",
            version="v",
            workflow_id="w",
        )
        is True
    )
    assert store.record_event(NS, PATH, action="health.checked", actor="w", event_key="h1") is False
    store.record_event(NS, "other/config", action="elsewhere", actor="op")
    last = store.history(NS, PATH, limit=3)
    assert [e.action for e in last] == ["note.3", "note.4", "health.checked"]
    assert last[0].details == {"i": 3}
    assert (last[2].version, last[2].workflow_id) == ("v", "w")
    assert all(_is_utc(e.at) for e in last)
    assert [e.id for e in last] == sorted(e.id for e in last)
    assert len(store.history(NS, PATH)) == 6
    assert [e.action for e in store.history(NS, "other/config")] == ["elsewhere"]
    assert store.revision() == 0


def test_event_keys_are_global_across_methods(store: Store) -> None:
    """One key, one write: a key used by one activity step is never written again by another."""
    version = put(store, 1)
    store.record_event(NS, PATH, action="x", actor="op", event_key="shared")
    assert store.set_stable(NS, PATH, version, actor="op", reason="", event_key="shared") is False
    assert store.get_stable(NS, PATH) is None


# -- revision and snapshots -----------------------------------------------------------------------------


def test_revision_grows_with_every_client_visible_change(store: Store) -> None:
    seen = [store.revision()]

    def grew() -> bool:
        seen.append(store.revision())
        return seen[-1] > seen[-2]

    def same() -> bool:
        seen.append(store.revision())
        return seen[-1] == seen[-2]

    v1 = put(store, 1)
    assert grew(), "a config becomes known with its first version"
    store.set_schema(NS, PATH, {}, actor="op")
    assert same()
    store.set_stable(NS, PATH, v1, actor="op", reason="", event_key="s1")
    assert grew()
    v2 = put(store, 2)
    assert grew()
    store.acquire_locks({(NS, PATH): v2}, workflow_id="w", run_id="r")
    assert same()
    store.begin_rollout(
        NS, PATH, workflow_id="w", run_id="r", version=v2, actor="w", reason="", event_key="b"
    )
    assert grew()
    store.publish_stage(NS, PATH, run_id="r", stage=stage(0, channel="c"), actor="w", event_key="p")
    assert grew()
    store.renew_leases(
        NS, PATH, run_id="r", leases=[StageLease(0, store.now() + timedelta(hours=2))]
    )
    assert grew()
    store.record_event(NS, PATH, action="rollout.holding", actor="w", event_key="h")
    assert same()
    store.record_event(NS, PATH, action="note", actor="op")
    assert same()
    store.promote(
        NS, PATH, run_id="r", workflow_id="w", version=v2, actor="w", reason="", event_key="pr"
    )
    assert grew()
    store.acquire_locks({(NS, PATH): v1}, workflow_id="w", run_id="r3")
    store.publish_stage(
        NS, PATH, run_id="r3", stage=stage(0, channel="c"), actor="w", event_key="p3"
    )
    assert grew()
    store.revert(
        NS,
        PATH,
        run_id="r3",
        workflow_id="w",
        actor="w",
        reason="",
        outcome="reverted",
        event_key="rv3",
    )
    assert grew()
    assert seen == sorted(seen)


def test_load_snapshots_of_several_configs(store: Store) -> None:
    now = store.now()
    # a: stable only.  b: stable and a rollout with one live and one expired stage.  c: versions only.
    a1 = put(store, {"a": 1}, path="a")
    store.set_stable(NS, "a", a1, actor="op", reason="", event_key="sa")
    b1, b2 = put(store, {"b": 1}, path="team/b"), put(store, {"b": 2}, path="team/b")
    store.set_stable(NS, "team/b", b1, actor="op", reason="", event_key="sb")
    start(store, b2, run_id="rb", path="team/b")
    expired = stage(0, channel="canary", expires_in=timedelta(seconds=-5), now=now)
    live = stage(1, percentile=10, labels={"zone": "z1"}, now=now)
    # Published out of order: the snapshot sorts stages by index.
    store.publish_stage(NS, "team/b", run_id="rb", stage=live, actor="w", event_key="b1")
    store.publish_stage(NS, "team/b", run_id="rb", stage=expired, actor="w", event_key="b0")
    put(store, {"c": 1}, path="c", namespace="staging")
    put(store, {"c": 2}, path="c", namespace="staging")
    store.set_schema(NS, "schema/only", {}, actor="op")  # no version: not a known config

    revision, snapshots = store.load_snapshots_with_revision()
    assert revision == store.revision()
    assert set(snapshots) == {(NS, "a"), (NS, "team/b"), ("staging", "c")}
    a = snapshots[(NS, "a")]
    assert (
        a.stable is not None and a.stable.value == {"a": 1} and a.staged is None and a.stages == ()
    )
    b = snapshots[(NS, "team/b")]
    assert b.stable is not None and b.stable.version == b1
    assert b.staged is not None and b.staged.version == b2 and b.staged.value == {"b": 2}
    assert b.stages == (expired, live)
    assert b.stages[0].expires_at < now < b.stages[1].expires_at
    assert dict(b.stages[1].labels) == {"zone": "z1"} and b.stages[1].percentile == 10
    c = snapshots[("staging", "c")]
    assert (c.namespace, c.path, c.stable, c.staged, c.stages) == ("staging", "c", None, None, ())
    assert all(
        _is_utc(t)
        for s in snapshots.values()
        for t in [
            *(r.created_at for r in (s.stable, s.staged) if r and r.created_at),
            *(st.expires_at for st in s.stages),
        ]
    )


def test_load_snapshots_query_count_does_not_grow_with_configs(store: Store) -> None:
    from sqlalchemy import event

    def statements_for_load() -> int:
        count = 0

        def on_execute(*_args: object) -> None:
            nonlocal count
            count += 1

        engine = store._engine  # white-box: count the statements one load issues
        event.listen(engine, "before_cursor_execute", on_execute)
        try:
            snapshots_of(store)
        finally:
            event.remove(engine, "before_cursor_execute", on_execute)
        return count

    def add_configs(first: int, last: int) -> None:
        for i in range(first, last):
            path = f"bulk/c{i}"
            version = put(store, {"i": i}, path=path)
            store.set_stable(NS, path, version, actor="op", reason="", event_key=f"s{i}")
            staged = put(store, {"i": i, "next": True}, path=path)
            start(store, staged, run_id=f"r{i}", path=path)
            store.publish_stage(
                NS, path, run_id=f"r{i}", stage=stage(0, channel="c"), actor="w", event_key=f"p{i}"
            )

    add_configs(0, 2)
    few = statements_for_load()
    add_configs(2, 25)
    many = statements_for_load()
    assert len(snapshots_of(store)) == 25
    assert many == few <= 8


# -- runs that ended without their own end (issue 12, hole 7) -------------------------------------


def test_an_abandoned_run_is_ended_once_while_it_holds_the_lock(store: Store) -> None:
    version = put(store, {"max_connections": 2000})
    start(store, version, run_id="r1", workflow_id="w1")
    store.publish_stage(
        NS, PATH, run_id="r1", stage=stage(0, channel="c"), actor="w", event_key="p"
    )
    revision = store.revision()
    assert [lock.run_id for lock in store.list_locks()] == ["r1"]

    ended = dict(run_id="r1", workflow_id="w1", outcome="terminated", actor="alice", reason="stop")
    assert store.end_abandoned_run(NS, PATH, event_key="r1:revert", **ended) is True
    assert store.end_abandoned_run(NS, PATH, event_key="r1:revert", **ended) is False

    entry = store.history(NS, PATH)[-1]
    assert (entry.action, entry.actor, entry.reason, entry.version, entry.workflow_id) == (
        "rollout.terminated", "alice", "stop", version, "w1",
    )  # fmt: skip
    assert _actions(store).count("rollout.terminated") == 1
    assert store.get_lock(NS, PATH) is None and store.list_locks() == []
    rollout = store.get_rollout(NS, PATH)
    # Its stages lapse on their own (nothing a client resolves to changed now).
    assert rollout is not None and rollout.state == "terminated"
    assert store.revision() == revision
    # Its revert key is taken: a late revert of the same run writes no second outcome.
    assert not store.revert(NS, PATH, actor="w", reason="late", outcome="halted",
                            event_key="r1:revert", run_id="r1", workflow_id="w1")  # fmt: skip
    assert _actions(store).count("rollout.halted") == 0


def test_an_abandoned_run_whose_lock_is_another_runs_is_left_alone(store: Store) -> None:
    version = put(store, {"max_connections": 2000})
    start(store, version, run_id="r2", workflow_id="w2")
    before = _actions(store)

    assert not store.end_abandoned_run(
        NS, PATH, run_id="r1", workflow_id="w1", outcome="terminated", actor="a", reason="",
        event_key="r1:revert",
    )  # fmt: skip
    assert store.get_lock(NS, PATH) is not None and _actions(store) == before


def test_a_revert_that_must_audit_writes_its_outcome_even_holding_nothing(store: Store) -> None:
    # A failed prepare that took nothing still ends its trail.
    run = dict(run_id="r1", workflow_id="w1", actor="workflow", reason="prepare failed: x")
    assert not store.revert(NS, PATH, outcome="failed", event_key="k", audit_always=True, **run)
    assert not store.revert(NS, PATH, outcome="failed", event_key="k", audit_always=True, **run)
    assert [(e.action, e.version, e.workflow_id) for e in store.history(NS, PATH)] == [
        ("rollout.failed", None, "w1")
    ]
