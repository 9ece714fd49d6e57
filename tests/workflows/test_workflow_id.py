"""A rollout refuses a workflow id the store cannot keep (a NUL: PostgreSQL's text cannot hold it).

The API refuses such an id (`?workflow_id=`); a start with the Temporal CLI or an SDK reached the
store instead: its prepare wrote the id into the lock and audit rows (SQLite kept them, PostgreSQL
refused them and the activity was retried for a minute). Now the workflow fails at once as the
non-retryable InvalidRolloutRequest naming the id, with nothing stored and no lock; on both
backends, through the real dev server and worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tempoconf.rollout.activity_io import INVALID_REQUEST_ERROR
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE
from tests.fixtures.temporal import rollout_result

NAMESPACE = "default"
TIMEOUT = 60.0
"""Generous: the refusal is one workflow task, no activity."""


@pytest_asyncio.fixture
async def worker_on(
    temporal_env: WorkflowEnvironment, store: Store
) -> AsyncIterator[tuple[Client, Store, str]]:
    from tempoconf.cli.worker import build_worker

    task_queue = f"tempoconf-test-{uuid.uuid4().hex[:8]}"
    async with build_worker(temporal_env.client, store, task_queue=task_queue):
        yield temporal_env.client, store, task_queue


async def test_a_workflow_id_with_a_nul_is_refused_at_once_and_nothing_is_stored(
    worker_on: tuple[Client, Store, str],
) -> None:
    client, store, task_queue = worker_on
    path = f"test/nul_id_{uuid.uuid4().hex[:8]}"
    workflow_id = f"rollout:{NAMESPACE}/{path}\x00evil"
    request = {"path": path, "value": {"max_connections": 2000}, "stages": [{"channel": "canary"}]}
    handle = await client.start_workflow(
        WORKFLOW_TYPE, request, id=workflow_id, task_queue=task_queue
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), timeout=TIMEOUT)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert cause.type == INVALID_REQUEST_ERROR, f"{cause.type}: {cause.message}"
    assert cause.non_retryable
    assert ascii(workflow_id) in cause.message, cause.message  # named, its NUL shown as \x00
    assert "NUL" in cause.message, cause.message
    print(f"\nrefused: {cause.message}")

    history = [event.event_type async for event in handle.fetch_history_events()]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in history, "an activity ran"
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in history
    # Nothing stored, no lock: the config is free for a rollout under a proper id.
    assert store.get_lock(NAMESPACE, path) is None
    assert store.get_rollout(NAMESPACE, path) is None
    assert store.list_versions(NAMESPACE, path) == []
    assert store.history(NAMESPACE, path) == []
    valid = await client.start_workflow(
        WORKFLOW_TYPE, request | {"stages": []}, id=f"rollout:{NAMESPACE}/{path}",
        task_queue=task_queue,
    )  # fmt: skip
    result = await asyncio.wait_for(rollout_result(valid), timeout=TIMEOUT)
    assert result["outcome"] == "promoted"
