"""What `status`, the phase and the Web UI's details say while a rollout waits for a change window
or a freeze (pure: tempoconf.rollout.progress, tempoconf.rollout.details)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime

from tempoconf.rollout.details import render_current_details
from tempoconf.rollout.progress import RolloutProgress, RolloutState, describe_phase


def progress(state: RolloutState, gate: str, until: str | None) -> RolloutProgress:
    shown = RolloutProgress(workflow_id="w", namespace="default", path="a/b", state=state)
    shown.gate, shown.gate_until = gate, until
    shown.phase = describe_phase(shown)
    return shown


def test_waiting_for_the_window_says_when_it_opens_and_how_long_until_then() -> None:
    waiting = progress(
        RolloutState.WAITING_FOR_WINDOW,
        "the change window, opens Mon 09:00 Europe/Berlin",
        "2026-11-30T08:00:00+00:00",
    )
    assert waiting.phase == "Waiting for the change window, opens Mon 09:00 Europe/Berlin"
    details = render_current_details(waiting, None, now=datetime(2026, 11, 29, 18, 0, tzinfo=UTC))
    assert (
        "Waiting for: the change window, opens Mon 09:00 Europe/Berlin (in 14h00m, as of "
        "18:00:00 UTC)" in details
    )


def test_frozen_says_who_froze_it_why_and_until_when() -> None:
    gate = (
        "namespace default frozen by alice since 2026-11-29 10:00 UTC: holidays, until it is ended"
    )
    frozen = progress(RolloutState.FROZEN, gate, None)
    assert frozen.phase == f"Frozen: {gate}"
    details = render_current_details(frozen, None, now=datetime(2026, 11, 29, 18, 0, tzinfo=UTC))
    assert f"Waiting for: the freeze to end: {gate}" in details


def test_a_pause_during_the_wait_is_shown_as_a_pause() -> None:
    waiting = progress(RolloutState.WAITING_FOR_WINDOW, "the change window, opens ...", None)
    waiting.pause_reasons.append("investigating")
    assert describe_phase(waiting) == "Paused at: investigating"  # no stage yet


def test_rollout_status_says_how_long_until_the_window_opens() -> None:
    from tempoconf.cli.status import format_view
    from tempoconf.operations.view import RolloutSnapshot

    waiting = progress(
        RolloutState.WAITING_FOR_WINDOW,
        "the change window, opens Mon 09:00 Europe/Berlin",
        "2026-11-30T08:00:00+00:00",
    )
    snapshot = RolloutSnapshot(
        workflow_id="w", run_id="r", execution="Running", running=True, progress=asdict(waiting)
    )
    view = format_view(
        snapshot, namespace="default", path="a/b", now=datetime(2026, 11, 29, 18, 30, tzinfo=UTC)
    )
    assert (
        "  state      waiting_for_window: Waiting for the change window, opens Mon 09:00 "
        "Europe/Berlin (in 13h30m)" in view
    ), view
