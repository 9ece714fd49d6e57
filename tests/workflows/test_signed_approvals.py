"""Signed approvals, live (a real Temporal server and worker): a rollout whose plan carries an
`approval_key` refuses an unsigned or forged `approve` update, ignores such a signal (noted in
its history), moves on with a valid signature of its key, and still halts without one; a rollout
without a key approves unsigned as before."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from tempoconf.access.signing import CommandSigner
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import status, wait_for_state

SIGNER = CommandSigner.generate()
FORGER = CommandSigner.generate()


def manual_request(**overrides: Any) -> dict[str, Any]:
    return {
        "path": f"signed/config-{uuid.uuid4().hex[:8]}",
        "value": {"max_connections": 2000},
        "stages": [
            {"channel": "canary", "cooldown": "0s", "manual": True},
            {"percentile": 50, "cooldown": "0s"},
        ],
        "author": "alice@example.com",
        **overrides,
    }


async def refusal(handle: WorkflowHandle[Any, Any], argument: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update("approve", argument)
    return str(caught.value.cause)


async def signed(
    signer: CommandSigner, handle: WorkflowHandle[Any, Any], by: str, digest: str, **at: Any
) -> dict[str, Any]:
    """An approve signed as the API signs it: bound to the run and the stage the status names."""
    when = datetime.now(UTC) + timedelta(**at)
    progress = await status(handle)
    fields = signer.sign_bound(
        by,
        handle.id,
        "approve",
        digest,
        rollout_run=progress["approval_run"],
        stage_index=progress["stage_index"],
        at=when,
    )
    return {"by": by, "digest": digest, **fields}


async def test_only_a_signed_approval_moves_a_rollout_with_a_key(
    rollout_harness: RolloutHarness,
) -> None:
    request = manual_request(approval_key=SIGNER.public_key)
    # The real clock: a signature's freshness is judged at the workflow's time, which skips ahead
    # of the wall clock while a time-skipping rollout waits.
    handle = await rollout_harness.start(request, real_clock=True)
    progress = await wait_for_state(handle, "awaiting_approval", stage_index=0)
    assert progress["signed_approvals"] is True
    digest = progress["digest"]

    unsigned = await refusal(handle, {"by": "bob", "digest": digest})
    assert unsigned == (
        "cannot approve: this rollout takes approvals only through the tempoconf API (its access "
        f"policy signs them); approve with `tempoconf rollout approve {request['path']}` or "
        f"POST /v1/admin/rollouts/{request['path']}:approve"
    )
    forged = await refusal(handle, await signed(FORGER, handle, "bob", digest))
    assert "the signature is not valid for this approval" in forged, forged
    # a real signature of another identity, replayed under bob's name
    replayed = {**await signed(SIGNER, handle, "carol", digest), "by": "bob"}
    assert "not valid for this approval" in await refusal(handle, replayed)
    stale = await refusal(handle, await signed(SIGNER, handle, "bob", digest, minutes=-11))
    assert "the signature is stale" in stale, stale

    # a signal cannot be refused: it is ignored, and the history says why
    await handle.signal("approve", {"by": "bob", "digest": digest})

    async def noted() -> dict[str, Any]:
        progress = await status(handle)
        reasons = [row["reason"] for row in progress["history"]]
        assert any(
            reason.startswith("approve ignored: this rollout takes approvals only through")
            for reason in reasons
        ), reasons
        return progress

    progress = await eventually(noted, what="the unsigned signal to be noted")
    assert progress["state"] == "awaiting_approval" and progress["approved"] is False

    approved = await handle.execute_update("approve", await signed(SIGNER, handle, "bob", digest))
    assert approved["accepted"] is True, approved
    assert (await rollout_result(handle))["outcome"] == "promoted"


async def test_a_halt_needs_no_signature(rollout_harness: RolloutHarness) -> None:
    handle = await rollout_harness.start(
        manual_request(approval_key=SIGNER.public_key), real_clock=True
    )
    await wait_for_state(handle, "awaiting_approval", stage_index=0)
    await handle.signal("halt", {"reason": "wrong value", "by": "oncall"})
    result = await rollout_result(handle)
    assert result["outcome"] == "halted" and result["reason"] == "wrong value", result


async def test_a_rollout_without_a_key_approves_unsigned_as_before(
    rollout_harness: RolloutHarness,
) -> None:
    handle = await rollout_harness.start(manual_request())
    progress = await wait_for_state(handle, "awaiting_approval", stage_index=0)
    assert progress["signed_approvals"] is False
    approved = await handle.execute_update("approve", {"by": "bob"})
    assert approved["accepted"] is True, approved
    assert (await rollout_result(handle))["outcome"] == "promoted"
