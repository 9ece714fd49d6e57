"""The Web UI's current details of a rollout, rendered from its progress and plan at a given time."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta

import pytest

from tempoconf.rollout.details import render_current_details, steering_command, time_left
from tempoconf.rollout.plan import PlannedStage, RolloutPlan, plan_check
from tempoconf.rollout.progress import RolloutProgress, RolloutState, StageProgress, describe_phase

NOW = datetime(2026, 11, 29, 12, 51, 23, 400000, tzinfo=UTC)
WORKFLOW_ID = "rollout:default/myproject/server_config"


def plan(**fields: object) -> RolloutPlan:
    defaults: dict[str, object] = {
        "namespace": "default",
        "path": "myproject/server_config",
        "version": "0123456789abcdef",
        "stages": [
            PlannedStage(
                index=0,
                name="channel:canary",
                channel="canary",
                health=[plan_check({"kind": "reports", "max_error_ratio": 0.05}, 0)],
            ),
            PlannedStage(index=1, name="50%", percentile=50, manual=True),
        ],
        "author": "alice@example.com",
        "message": "raise max_connections",
        "change": "max_connections 1000 → 2000",
        "temporal_cli": ".venv/bin/temporal",
        "temporal_address": "127.0.0.1:17233",
        "temporal_namespace": "default",
    }
    defaults.update(fields)
    return RolloutPlan(**defaults)  # type: ignore[arg-type]


def progress(
    state: RolloutState,
    *,
    stage_index: int,
    hold_deadline: datetime | None = None,
    **fields: object,
) -> RolloutProgress:
    deadline = hold_deadline.isoformat() if hold_deadline else None
    stages = [
        StageProgress(
            index=0,
            name="channel:canary",
            cohort="channel=canary",
            cooldown_seconds=300,
            manual=False,
            status="live" if stage_index == 0 else "passed",
        ),
        StageProgress(
            index=1,
            name="50%",
            cohort="50% of clients",
            cooldown_seconds=300,
            manual=True,
            status="live" if stage_index == 1 else "pending",
        ),
    ]
    # As the workflow leaves it: the stage keeps its hold deadline after the hold has ended.
    stages[stage_index].hold_deadline = deadline
    result = RolloutProgress(
        workflow_id=WORKFLOW_ID,
        namespace="default",
        path="myproject/server_config",
        state=state.value,
        version="0123456789abcdef",
        stage_index=stage_index,
        stage_name=stages[stage_index].name,
        stage_count=2,
        hold_deadline=deadline if state == RolloutState.HOLDING else None,
        stages=stages,
        **fields,  # type: ignore[arg-type]
    )
    result.phase = describe_phase(result)
    return result


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45.9, "45s"),
        (252, "4m12s"),
        (3600 + 5 * 60 + 9, "1h05m"),
        (2 * 86400 + 3 * 3600, "2d03h"),
        (-5, "0s"),
    ],
)
def test_time_left(seconds: float, text: str) -> None:
    assert time_left(seconds) == text


def test_a_running_hold_shows_its_end_and_the_time_left_as_of_the_update() -> None:
    deadline = datetime(2026, 11, 29, 12, 55, 35, tzinfo=UTC)
    details = render_current_details(
        progress(RolloutState.HOLDING, stage_index=0, hold_deadline=deadline), plan(), now=NOW
    )
    assert "ends 12:55:35 UTC, in 4m11s (as of 12:51:23 UTC)" in details
    assert (
        "Waiting for: the hold to end: ends 12:55:35 UTC, in 4m11s (as of 12:51:23 UTC), "
        "then 1 health check(s)" in details
    )
    assert (
        "1. **channel:canary**: channel=canary (live, hold ends 12:55:35 UTC, in 4m11s)" in details
    )
    assert (
        f"`.venv/bin/temporal workflow update execute --address 127.0.0.1:17233 -w {WORKFLOW_ID} "
        "--name advance`" in details
    )


def test_a_hold_ending_another_day_names_the_date() -> None:
    deadline = NOW + timedelta(days=1, hours=2)
    details = render_current_details(
        progress(RolloutState.HOLDING, stage_index=0, hold_deadline=deadline), plan(), now=NOW
    )
    assert "ends 2026-11-30 14:51:23 UTC, in 1d02h (as of 12:51:23 UTC)" in details


@pytest.mark.parametrize(
    "state", [RolloutState.AWAITING_APPROVAL, RolloutState.CHECKING_HEALTH, RolloutState.PROMOTING]
)
def test_a_stage_whose_hold_is_over_shows_no_hold_time(state: RolloutState) -> None:
    over = NOW - timedelta(minutes=3)
    details = render_current_details(
        progress(state, stage_index=1, hold_deadline=over), plan(), now=NOW
    )
    assert over.strftime("%H:%M:%S") not in details
    assert "hold" not in details.split("Commands:")[0].replace("the hold and health checks", "")
    assert "2. **50%**: 50% of clients (live, manual approval)" in details


def test_awaiting_approval_says_what_passed_and_how_to_approve() -> None:
    details = render_current_details(
        progress(RolloutState.AWAITING_APPROVAL, stage_index=1), plan(), now=NOW
    )
    assert (
        "Waiting for: an operator's approve (the hold and health checks of this stage passed)"
        in details
    )
    assert (
        f"- approve: `.venv/bin/temporal workflow update execute --address 127.0.0.1:17233 -w {WORKFLOW_ID} "
        "--name approve`" in details
    )


def test_the_headline_names_the_change() -> None:
    details = render_current_details(
        progress(RolloutState.PUBLISHING, stage_index=0), plan(), now=NOW
    )
    headline, _, identity = details.splitlines()[:3]
    assert headline == "## default/myproject/server_config: max_connections 1000 → 2000"
    assert identity == "version `0123456789abcdef` · raise max_connections — alice@example.com"


def test_a_plan_from_before_the_change_field_still_renders() -> None:
    details = render_current_details(
        progress(RolloutState.PUBLISHING, stage_index=0),
        plan(change="", temporal_cli="", temporal_address=""),
        now=NOW,
    )
    assert details.splitlines()[0] == "## default/myproject/server_config"
    assert f"`temporal workflow signal -w {WORKFLOW_ID} --name halt" in details


def test_commands_carry_the_address_and_a_namespace_other_than_default() -> None:
    command = steering_command(
        plan(temporal_namespace="prod", temporal_cli="temporal"),
        "rollout:prod/a b",
        "signal",
        "halt",
        reason=True,
    )
    assert shlex.split(command) == [
        "temporal",
        "workflow",
        "signal",
        "--address",
        "127.0.0.1:17233",
        "--namespace",
        "prod",
        "-w",
        "rollout:prod/a b",
        "--name",
        "halt",
        "--input",
        '{"reason": "..."}',
    ]


def test_no_commands_before_the_plan_says_where_the_server_is_nor_after_the_end() -> None:
    preparing = RolloutProgress(
        workflow_id=WORKFLOW_ID, namespace="default", path="myproject/server_config"
    )
    assert "Commands:" not in render_current_details(preparing, None, now=NOW)
    ended = progress(RolloutState.HALTED, stage_index=0, outcome="halted", reason="too slow")
    details = render_current_details(ended, plan(), now=NOW)
    assert "Commands:" not in details
    assert "Outcome: **halted** — too slow" in details


def test_paused_during_a_hold_waits_for_the_hold_then_resume() -> None:
    deadline = NOW + timedelta(seconds=90)
    paused = progress(
        RolloutState.HOLDING, stage_index=0, hold_deadline=deadline, pause_reasons=["looking"]
    )
    details = render_current_details(paused, plan(), now=NOW)
    assert (
        "in 1m30s (as of 12:51:23 UTC), then 1 health check(s); then resume (paused: looking)"
        in details
    )
    assert "- resume: `" in details


@pytest.mark.parametrize(
    ("state", "published", "said"),
    [
        (RolloutState.HALTED, True, "Halted, back to each config's stable version: v2 timeouts"),
        (RolloutState.REVERTED, True, "Reverted to each config's stable version: v2 timeouts"),
        (
            RolloutState.HALTED,
            False,
            "Halted before anything was published (every client stays on each config's stable "
            "version): v2 timeouts",
        ),
    ],
)
def test_an_ended_changeset_names_no_single_stable_version(
    state: RolloutState, published: bool, said: str
) -> None:
    """A changeset's `stable_version` is its first config's: its phase must not pass it off as
    every config's (halted through the backend, it named the frontend's)."""
    ended = progress(
        state,
        stage_index=0,
        outcome=state.value,
        reason="v2 timeouts",
        stable_version="85fdce2ab7c8a9c2",
        changes=["default/myproject/frontend ece543f76d9e6b2c", "default/myproject/backend 616a"],
    )
    ended.stages[0].published_at = NOW.isoformat() if published else None
    assert describe_phase(ended) == said
    assert "85fdce2ab7c8a9c2" not in describe_phase(ended)
    one = progress(state, stage_index=0, reason="v2 timeouts", stable_version="85fdce2ab7c8a9c2")
    one.stages[0].published_at = NOW.isoformat() if published else None
    assert "85fdce2ab7c8a9c2" in describe_phase(one)  # one config: its stable version, named
