"""Rollout activities run twice (as after a crash and retry) write everything once."""

from __future__ import annotations

from dataclasses import replace

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tempoconf.activities.rollout import RolloutActivities
from tempoconf.rollout.activity_io import (
    PrepareInput,
    PromoteInput,
    PublishStageInput,
    RecordTransitionsInput,
    RevertInput,
    RevertResult,
)
from tempoconf.rollout.progress import Transition
from tempoconf.store.store import Store
from tests.store.helpers import snapshot_of

PATH = "myproject/server_config"
REQUEST = {
    "path": PATH,
    "value": {"is_debug": False, "max_connections": 2000},
    "stages": [{"channel": "canary"}, {"percentile": 10}],
    "author": "alice@example.com",
}


async def test_each_activity_run_twice_writes_once(store: Store) -> None:
    activities = RolloutActivities(store)
    env = ActivityEnvironment()
    prepare = PrepareInput(request=REQUEST, workflow_id="wf-1", run_id="run-1")

    plan = await env.run(activities.prepare_rollout, prepare)
    again = await env.run(activities.prepare_rollout, prepare)
    assert plan == again
    assert len(store.list_versions("default", PATH)) == 1
    assert store.get_lock("default", PATH).run_id == "run-1"

    publish = PublishStageInput(plan=plan, stage=plan.stages[0], workflow_id="wf-1", run_id="run-1")
    await env.run(activities.publish_stage, publish)
    revision = store.revision()
    await env.run(activities.publish_stage, publish)
    assert store.revision() == revision
    snapshot = snapshot_of(store, "default", PATH)
    assert [stage.name for stage in snapshot.stages] == ["channel:canary"]

    transition = Transition(
        at="2026-01-01T00:00:00+00:00",
        from_state="publishing",
        to_state="holding",
        by="workflow",
        reason="hold",
    )
    record = RecordTransitionsInput(
        namespace="default",
        path=PATH,
        workflow_id="wf-1",
        run_id="run-1",
        version=plan.version,
        transitions=[transition],
        sequences=[1],
        single_config=True,
    )
    await env.run(activities.record_transition, record)
    await env.run(activities.record_transition, record)
    # Told the run changes one config, it writes what it writes after asking the store: the same
    # entry, under the same key (so once).
    await env.run(activities.record_transition, replace(record, single_config=False))
    [holding] = [e for e in store.history("default", PATH) if e.action == "rollout.holding"]
    assert (holding.version, holding.workflow_id, holding.reason) == (plan.version, "wf-1", "hold")
    note = Transition(
        at="2026-01-01T00:00:01+00:00",
        from_state="holding",
        to_state="holding",
        by="bob",
        reason="pause: lunch",
        kind="note",
    )
    await env.run(
        activities.record_transition,
        RecordTransitionsInput(
            namespace="default",
            path=PATH,
            workflow_id="wf-1",
            run_id="run-1",
            version=plan.version,
            transitions=[note],
            sequences=[2],
        ),
    )
    assert [(e.action, e.actor) for e in store.history("default", PATH)][-1] == (
        "rollout.command",
        "bob",
    )

    promote = PromoteInput(
        plan=plan, workflow_id="wf-1", run_id="run-1", actor="workflow", reason="passed"
    )
    await env.run(activities.promote_version, promote)
    await env.run(activities.promote_version, promote)
    assert store.get_stable("default", PATH).version == plan.version

    actions = [entry.action for entry in store.history("default", PATH)]
    assert actions.count("rollout.started") == 1
    assert actions.count("stage.published") == 1
    assert actions.count("rollout.holding") == 1
    assert actions.count("rollout.promoted") == 1
    versions = store.list_versions("default", PATH)
    assert len(versions[0].stable_since) == 1
    assert store.get_lock("default", PATH) is None


async def test_revert_twice_and_from_a_rollout_that_published_nothing(store: Store) -> None:
    activities = RolloutActivities(store)
    env = ActivityEnvironment()
    await env.run(
        activities.prepare_rollout,
        PrepareInput(request=REQUEST, workflow_id="wf-2", run_id="run-2"),
    )
    revert = RevertInput(
        namespace="default",
        path=PATH,
        workflow_id="wf-2",
        run_id="run-2",
        outcome="halted",
        actor="oncall",
        reason="bad idea",
    )
    first = await env.run(activities.revert_rollout, revert)
    again = await env.run(activities.revert_rollout, revert)
    # The config has no stable version: the workflow must not say "back on stable".
    assert first == again == RevertResult(stable_version=None)
    assert [e.action for e in store.history("default", PATH)].count("rollout.halted") == 1
    assert store.get_lock("default", PATH) is None
    assert store.get_rollout("default", PATH) is None


async def test_prepare_refuses_bad_input_before_writing_anything(store: Store) -> None:
    activities = RolloutActivities(store)
    bad = dict(REQUEST, stages=[{"percentile": 250}, {}])
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(
            activities.prepare_rollout,
            PrepareInput(request=bad, workflow_id="wf-3", run_id="run-3"),
        )
    assert refused.value.non_retryable
    assert "/stages/0/percentile" in refused.value.message
    assert "/stages/1" in refused.value.message
    assert store.list_versions("default", PATH) == []
    assert store.get_lock("default", PATH) is None


async def test_a_version_keeps_its_first_rollouts_metadata_and_a_later_one_audits_its_own(
    store: Store,
) -> None:
    activities = RolloutActivities(store)
    env = ActivityEnvironment()
    first = dict(REQUEST, stages=[], commit="3f2a9c1", message="raise max_connections")
    plan = await env.run(
        activities.prepare_rollout, PrepareInput(request=first, workflow_id="wf-a", run_id="run-a")
    )
    await env.run(
        activities.promote_version,
        PromoteInput(
            plan=plan, workflow_id="wf-a", run_id="run-a", actor="workflow", reason="no stages"
        ),
    )

    # the same value again, by someone else, for another reason
    again = dict(
        REQUEST,
        stages=[],
        author="bob@example.com",
        commit="9d8e7f6",
        message="re-roll after the fix",
    )
    await env.run(
        activities.prepare_rollout, PrepareInput(request=again, workflow_id="wf-b", run_id="run-b")
    )

    [version] = store.list_versions("default", PATH)
    assert (version.author, version.commit, version.message) == (
        "alice@example.com",
        "3f2a9c1",
        "raise max_connections",
    )
    started = [
        entry for entry in store.history("default", PATH) if entry.action == "rollout.started"
    ]
    assert [(entry.workflow_id, entry.actor, entry.reason) for entry in started] == [
        ("wf-a", "alice@example.com", "raise max_connections"),
        ("wf-b", "bob@example.com", "re-roll after the fix"),
    ]
    assert started[0].details["commit"] == "3f2a9c1"
    assert started[1].details == {
        "run_id": "run-b",
        "author": "bob@example.com",
        "commit": "9d8e7f6",
        "message": "re-roll after the fix",
    }
