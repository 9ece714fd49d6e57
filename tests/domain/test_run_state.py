"""The rollout's whole run state (tempoconf.rollout.run_state): carried by Temporal's default converter,
and the bookkeeping the workflow does on it, without Temporal."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.converter import DataConverter

from tempoconf.rollout.commands import CommandName, OperatorCommand
from tempoconf.rollout.plan import RolloutPlan, plan_from_request
from tempoconf.rollout.progress import (
    CheckResult,
    HealthReport,
    Outcome,
    RolloutState,
    StageStatus,
    Verdict,
)
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.rollout.run_state import RolloutRunState

AT = "2026-11-29T12:00:00+00:00"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CHECK = {"kind": "reports", "max_error_ratio": 0.05, "failure_limit": 2, "interval": "30s"}


def make_plan(**fields: object) -> RolloutPlan:
    raw = {
        "path": "myproject/server_config",
        "value": {"max_connections": 2000},
        "stages": [
            {"channel": "canary", "expiration": "10m"},
            {"percentile": 50, "manual": True, "health": [CHECK]},
        ],
        **fields,
    }
    return plan_from_request(parse_rollout_request(raw), "0123456789abcdef")


def started(**fields: object) -> RolloutRunState:
    state = RolloutRunState.start({"path": "myproject/server_config"}, workflow_id="rollout:x")
    state.set_plan(make_plan(**fields))
    return state


def at_stage(state: RolloutRunState, index: int, to: RolloutState) -> RolloutRunState:
    state.progress.stage_index = index
    state.progress.stage_name = state.progress.stages[index].name
    state.transition(to, "workflow", "test", at=AT)
    return state


def test_a_state_in_the_middle_of_a_run_survives_the_default_converter() -> None:
    state = at_stage(started(webhooks=["https://hooks.example/x"]), 1, RolloutState.HOLDING)
    state.progress.hold_deadline = AT
    state.apply_pause(OperatorCommand(reason="weekend", by="alice"), at=AT)
    state.apply_halt(OperatorCommand(reason="bad", by="bob"), at=AT)
    state.failures = {0: 1}
    state.lease_published(state.plan.stages[0], now=NOW)  # type: ignore[union-attr]
    state.transition(RolloutState.REVERTING, "workflow", "halted", at=AT, audit=False)
    state.take_unaudited()
    state.search_attribute_changes({"TempoconfState": "holding"})
    state.deliveries_started = 3
    state.progress.last_health = HealthReport(
        healthy=False,
        summary="x",
        checked_at=AT,
        checks=[CheckResult(0, "c", "reports", "unhealthy", "s")],
    )

    converter = DataConverter.default.payload_converter
    [payload] = converter.to_payloads([state])
    [back] = converter.from_payloads([payload], [RolloutRunState])

    assert back == state
    assert back.leases_renewed_at == NOW and back.failures == {0: 1} and back.leases == {0: 600.0}


def test_start_reads_namespace_and_path_from_any_request() -> None:
    state = RolloutRunState.start({"namespace": "prod", "path": "a/b"}, workflow_id="w")
    assert (state.progress.namespace, state.progress.path, state.progress.state) == (
        "prod",
        "a/b",
        "preparing",
    )
    unreadable = RolloutRunState.start(["not", "an", "object"], workflow_id="w")
    assert (unreadable.progress.namespace, unreadable.progress.path) == ("default", "")


def test_a_transition_records_who_why_and_derives_the_phase() -> None:
    state = at_stage(started(), 0, RolloutState.PUBLISHING)
    [row] = state.progress.history
    assert (row.from_state, row.to_state, row.kind, row.stage) == (
        "preparing",
        "publishing",
        "transition",
        "channel:canary",
    )
    assert state.progress.phase == "Publishing stage channel:canary"
    state.transition(RolloutState.PUBLISHING, "", "again", at=AT)
    assert state.progress.history[-1].kind == "note" and state.progress.history[-1].by == "operator"


def test_rows_the_activities_write_themselves_are_not_audited_twice() -> None:
    state = at_stage(started(), 0, RolloutState.PUBLISHING)
    assert state.has_unaudited() and state.take_unaudited() == [0]
    assert not state.has_unaudited() and state.take_unaudited() == []
    state.transition(RolloutState.REVERTING, "workflow", "x", at=AT)
    state.transition(RolloutState.REVERTED, "workflow", "x", at=AT, audit=False)
    assert state.take_unaudited() == [1]


def test_search_attributes_are_upserted_only_when_they_change() -> None:
    state = started()
    assert state.search_attribute_changes({"A": "1", "B": None, "C": ""}) == {"A": "1"}
    assert state.search_attribute_changes({"A": "1", "B": "2"}) == {"B": "2"}
    assert state.search_attribute_changes({"A": "3"}) == {"A": "3"}


def test_leases_are_renewed_at_half_the_shortest() -> None:
    state = started()
    assert state.next_lease_renewal() is None
    plan = state.plan
    assert plan is not None
    state.lease_published(plan.stages[1], now=NOW)  # 1h
    state.lease_published(plan.stages[0], now=NOW + timedelta(minutes=1))  # 10m; not a renewal
    assert state.next_lease_renewal() == NOW + timedelta(minutes=5)
    state.leases_renewed({0: "2026-11-29T12:15:00+00:00"}, now=NOW + timedelta(minutes=5))
    assert state.progress.stages[0].expires_at == "2026-11-29T12:15:00+00:00"
    assert state.next_lease_renewal() == NOW + timedelta(minutes=10)
    state.end_live_stages("passed")
    assert state.next_lease_renewal() is None


def test_a_check_trips_after_failure_limit_failures_in_a_row() -> None:
    state = started()
    stage = state.plan.stages[1]  # type: ignore[union-attr]

    def report(verdict: str) -> HealthReport:
        return HealthReport(
            False, "", AT, checks=[CheckResult(0, "errors", "reports", verdict, "too many")]
        )

    assert state.count_failures(stage, report("unhealthy")) == []
    assert state.count_failures(stage, report("healthy")) == []  # a pass resets the count
    assert state.count_failures(stage, report("unhealthy")) == []
    assert state.count_failures(stage, report("no_data")) == []  # no data neither counts nor resets
    assert state.count_failures(stage, report("unhealthy")) == [
        "errors: too many (2 failures in a row)"
    ]


def test_live_stages_end_passed_or_reverted() -> None:
    state = started()
    state.progress.stages[0].status = "passed"
    state.progress.stages[1].status = "live"
    state.end_live_stages("reverted")
    assert [stage.status for stage in state.progress.stages] == ["passed", "reverted"]


def test_the_webhook_body_names_the_event_and_numbers_it() -> None:
    state = at_stage(started(), 0, RolloutState.HOLDING)
    state.deliveries_started = 2
    body = state.webhook_body("stage_published", "why", run_id="run", at=AT)
    assert body == {
        "id": "run:2",
        "event": "stage_published",
        "workflow_id": "rollout:x",
        "namespace": "default",
        "path": "myproject/server_config",
        "version": "0123456789abcdef",
        "state": "holding",
        "stage": "channel:canary",
        "stage_index": 0,
        "reason": "why",
        "at": AT,
    }


def test_a_second_halt_changes_nothing_and_says_so_in_the_history() -> None:
    state = at_stage(started(), 0, RolloutState.HOLDING)
    first = state.apply_halt(OperatorCommand(reason="bad"), at=AT)
    second = state.apply_halt(OperatorCommand(by="bob"), at=AT)
    assert first.accepted and state.halt == OperatorCommand(reason="bad", by="operator")
    assert (
        not second.accepted
        and second.done == "a halt was already requested: the rollout is reverting"
    )
    assert [row.reason for row in state.progress.history[-2:]] == [
        "halt requested: bad",
        "a halt was already requested: the rollout is reverting",
    ]
    assert (
        state.refusal(CommandName.BYPASS)
        == "cannot bypass: the rollout is being halted and reverted"
    )


def test_pause_resume_and_approve() -> None:
    state = at_stage(started(), 1, RolloutState.AWAITING_APPROVAL)
    assert state.refusal(CommandName.RESUME) == "cannot resume: the rollout is not paused"
    paused = state.apply_pause(OperatorCommand(reason="freeze", by="alice"), at=AT)
    assert paused.done == "paused at stage 2/2 50%: the rollout does not leave it until resume"
    assert state.progress.paused and state.progress.phase == "Paused at 50%: freeze"
    approved = state.apply_approve(OperatorCommand(), at=AT)
    assert approved.done == "approval of 50% accepted and held until resume (paused: freeze)"
    assert state.refusal(CommandName.APPROVE) == (
        "cannot approve: 50% is already approved; the rollout is paused (freeze) and moves on at resume"
    )
    assert state.apply_resume(OperatorCommand(), at=AT).done == "resumed"
    assert not state.progress.paused and state.refusal(CommandName.RESUME) is not None


@pytest.mark.parametrize(
    ("state_name", "command", "refusal"),
    [
        (
            RolloutState.PROMOTED,
            CommandName.PAUSE,
            "cannot pause: the rollout has already ended (promoted)",
        ),
        (
            RolloutState.PROMOTING,
            "halt",
            "cannot halt: the version is being promoted to stable; roll back "
            "with `tempoconf rollback PATH VERSION` instead",
        ),
        (
            RolloutState.PROMOTING,
            CommandName.BYPASS,
            "cannot bypass: the version is already being promoted",
        ),
        (RolloutState.PROMOTING, CommandName.PAUSE, "cannot pause: the rollout is promoting"),
        (
            RolloutState.PUBLISHING,
            "advance",
            "cannot advance: no hold is running (the rollout is publishing)",
        ),
        (
            RolloutState.HOLDING,
            "approve",
            "cannot approve: nothing is waiting for approval (the rollout is "
            "holding at stage channel:canary)",
        ),
        (RolloutState.HOLDING, CommandName.HALT, None),
    ],
)
def test_updates_are_refused_with_the_reason(
    state_name: RolloutState, command: CommandName, refusal: str | None
) -> None:
    state = at_stage(started(), 0, state_name)
    state.progress.hold_deadline = AT
    assert state.refusal(command) == refusal


def test_the_status_json_keeps_its_strings() -> None:
    state = at_stage(started(), 0, RolloutState.HOLDING)
    state.progress.stages[0].status = StageStatus.LIVE
    state.end_live_stages(StageStatus.REVERTED)
    state.transition(RolloutState.REVERTED, "workflow", "bad", at=AT)
    state.progress.outcome = Outcome.REVERTED
    state.progress.last_health = HealthReport(
        False, "x", AT, checks=[CheckResult(0, "c", "reports", Verdict.NO_DATA, "s")]
    )
    [payload] = DataConverter.default.payload_converter.to_payloads([state.progress])
    status = json.loads(payload.data)
    assert (status["state"], status["outcome"]) == ("reverted", "reverted")
    assert [stage["status"] for stage in status["stages"]] == ["reverted", "pending"]
    assert [(row["from_state"], row["to_state"], row["kind"]) for row in status["history"]] == [
        ("preparing", "holding", "transition"),
        ("holding", "reverted", "transition"),
    ]
    assert status["last_health"]["checks"][0]["verdict"] == "no_data"


def test_a_stage_is_entered_published_and_held() -> None:
    state = started()
    plan = state.plan
    assert plan is not None
    state.progress.approved = True
    state.enter_stage(plan.stages[1])
    assert (state.progress.stage_index, state.progress.stage_name, state.progress.approved) == (
        1,
        "50%",
        False,
    )
    state.stage_published(plan.stages[1], published_at=AT, expires_at="later", now=NOW)
    live = state.progress.stages[1]
    assert (live.status, live.published_at, live.expires_at) == ("live", AT, "later")
    assert state.progress.stage_started_at == NOW.isoformat() and state.leases == {1: 3600.0}
    state.advance_requested = True
    state.failures = {0: 5}
    state.start_hold(plan.stages[1], deadline=NOW + timedelta(minutes=5))
    assert not state.advance_requested and state.failures == {0: 0}
    assert state.progress.hold_deadline == live.hold_deadline == "2026-11-29T12:05:00+00:00"


def test_who_promotes_and_why() -> None:
    state = started()
    assert state.promotion(system_actor="workflow") == (
        "workflow",
        "every stage passed its hold and checks",
    )
    assert started(stages=[]).promotion(system_actor="workflow") == (
        "workflow",
        "no stages: promoted directly",
    )
    state.apply_bypass(OperatorCommand(reason="hotfix", by="carol"), at=AT)
    assert state.promotion(system_actor="workflow") == ("carol", "bypassed: hotfix")


@pytest.mark.parametrize(
    ("outcome", "status"),
    [(Outcome.PROMOTED, "passed"), (Outcome.BYPASSED, "passed"), (Outcome.HALTED, "reverted")],
)
def test_the_end_leaves_live_stages_passed_or_reverted(outcome: Outcome, status: str) -> None:
    state = started()
    state.progress.stages[0].status = StageStatus.LIVE
    state.leases = {0: 600.0}
    state.finish(outcome, "why", stable_version=None)
    assert [stage.status for stage in state.progress.stages] == [status, "pending"]
    assert (state.progress.outcome, state.progress.reason, state.progress.stable_version) == (
        outcome,
        "why",
        None,
    )
    assert state.leases == {}
