"""tempoconf.rollout.outcomes: the failure a reverted or halted run ends with, and the one function that
reads any closed run back into its result. The failure goes through the worker's own data
converter both ways (tempoconf.temporal.payloads), as Temporal stores it and a client decodes it; the
end-to-end statuses are tests/cli/test_outcome_statuses.py's."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.failure.v1 import Failure
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    TerminatedError,
)
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError

from tempoconf.rollout.outcomes import (
    COMPLETED_OUTCOMES,
    RESULT_MEMO,
    RolloutEnding,
    ending_error,
    ending_message,
    result_json,
    rollout_ending,
)
from tempoconf.rollout.progress import Outcome, RolloutResult
from tempoconf.temporal.payloads import DATA_CONVERTER

HALTED = RolloutResult(Outcome.HALTED, "aaaa", "error rate up", "bbbb")
REVERTED = RolloutResult(Outcome.REVERTED, "aaaa", "stage canary is unhealthy: 5xx", None)


def as_a_client_sees_it(error: BaseException) -> WorkflowFailureError:
    """`error` raised by the workflow, stored by Temporal, and decoded by a client."""
    converter = DATA_CONVERTER.failure_converter
    failure = Failure()
    converter.to_failure(error, DATA_CONVERTER.payload_converter, failure)
    decoded = converter.from_failure(failure, DATA_CONVERTER.payload_converter)
    return WorkflowFailureError(cause=decoded)


def test_a_halted_or_reverted_run_fails_with_its_result_and_reads_back_into_it() -> None:
    for result, by, error_type, message in (
        (
            HALTED,
            "erin",
            "RolloutHalted",
            "rollout halted by erin: error rate up; every client is back on the stable version bbbb",
        ),
        (
            REVERTED,
            "workflow",
            "RolloutReverted",
            "rollout reverted: stage canary is unhealthy: 5xx; the config has no stable version: "
            "clients get 404",
        ),
    ):
        error = ending_error(result, by=by)
        assert (error.type, error.non_retryable, error.message) == (error_type, True, message)
        ending = rollout_ending(failure=as_a_client_sees_it(error))
        assert ending == RolloutEnding(
            "failed", result, result.outcome.value, result.reason, error_type
        )
        assert not ending.succeeded
        assert ending.result_json == result_json(result)


def test_completed_results_read_as_they_are_old_runs_outcomes_included() -> None:
    """Runs ended before the patch completed with every outcome: a completion is its result."""
    for result in (RolloutResult(Outcome.PROMOTED, "aaaa", "every stage passed", "aaaa"), HALTED):
        ending = rollout_ending(result=result_json(result))
        assert ending == RolloutEnding("completed", result, result.outcome.value, result.reason)
        assert ending.succeeded == (result.outcome in COMPLETED_OUTCOMES)
    # A result of before `stable_version` existed, and one that is no rollout's.
    old = rollout_ending(result={"outcome": "reverted", "version": "aaaa", "reason": "r"})
    assert old.result == RolloutResult(Outcome.REVERTED, "aaaa", "r", None)
    assert rollout_ending(result={"outcome": "exploded"}) == RolloutEnding(
        "completed", None, "completed", "its result is not a rollout's"
    )


def test_a_cancelled_run_reads_its_result_from_its_memo() -> None:
    cancelled = RolloutResult(Outcome.CANCELLED, "aaaa", "the workflow was cancelled", "bbbb")
    failure = WorkflowFailureError(cause=CancelledError("Workflow cancelled"))
    kept = rollout_ending(failure=failure, memo={RESULT_MEMO: result_json(cancelled)})
    assert kept == RolloutEnding("canceled", cancelled, "cancelled", "the workflow was cancelled")
    # A run cancelled before the patch kept no memo: still `cancelled`, without a result.
    assert rollout_ending(failure=failure, memo={}) == RolloutEnding(
        "canceled", None, "cancelled", "the workflow was cancelled"
    )


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (
            ApplicationError("bad request: /value: required", type="InvalidRolloutRequest"),
            RolloutEnding(
                "failed", None, "failed", "bad request: /value: required", "InvalidRolloutRequest"
            ),
        ),
        (
            # A typed failure without the result it should carry is still a failure, not a crash.
            ApplicationError("rollout halted", type="RolloutHalted"),
            RolloutEnding("failed", None, "failed", "rollout halted", "RolloutHalted"),
        ),
        (
            TerminatedError("operator pulled the plug"),
            RolloutEnding("terminated", None, "terminated", "operator pulled the plug"),
        ),
        (
            WorkflowTimeoutError("run timeout", type=None, last_heartbeat_details=[]),
            RolloutEnding("timed_out", None, "timed_out", "run timeout"),
        ),
    ],
)
def test_runs_that_ended_without_a_result_say_how(cause: Any, expected: RolloutEnding) -> None:
    assert rollout_ending(failure=as_a_client_sees_it(cause)) == expected


def test_message_names_who_only_for_a_halt() -> None:
    assert ending_message(REVERTED, by="workflow").startswith("rollout reverted: ")
    assert ending_message(HALTED, by="").startswith("rollout halted: error rate up; ")
