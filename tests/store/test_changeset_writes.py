"""A changeset's store writes: all or none (Store.atomically), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tempoconf.activities.prepare import begin_run
from tempoconf.resolution import PublishedStage
from tempoconf.rollout.validation import ValidatedRollout, validate_rollout
from tempoconf.store.records import LockRecord
from tempoconf.store.store import LockHeldError, Store
from tests.api.helpers import make_stable
from tests.store.helpers import snapshot_of

NS = "default"
PATHS = ["cs/a", "cs/b", "cs/c"]


def validated(paths: list[str]) -> ValidatedRollout:
    return validate_rollout(
        {"changes": [{"path": path, "value": {"v": 2}} for path in paths]}, _NoSchemas()
    )


def lock_all(store: Store, check: ValidatedRollout) -> list[LockRecord]:
    """Every config's lock for run `run-cs`, as the prepare step takes them."""
    return store.acquire_locks(
        {(change.namespace, change.path): change.version for change in check.configs()},
        workflow_id="cs",
        run_id="run-cs",
    )


class _NoSchemas:
    def get_schema(self, namespace: str, path: str) -> None:
        return None

    def get_version(self, namespace: str, path: str, version: str) -> None:
        return None


def test_locks_are_taken_all_or_none(store: Store) -> None:
    store.acquire_locks({(NS, PATHS[2]): "0" * 16}, workflow_id="other", run_id="run-other")
    with pytest.raises(LockHeldError) as held:
        lock_all(store, validated(PATHS))
    assert held.value.holder.path == PATHS[2] and held.value.holder.workflow_id == "other"
    assert store.get_lock(NS, PATHS[0]) is None and store.get_lock(NS, PATHS[1]) is None

    locks = lock_all(store, validated(PATHS[:2]))
    assert [lock.path for lock in locks] == PATHS[:2]
    configs = store.run_configs(NS, PATHS[1], "run-cs")
    assert [config.path for config in configs] == [PATHS[1], PATHS[0]]


def test_a_failing_write_inside_atomically_leaves_nothing(store: Store) -> None:
    for path in PATHS:
        make_stable(store, path, {"v": 1})
    revision = store.revision()
    before = [len(store.history(NS, path)) for path in PATHS]
    with pytest.raises(RuntimeError), store.atomically():
        for path in PATHS[:2]:
            stable = store.get_stable(NS, path)
            assert stable is not None
            store.set_stable(NS, path, stable.version, actor="t", reason="", event_key=f"x-{path}")
        raise RuntimeError("the third config's write failed")
    assert store.revision() == revision
    assert [len(store.history(NS, path)) for path in PATHS] == before


def test_publish_and_revert_of_a_changeset_write_every_config_in_one_step(store: Store) -> None:
    for path in PATHS[:2]:
        make_stable(store, path, {"v": 1})
    check = validated(PATHS[:2])
    lock_all(store, check)
    begin_run(store, check, workflow_id="cs", run_id="run-cs", actor="t", details={})
    stage = PublishedStage(
        0, "50%", None, 50, {}, datetime.now(UTC) + timedelta(hours=1), bucket_key="changeset:k"
    )
    assert store.publish_stage(
        NS, PATHS[0], run_id="run-cs", stage=stage, actor="workflow", event_key="run-cs:publish:0"
    )
    for path in PATHS[:2]:
        snapshot = snapshot_of(store, NS, path)
        assert snapshot is not None and snapshot.stages[0].bucket_key == "changeset:k"
    # retried: nothing written twice
    assert not store.publish_stage(
        NS, PATHS[0], run_id="run-cs", stage=stage, actor="workflow", event_key="run-cs:publish:0"
    )
    assert store.revert(
        NS, PATHS[0], run_id="run-cs", workflow_id="cs", actor="op", reason="r",
        outcome="halted", event_key="run-cs:revert",
    )  # fmt: skip
    for path in PATHS[:2]:
        snapshot = snapshot_of(store, NS, path)
        assert snapshot is not None and snapshot.staged is None
        assert store.get_lock(NS, path) is None
        assert [entry.action for entry in store.history(NS, path)][-1] == "rollout.halted"
