"""The gate on applied versions, pure: who is in the cohort, the ratio in whole clients, the
stragglers shown, `tempoconf clients --not-applied`'s filter, and the request's gate fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from tempoconf.gates.applied_gate import (
    MAX_STRAGGLERS_SHOWN,
    client_rows,
    describe_gate,
    gate_from_json,
    judge_applied,
    straggler_lines,
)
from tempoconf.problems import InvalidRequestError
from tempoconf.resolution.bucketing import in_percentile
from tempoconf.rollout.plan import PlannedStage, plan_from_request
from tempoconf.rollout.request import parse_rollout_request

PATH = "myproject/server_config"
V = "aaaaaaaaaaaaaaaa"
OLD = "bbbbbbbbbbbbbbbb"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@dataclass
class Seen:
    client: str
    channel: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    last_seen: datetime = NOW - timedelta(seconds=30)
    last_version: str | None = V


@dataclass
class Applied:
    client: str
    version: str | None = V
    error: str | None = None
    error_version: str | None = None
    reported_at: datetime = NOW - timedelta(seconds=20)
    applied_at: datetime | None = NOW - timedelta(seconds=20)
    channel: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def judge(
    seen: list[Seen], applied: list[Applied], *, stages: list[PlannedStage], ratio: float = 0.95
):  # type: ignore[no-untyped-def]
    return judge_applied(
        path=PATH,
        stages=stages,
        version=V,
        stage_name="channel:canary",
        min_applied=ratio,
        window_seconds=600,
        seen=seen,
        applied=applied,
        now=NOW,
    )


CANARY = PlannedStage(index=0, name="channel:canary", channel="canary")


def test_ratio_counts_whole_clients_of_the_cohort_only() -> None:
    canaries = [Seen(f"c-{n:02d}", channel="canary") for n in range(20)]
    others = [Seen(f"o-{n}", channel=None, last_version=OLD) for n in range(5)]
    applied = [Applied(f"c-{n:02d}") for n in range(18)] + [Applied("o-0", version=OLD)]
    applied.append(Applied("c-18", version=OLD, error="exit 3", error_version=V))
    gate = judge(canaries + others, applied, stages=[CANARY])
    assert (gate.cohort, gate.applied, gate.met, gate.straggler_count) == (20, 18, False, 2)
    assert [s.client for s in gate.stragglers] == ["c-18", "c-19"]
    assert gate.stragglers[0].error == "exit 3" and gate.stragglers[0].applied_version == OLD
    assert gate.stragglers[1].applied_version is None
    assert "applied 18/20 (90%)" in describe_gate(gate) and "2 straggler(s)" in describe_gate(gate)
    assert straggler_lines(gate) == [
        f"c-18: last seen 2026-11-30 11:59:40 UTC, apply of {V} failed: exit 3 (still on {OLD})",
        "c-19: last seen 2026-11-30 11:59:30 UTC, reported no apply",
    ]

    # 19 of 20 is exactly 95%: met (no float rounding in the way).
    applied.append(Applied("c-19"))
    assert judge(canaries + others, applied, stages=[CANARY]).met


def test_window_and_cumulative_cohort() -> None:
    ten = PlannedStage(index=1, name="10%", percentile=10)
    hosts = [f"host-{n}" for n in range(200)]
    in_ten = [h for h in hosts if in_percentile(PATH, h, 10)]
    seen = [Seen(h) for h in hosts] + [Seen("canary-1", channel="canary")]
    # An apply report in the window counts as seen; one older than the window does not.
    applied = [
        Applied("reported-only", channel="canary"),
        Applied("gone", channel="canary", reported_at=NOW - timedelta(hours=1)),
    ]
    gate = judge(seen, applied, stages=[CANARY, ten], ratio=1.0)
    assert gate.cohort == len(in_ten) + 2 and gate.applied == 1
    assert gate.straggler_count == len(in_ten) + 1
    assert len(gate.stragglers) == min(MAX_STRAGGLERS_SHOWN, gate.straggler_count)


def test_an_empty_cohort_is_not_met_and_a_gate_round_trips_through_json() -> None:
    gate = judge([Seen("x")], [], stages=[CANARY])
    assert (gate.cohort, gate.met, gate.ratio) == (0, False, None)
    assert "no client of the cohort seen" in describe_gate(gate)
    full = judge([Seen("c", channel="canary")], [], stages=[CANARY])
    from dataclasses import asdict

    assert gate_from_json({**asdict(full), "future": 1}) == full


def test_not_applied_lists_the_clients_served_the_version_that_did_not_apply_it() -> None:
    seen = [
        Seen("done"),
        Seen("late"),
        Seen("failed", last_version=OLD),
        Seen("elsewhere", last_version=OLD),
    ]
    applied = [
        Applied("done"),
        Applied("failed", version=OLD, error="exit 1", error_version=V),
        Applied("elsewhere", version=OLD),
        Applied("gone", version=OLD, reported_at=NOW - timedelta(hours=2)),  # before `since`
    ]
    since = NOW - timedelta(hours=1)
    rows = client_rows(seen, applied, since=since, version=V, not_applied=True)
    assert [row.client for row in rows] == ["failed", "late"]
    assert rows[0].apply_error == "exit 1" and rows[0].applied_version == OLD
    on_v = client_rows(seen, applied, since=since, version=V)
    assert [row.client for row in on_v] == ["done", "failed", "late"]
    assert len(client_rows(seen, applied, since=since)) == 4


def _stage(**gate: object) -> dict[str, object]:
    return {"path": PATH, "value": 1, "stages": [{"channel": "canary", **gate}]}


def test_request_gate_fields_are_planned_with_defaults() -> None:
    plan = plan_from_request(parse_rollout_request(_stage(min_applied=0.95)), V)
    stage = plan.stages[0]
    assert (stage.min_applied, stage.applied_window_seconds, stage.apply_timeout_seconds) == (
        0.95,
        600.0,
        None,
    )
    assert stage.on_apply_timeout == "revert"
    plan = plan_from_request(
        parse_rollout_request(
            _stage(min_applied=1, applied_window="2m", apply_timeout="10m", on_apply_timeout="hold")
        ),
        V,
    )
    stage = plan.stages[0]
    assert (stage.applied_window_seconds, stage.apply_timeout_seconds) == (120.0, 600.0)
    assert stage.on_apply_timeout == "hold"
    assert plan_from_request(parse_rollout_request(_stage()), V).stages[0].min_applied is None


@pytest.mark.parametrize(
    ("gate", "pointer", "message"),
    [
        ({"min_applied": 0}, "/stages/0/min_applied", "greater than 0"),
        ({"min_applied": 1.5}, "/stages/0/min_applied", "less than or equal to 1"),
        ({"min_applied": True}, "/stages/0/min_applied", "valid number"),
        ({"apply_timeout": "10m"}, "/stages/0", "apply_timeout only with min_applied"),
        (
            {"on_apply_timeout": "hold", "applied_window": "1m"},
            "/stages/0",
            "applied_window, on_apply_timeout only with min_applied",
        ),
        ({"min_applied": 0.5, "on_apply_timeout": "wait"}, "/stages/0/on_apply_timeout", "revert"),
        ({"min_applied": 0.5, "apply_timeout": 0}, "/stages/0/apply_timeout", "greater than zero"),
    ],
)
def test_bad_gate_fields_are_refused_naming_the_field(
    gate: dict[str, object], pointer: str, message: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_rollout_request(_stage(**gate))
    problems = [(problem.pointer, problem.message) for problem in refused.value.problems]
    assert any(p == pointer and message in m for p, m in problems), problems


def test_status_and_the_web_ui_details_list_the_stragglers() -> None:
    from dataclasses import asdict

    from tempoconf.cli.status import _applied_lines
    from tempoconf.rollout.details import render_current_details
    from tempoconf.rollout.progress import RolloutProgress, RolloutState, describe_phase

    canaries = [Seen(f"c-{n:02d}", channel="canary") for n in range(25)]
    applied = [Applied("c-00"), Applied("c-01", version=OLD, error="exit 3", error_version=V)]
    gate = judge(canaries, applied, stages=[CANARY])
    gate.deadline = "2026-11-30T12:10:00+00:00"
    plan = plan_from_request(parse_rollout_request(_stage(min_applied=0.95)), V)
    progress = RolloutProgress(
        workflow_id="w",
        namespace="default",
        path=PATH,
        state=RolloutState.WAITING_FOR_APPLY,
        version=V,
        stage_index=0,
        stage_name="channel:canary",
        stage_count=1,
        applied=gate,
    )
    progress.phase = describe_phase(progress)
    assert progress.phase == (
        "Waiting for clients of stage channel:canary to apply the version: applied 1/25 (4%) of "
        "the cohort seen in the last 600s, needs 95%: 24 straggler(s)"
    )
    details = render_current_details(progress, plan, now=NOW)
    assert (
        "Waiting for: 95% of this stage's cohort to report the version applied "
        "(apply timeout 12:10:00 UTC)"
    ) in details
    assert f"- c-01: last seen 2026-11-30 11:59:40 UTC, apply of {V} failed: exit 3" in details
    assert "- ... and 4 more (`tempoconf clients` with --version" in details
    assert details.count("\n- c-") == MAX_STRAGGLERS_SHOWN
    assert "pass the apply gate as is: `temporal workflow update execute" in details

    lines = _applied_lines(asdict(gate))
    assert lines[1].startswith("  applied    applied 1/25 (4%) of the cohort seen in the last 600s")
    assert lines[2] == "  apply timeout 2026-11-30 12:10:00 UTC"
    assert lines[3] == "  stragglers:" and lines[5].startswith("    c-02: last seen")
    assert len(lines) == 4 + MAX_STRAGGLERS_SHOWN + 1


def test_rollout_plan_says_what_a_gated_stage_waits_for() -> None:
    from tempoconf.cli.plan import _apply_gate, describe_apply_gate

    gated = _stage(min_applied=0.95, apply_timeout="10m")
    stage = plan_from_request(parse_rollout_request(gated), V).stages[0]
    assert describe_apply_gate(stage) == (
        "after its cooldown, waits until 95% of its cohort seen in the last 10m applied the "
        "version (apply timeout 10m, then revert)"
    )
    assert _apply_gate(stage) == {
        "min_applied": 0.95,
        "applied_window_seconds": 600.0,
        "apply_timeout_seconds": 600.0,
        "on_apply_timeout": "revert",
    }
    assert _apply_gate(plan_from_request(parse_rollout_request(_stage()), V).stages[0]) is None


@pytest.mark.parametrize(
    ("gate", "valid"),
    [
        ({"min_applied": 0.95, "applied_window": "5m", "apply_timeout": 600}, True),
        ({"min_applied": 1, "on_apply_timeout": "hold"}, True),
        ({"apply_timeout": "10m"}, False),
        ({"on_apply_timeout": None}, False),
        ({"min_applied": 0}, False),
        ({"min_applied": 0.5, "on_apply_timeout": "later"}, False),
    ],
)
def test_the_published_schema_refuses_what_the_model_refuses(
    gate: dict[str, object], valid: bool
) -> None:
    from jsonschema import Draft202012Validator

    from tempoconf.contract_schema import rollout_request_schema

    request = _stage(**gate)
    schema_says = Draft202012Validator(rollout_request_schema()).is_valid(request)
    try:
        parse_rollout_request(request)
        model_says = True
    except InvalidRequestError:
        model_says = False
    assert (schema_says, model_says) == (valid, valid)
