"""A rollout's outcome as Temporal's close status, and back (docs/contract.md, The workflow).

Promoted and bypassed rollouts complete with their `RolloutResult`. The others do not, so that
Temporal's own views (the Web UI's list and Failures filter, `temporal workflow list`, the SDK's
`workflow_failed` / `workflow_canceled` metrics) tell them apart with no setup:

- reverted (unhealthy, apply timeout, a step failed) fails with a non-retryable
  `ApplicationError` of type `RolloutReverted`, halted with `RolloutHalted`: the message says what
  happened and why, the details carry the result;
- cancelled (Temporal's cancel request) ends Canceled, the only way the Python SDK ends a run so;
  a cancellation carries no details, so the run upserts its result into the memo `result` first.

`rollout_ending` is the one function that turns a closed run back into the result: the CLI (both
backends, through the admin API's answer), the API, the demo, the benches and the tests read a
run's end through it, or through `await_rollout_ending`, which waits for the end and reads it.

Workflow-safe at import (the workflow builds its failure here): Temporal's client and exception
modules are imported where they are used, so the API-mode CLI, which reads results over HTTP,
never loads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tempoconf.rollout.progress import Outcome, RolloutResult

if TYPE_CHECKING:
    from temporalio.client import WorkflowExecutionDescription, WorkflowHandle
    from temporalio.exceptions import ApplicationError

__all__ = [
    "COMPLETED_OUTCOMES",
    "RESULT_MEMO",
    "ROLLOUT_HALTED_ERROR",
    "ROLLOUT_REVERTED_ERROR",
    "RolloutEnding",
    "await_rollout_ending",
    "ending_error",
    "ending_message",
    "result_from_json",
    "result_json",
    "rollout_ending",
]

ROLLOUT_REVERTED_ERROR = "RolloutReverted"
"""The error type a reverted rollout fails with (unhealthy, apply timeout, a step failed)."""
ROLLOUT_HALTED_ERROR = "RolloutHalted"
"""The error type a halted rollout fails with."""
RESULT_MEMO = "result"
"""The memo key a cancelled rollout's result is kept under (a cancellation carries no details)."""
COMPLETED_OUTCOMES = frozenset({Outcome.PROMOTED, Outcome.BYPASSED})
"""The outcomes a run completes with; every other outcome fails it or ends it cancelled."""
_ERROR_TYPES = {Outcome.REVERTED: ROLLOUT_REVERTED_ERROR, Outcome.HALTED: ROLLOUT_HALTED_ERROR}


def result_json(result: RolloutResult) -> dict[str, Any]:
    """The result as the workflow's completion, a failure's details and the memo carry it."""
    return {
        "outcome": result.outcome.value,
        "version": result.version,
        "reason": result.reason,
        "stable_version": result.stable_version,
    }


def result_from_json(value: Any) -> RolloutResult | None:
    """The result in `value` (a completion, a failure's detail, the memo); None when it holds
    none (an unknown outcome, another shape)."""
    if not isinstance(value, Mapping):
        return None
    try:
        outcome = Outcome(str(value.get("outcome")))
    except ValueError:
        return None
    version, stable = value.get("version"), value.get("stable_version")
    return RolloutResult(
        outcome=outcome,
        version=None if version is None else str(version),
        reason=str(value.get("reason") or ""),
        stable_version=None if stable is None else str(stable),
    )


def ending_message(result: RolloutResult, *, by: str = "") -> str:
    """What Temporal shows as a failed rollout's failure message (the Web UI, `temporal workflow
    describe`): the outcome, who halted it, why, and what every client gets now."""
    who = f" by {by}" if by and result.outcome is Outcome.HALTED else ""
    now = (
        f"every client is back on the stable version {result.stable_version}"
        if result.stable_version
        else "the config has no stable version: clients get 404"
    )
    return f"rollout {result.outcome.value}{who}: {result.reason}; {now}"


def ending_error(result: RolloutResult, *, by: str = "") -> ApplicationError:
    """The error a reverted or halted run fails with: non-retryable, typed, the result in its
    details."""
    from temporalio.exceptions import ApplicationError

    return ApplicationError(
        ending_message(result, by=by),
        result_json(result),
        type=_ERROR_TYPES[result.outcome],
        non_retryable=True,
    )


@dataclass(frozen=True)
class RolloutEnding:
    """How a closed run of `ConfigRollout` ended."""

    status: str
    """Temporal's close status: `completed`, `failed`, `canceled`, `terminated`, `timed_out`."""
    result: RolloutResult | None
    """The rollout's result; None when it ended without one (a refused request or failed prepare,
    a termination, a timeout, a cancellation of a run that kept no result)."""
    outcome: str
    """The result's outcome, else `failed`, `cancelled`, `terminated` or `timed_out` (or
    `completed` for a workflow whose result is no rollout's)."""
    reason: str
    """The result's reason, else the failure's message."""
    error_type: str = ""
    """The type of the ApplicationError a failed run failed with (`RolloutReverted`,
    `InvalidRolloutRequest`, ...)."""

    @property
    def result_json(self) -> dict[str, Any] | None:
        return None if self.result is None else result_json(self.result)

    @property
    def succeeded(self) -> bool:
        """Promoted or bypassed: the version was made stable."""
        return self.result is not None and self.result.outcome in COMPLETED_OUTCOMES


def rollout_ending(
    *,
    result: Any = None,
    failure: BaseException | None = None,
    memo: Mapping[str, Any] | None = None,
) -> RolloutEnding:
    """The ending of a closed run: its completion's `result`, or the `failure` its result raised
    (a `WorkflowFailureError`) with, for a cancellation, the run's `memo`."""
    if failure is None:
        parsed = result_from_json(result)
        if parsed is None:  # another workflow's (`rollout status --id` names any workflow)
            return RolloutEnding("completed", None, "completed", "its result is not a rollout's")
        return RolloutEnding("completed", parsed, parsed.outcome.value, parsed.reason)
    from temporalio.exceptions import (
        ApplicationError,
        CancelledError,
        TerminatedError,
    )
    from temporalio.exceptions import TimeoutError as WorkflowTimeoutError

    cause: BaseException | None = failure.__cause__ or failure
    if isinstance(cause, CancelledError):
        kept = result_from_json((memo or {}).get(RESULT_MEMO))
        if kept is not None:
            return RolloutEnding("canceled", kept, kept.outcome.value, kept.reason)
        return RolloutEnding("canceled", None, "cancelled", "the workflow was cancelled")
    if isinstance(cause, TerminatedError):
        return RolloutEnding(
            "terminated", None, "terminated", str(cause.message or "the workflow was terminated")
        )
    if isinstance(cause, WorkflowTimeoutError):
        return RolloutEnding(
            "timed_out", None, "timed_out", str(cause.message or "the workflow timed out")
        )
    if isinstance(cause, ApplicationError):
        error_type = cause.type or ""
        if error_type in _ERROR_TYPES.values() and cause.details:
            carried = result_from_json(cause.details[0])
            if carried is not None:
                return RolloutEnding(
                    "failed", carried, carried.outcome.value, carried.reason, error_type
                )
        return RolloutEnding("failed", None, "failed", str(cause.message or cause), error_type)
    # Anything else (a failure the workflow did not raise itself): its innermost message.
    while cause is not None and cause.__cause__ is not None:
        cause = cause.__cause__
    return RolloutEnding("failed", None, "failed", str(getattr(cause, "message", None) or cause))


async def await_rollout_ending(
    handle: WorkflowHandle[Any, Any],
    *,
    follow_runs: bool = True,
    description: WorkflowExecutionDescription | None = None,
    rpc_timeout: timedelta | None = None,
) -> RolloutEnding:
    """Wait for the run of `handle` to close (along its continue-as-new chain unless
    `follow_runs` is False) and read how it ended. A cancelled run's memo is read from
    `description` when given (the closed run's), else by describing the run that closed."""
    from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
    from temporalio.exceptions import CancelledError

    try:
        result = await handle.result(follow_runs=follow_runs, rpc_timeout=rpc_timeout)
    except WorkflowFailureError as failure:
        memo: Mapping[str, Any] = {}
        if isinstance(failure.__cause__ or failure, CancelledError):
            if description is None:
                description = await handle.describe(rpc_timeout=rpc_timeout)
                if description.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                    # The chain ended in a later run: the newest run of the id.
                    latest = handle._client.get_workflow_handle(handle.id)
                    description = await latest.describe(rpc_timeout=rpc_timeout)
            memo = await description.memo()
        return rollout_ending(failure=failure, memo=memo)
    return rollout_ending(result=result)
