"""An activity that fails on the store reaches Temporal with a short, readable failure (issue 12,
hole 8): the error's class and first line, not SQLAlchemy's whole text with its SQL, which made
`temporal workflow describe` show "Failure exceeds size limit." instead of the cause."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from tempoconf.activities.failures import (
    MAX_FAILURE_MESSAGE,
    OriginalErrorLogFilter,
    short_message,
)
from tests.fixtures.temporal import RolloutHarness
from tests.workflows.test_rollout import example_request, unique_path


async def activity_failures(handle: Any, name: str) -> list[Failure]:
    """The failures of activity `name` in the workflow's history, as Temporal keeps them."""
    scheduled: dict[int, str] = {}
    failures = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            attributes = event.activity_task_failed_event_attributes
            if scheduled.get(attributes.scheduled_event_id) == name:
                failures.append(attributes.failure)
    return failures


async def test_a_store_error_in_an_activity_is_a_short_failure_naming_its_cause(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> None:
    # A real store failure (SQLite refuses the rollout's row) under a long request, whose text
    # SQLAlchemy would quote in its message along with the SQL.
    with contextlib.closing(sqlite3.connect(tmp_path / "tempoconf.db")) as connection:
        connection.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON rollout "
            "BEGIN SELECT RAISE(ABORT, 'the disk is on fire'); END"
        )
        connection.commit()
    request = example_request(unique_path(), message="m" * 1900, commit="c" * 200)

    handle = await rollout_harness.start(request)
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    # Attempts fail their workflow task's activity only on the last; the last is in the history.
    [failure] = await activity_failures(handle, "prepare_rollout")
    print(f"\nprepare's failure in the history: {len(failure.message)} chars: {failure.message}")
    assert failure.message == "(sqlite3.IntegrityError) the disk is on fire"
    assert failure.application_failure_info.type == "IntegrityError"
    assert "[SQL:" not in failure.message and "INSERT" not in failure.message
    assert not failure.HasField("cause")  # the long original is not carried as a cause either
    assert len(failure.SerializeToString()) < 4096, len(failure.SerializeToString())


def test_a_short_message_is_the_first_line_truncated() -> None:
    assert short_message(ValueError("first\nsecond")) == "first"
    assert short_message(RuntimeError()) == "RuntimeError"
    long = short_message(ValueError("x" * 10_000))
    assert len(long) == MAX_FAILURE_MESSAGE and long.endswith("…")


def test_the_workers_log_record_of_a_shortened_failure_shows_the_original_error() -> None:
    original = ValueError("the whole story\n[SQL: ...]")
    short = ApplicationError(short_message(original), type="ValueError")
    short.original = original  # type: ignore[attr-defined]  # as ShortFailures sets it
    record = logging.LogRecord(
        "temporalio.activity", logging.WARNING, __file__, 1, "Completing activity as failed",
        None, (ApplicationError, short, None),
    )  # fmt: skip

    assert OriginalErrorLogFilter().filter(record)
    assert record.exc_info is not None and record.exc_info[1] is original
