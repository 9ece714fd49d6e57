"""Four eyes, live (a real Temporal server, a real worker, the store on SQLite and PostgreSQL):
approvals bound to the plan's digest, from distinct identities, never the author's; each one an
audit row; halt and bypass still work at any time; a plain manual stage as before."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tempoconf.canonical import version_id
from tempoconf.rollout.digest import plan_digest
from tempoconf.rollout.plan import plan_from_request
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE
from tests.fixtures.temporal import rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import status, wait_for_state

NEW_VALUE = {"max_connections": 2000}
RANDOM_DIGEST = "sha256:" + "0123456789abcdef" * 2


class Stack:
    def __init__(self, env: WorkflowEnvironment, store: Store, task_queue: str) -> None:
        self.env, self.store, self.task_queue = env, store, task_queue

    async def start(self, request: dict[str, Any]) -> WorkflowHandle[Any, Any]:
        return await self.env.client.start_workflow(
            WORKFLOW_TYPE,
            request,
            id=f"approvals-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
        )


@pytest_asyncio.fixture
async def stack(temporal_env: WorkflowEnvironment, store: Store) -> AsyncIterator[Stack]:
    """A worker on its own task queue over a fresh store, once per backend (database_url)."""
    from tempoconf.cli.worker import build_worker

    task_queue = f"approvals-{uuid.uuid4().hex[:8]}"
    worker: Worker = build_worker(temporal_env.client, store, task_queue=task_queue)
    async with worker:
        yield Stack(temporal_env, store, task_queue)


def four_eyes_request(path: str, **overrides: Any) -> dict[str, Any]:
    return {
        "path": path,
        "value": NEW_VALUE,
        "stages": [
            {"channel": "canary", "cooldown": "0s", "manual": True,
             "approvals": {"required": 2, "forbid_author": True}},
            {"percentile": 50, "cooldown": "0s"},
        ],
        "author": "alice@example.com",
        "message": "raise max_connections",
        **overrides,
    }  # fmt: skip


def digest_of(request: dict[str, Any]) -> str:
    """What `tempoconf rollout plan` prints for `request`."""
    parsed = parse_rollout_request(request)
    return plan_digest(plan_from_request(parsed, version_id(parsed.value)))


async def refused(handle: WorkflowHandle[Any, Any], argument: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update("approve", argument)
    return str(caught.value.cause)


def unique_path() -> str:
    return f"fourEyes/config-{uuid.uuid4().hex[:8]}".lower()


async def test_two_distinct_approvers_bound_to_the_plan_advance_the_stage(stack: Stack) -> None:
    path = unique_path()
    request = four_eyes_request(path)
    digest = digest_of(request)
    handle = await stack.start(request)
    progress = await wait_for_state(handle, "awaiting_approval", stage_index=0)
    assert progress["digest"] == digest
    assert progress["stages"][0]["approvals_required"] == 2

    # a stale digest: the request edited (another value) and planned again, or a random one
    stale = digest_of(four_eyes_request(path, value={"max_connections": 3000}))
    assert stale != digest
    for wrong in (stale, RANDOM_DIGEST):
        message = await refused(handle, {"by": "bob", "digest": wrong})
        assert wrong in message and digest in message, message
        assert "is not the running rollout's" in message
    assert "not a plan digest" in await refused(handle, {"by": "bob", "digest": "sha256:abc"})
    # four eyes approve what they saw: the digest is required, and an identity
    assert "give the digest of the plan you reviewed" in await refused(handle, {"by": "bob"})
    assert "needs an identity" in await refused(handle, {"digest": digest})
    # the author, under any form of the name, may not approve
    for author in ("alice@example.com", "alice", "Alice@laptop"):
        message = await refused(handle, {"by": author, "digest": digest})
        assert f"{author} is the rollout's author (alice@example.com)" in message, message

    first = await handle.execute_update(
        "approve", {"by": "bob", "digest": digest, "reason": "diff reviewed"}
    )
    assert first["accepted"] is True and first["state"] == "awaiting_approval", first
    assert first["message"] == (
        f"approval 1/2 of channel:canary of plan {digest}: diff reviewed; "
        "waiting for more approvals"
    )
    progress = await status(handle)
    assert [approval["by"] for approval in progress["approvals"]] == ["bob"]
    # the same identity twice: refused by the validator; as a signal, ignored and said why
    message = await refused(handle, {"by": "bob", "digest": digest})
    assert "bob approved it already (1/2)" in message, message
    await handle.signal("approve", {"by": "BOB", "digest": digest})

    async def noted() -> bool:
        history = (await status(handle))["history"]
        return any(
            row["reason"].startswith("approve ignored channel:canary: bob approved it already")
            and row["by"] == "BOB"
            for row in history
        )

    await eventually(noted, what="the ignored signal in the history")
    assert (await status(handle))["state"] == "awaiting_approval"

    second = await handle.execute_update(
        "approve", {"by": "carol", "digest": digest, "reason": "lgtm"}
    )
    assert second["accepted"] is True, second
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"

    rows = [entry for entry in stack.store.history("default", path) if "approval" in entry.details]
    assert [(row.actor, row.action, row.details["approval"]) for row in rows] == [
        ("bob", "rollout.command",
         {"identity": "bob", "digest": digest, "reason": "diff reviewed",
          "stage": "channel:canary", "stage_index": 0}),
        ("carol", "rollout.command",
         {"identity": "carol", "digest": digest, "reason": "lgtm",
          "stage": "channel:canary", "stage_index": 0}),
    ]  # fmt: skip
    assert rows[0].reason == f"approval 1/2 of channel:canary of plan {digest}: diff reviewed"


async def test_halt_and_bypass_work_between_approvals(stack: Stack) -> None:
    halted_path, bypassed_path = unique_path(), unique_path()
    halted = await stack.start(four_eyes_request(halted_path))
    bypassed = await stack.start(four_eyes_request(bypassed_path))
    for handle, path in ((halted, halted_path), (bypassed, bypassed_path)):
        await wait_for_state(handle, "awaiting_approval", stage_index=0)
        digest = digest_of(four_eyes_request(path))
        await handle.execute_update("approve", {"by": "bob", "digest": digest})

    # neither takes a digest: a halt is never refused for a stale one
    await halted.execute_update("halt", {"reason": "stop", "by": "dave", "digest": RANDOM_DIGEST})
    assert (await rollout_result(halted))["outcome"] == "halted"
    await bypassed.execute_update("bypass", {"reason": "hotfix", "by": "dave"})
    assert (await rollout_result(bypassed))["outcome"] == "bypassed"


async def test_a_plain_manual_stage_takes_one_approve_and_checks_a_digest_if_given(
    stack: Stack,
) -> None:
    path = unique_path()
    request = {
        "path": path,
        "value": NEW_VALUE,
        "stages": [{"channel": "canary", "cooldown": "0s", "manual": True}],
    }
    handle = await stack.start(request)
    await wait_for_state(handle, "awaiting_approval", stage_index=0)
    digest = digest_of(request)
    message = await refused(handle, {"digest": RANDOM_DIGEST})
    assert RANDOM_DIGEST in message and digest in message
    # no identity needed, the author may approve, one approval is enough
    answer = await handle.execute_update("approve", {"digest": digest})
    assert answer["accepted"] is True
    assert (await rollout_result(handle))["outcome"] == "promoted"
