"""Why an operator command's update is refused before it is written to history (its validator):
the rollout has ended, the API's signature is missing or stale or replayed, or the command would
change nothing in the state the rollout is in. Pure: `RolloutRunState.refusal` asks it."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from tempoconf.rollout.approvals import approve_refusal, signature_refusal
from tempoconf.rollout.commands import CommandName, OperatorCommand
from tempoconf.rollout.plan import RolloutPlan
from tempoconf.rollout.progress import FINAL_STATES, RolloutProgress, RolloutState


class RolloutRunState(Protocol):
    """What a refusal reads of the run's state (tempoconf.rollout.run_state, which imports this)."""

    progress: RolloutProgress
    plan: RolloutPlan | None
    halt: OperatorCommand | None
    approval_nonces: dict[str, str]
    four_eyes_normalised: bool

    def stage_label(self) -> str: ...
    def is_final_or_promoting(self) -> bool: ...


__all__ = ["APPLY_GATE_STATES", "update_refusal"]

APPLY_GATE_STATES = frozenset({RolloutState.WAITING_FOR_APPLY, RolloutState.APPLY_TIMED_OUT})


def update_refusal(
    run: RolloutRunState,
    command: CommandName,
    argument: OperatorCommand | None = None,
    *,
    now: datetime | None = None,
) -> str | None:
    """Why an update `command` is refused before it is written to history; None: accepted.
    `now`: the workflow's clock, which judges the API's signature (`signature_refusal`)."""
    progress = run.progress
    state = RolloutState(progress.state)
    if state in FINAL_STATES:
        return f"cannot {command}: the rollout has already ended ({state.value})"
    # Without the API's signature nothing else is worth telling: send it through the API.
    unsigned = signature_refusal(
        run.plan,
        progress,
        command,
        argument or OperatorCommand(),
        now=now,
        used_nonces=run.approval_nonces,
    )
    if unsigned is not None:
        return unsigned
    if command == CommandName.HALT and state == RolloutState.PROMOTING:
        return (
            "cannot halt: the version is being promoted to stable; roll back with "
            "`tempoconf rollback PATH VERSION` instead"
        )
    if command == CommandName.BYPASS:
        if run.halt is not None or state == RolloutState.REVERTING:
            return "cannot bypass: the rollout is being halted and reverted"
        if state == RolloutState.PROMOTING:
            return "cannot bypass: the version is already being promoted"
    if command == CommandName.ADVANCE and state not in APPLY_GATE_STATES:
        if state != RolloutState.HOLDING:
            return f"cannot advance: no hold is running (the rollout is {progress.state})"
        if progress.hold_deadline is None:
            # The hold is over; the rollout stays at its stage because it is paused.
            return (
                f"cannot advance: the hold of {run.stage_label()} has ended; the rollout is paused "
                f"({'; '.join(progress.pause_reasons)}): resume it to move on"
            )
    if command == CommandName.PAUSE and run.is_final_or_promoting():
        return f"cannot pause: the rollout is {progress.state}"
    if command == CommandName.RESUME and not progress.pause_reasons:
        return "cannot resume: the rollout is not paused"
    if command == CommandName.APPROVE:
        return approve_refusal(
            run.plan,
            progress,
            argument or OperatorCommand(),
            normalised=run.four_eyes_normalised,
        )
    return None
