"""What the rollout shows and records of itself: its transitions and notes, the Web UI's current
details, its search attributes (each upsert a history event), and the audit log's rows."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._run import RolloutRun

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.activity_io import WATCH_HEALTH_ACTIVITY, RecordTransitionsInput
    from tempoconf.rollout.details import render_current_details
    from tempoconf.rollout.progress import RolloutState
    from tempoconf.temporal.names import (
        PATH_ATTRIBUTE,
        PATHS_ATTRIBUTE,
        SEARCH_ATTRIBUTES,
        STAGE_ATTRIBUTE,
        STATE_ATTRIBUTE,
        VERSION_ATTRIBUTE,
    )

__all__ = ["audit_transitions", "note", "refresh_view", "transition", "upsert_search_attributes"]

_SEARCH_ATTRIBUTE_KEYS = {key.name: key for key in SEARCH_ATTRIBUTES}


def transition(
    run: RolloutRun, to_state: RolloutState, by: str, reason: str, *, audit: bool = True
) -> None:
    """Move to a named state, recording who and why (history, audit log, search attributes, UI)."""
    run.state.transition(to_state, by, reason, at=run.now_iso(), audit=audit)
    refresh_view(run)


def note(run: RolloutRun, by: str, reason: str, *, details: dict[str, Any] | None = None) -> None:
    """Record what does not change the state: an operator command (pause, approve, ...), or a
    verdict of a judged health check (`details["verdict"]`)."""
    run.state.note(by, reason, at=run.now_iso(), details=details)
    refresh_view(run)


def refresh_view(run: RolloutRun) -> None:
    run.state.refresh()
    details = render_current_details(run.progress, run.state.plan, now=run.clock())
    since = run.state.health_watch_since
    if since is not None:
        # The watch cannot tell the workflow its verdicts without growing the history: say
        # where they are (the pending activity's heartbeat details).
        details += (
            f"\n\nInterval health checks: running in activity `{WATCH_HEALTH_ACTIVITY}` since "
            f"{since[:10]} {since[11:19]} UTC; their latest verdicts are in its heartbeat "
            "details (`temporal workflow describe`). The rollout reverts as soon as one trips."
        )
    workflow.set_current_details(details)
    upsert_search_attributes(run)


async def audit_transitions(run: RolloutRun) -> None:
    """Write the transitions not yet in the audit log (idempotent: keyed by sequence number)."""
    history = run.progress.history
    sequences = run.state.take_unaudited()
    if not sequences:
        return
    info = workflow.info()
    await _activities.record_transitions(
        RecordTransitionsInput(
            namespace=run.progress.namespace,
            path=run.progress.path,
            workflow_id=info.workflow_id,
            run_id=run.lock_run_id,
            version=run.progress.version,
            transitions=[history[seq] for seq in sequences],
            sequences=sequences,
            single_config=run.state.plan is not None and not run.state.plan.changes,
        ),
        summary=f"audit {len(sequences)} transition(s)",
    )


def upsert_search_attributes(run: RolloutRun) -> None:
    """Upsert the attributes whose value changed (each upsert is a history event)."""
    progress = run.progress
    changes = run.state.search_attribute_changes(
        {
            STATE_ATTRIBUTE.name: progress.state,
            PATH_ATTRIBUTE.name: progress.path,
            VERSION_ATTRIBUTE.name: progress.version,
            STAGE_ATTRIBUTE.name: progress.stage_name,
        }
    )
    updates: list[SearchAttributeUpdate[Any]] = [
        _SEARCH_ATTRIBUTE_KEYS[name].value_set(value) for name, value in changes.items()
    ]
    paths, run.state.pending_paths = run.state.pending_paths, []
    if paths:
        updates.append(PATHS_ATTRIBUTE.value_set(paths))
    if updates:
        workflow.upsert_search_attributes(updates)
