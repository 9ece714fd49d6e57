"""A signed approval binds what it approves (issue 41): taken from the workflow's history with
`temporal workflow show` and sent again with the Temporal CLI, as an attacker who reads the
history would, an approval the API signed counts neither a second time, nor for the next stage,
nor on a new run of the same workflow id. Over real HTTP, a real Temporal server and worker, and
the venv's Temporal CLI; the API signs each approval in the form the run's status asks for."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tempoconf.settings import Settings
from tempoconf.temporal.binaries import temporal_cli_path
from tests.api.test_signed_approvals import run
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import status, wait_for_state

TOKENS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
ROLES = {"alice": ["operator"], "bob": ["approver"], "carol": ["approver"]}


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


@dataclass
class Stack:
    http: httpx.AsyncClient
    harness: RolloutHarness
    address: str

    async def temporal(self, *arguments: str) -> tuple[int, str]:
        return await run(temporal_cli_path(), "workflow", *arguments, "--address", self.address)

    async def captured_approvals(self, workflow_id: str) -> list[dict[str, Any]]:
        """Every approve update's argument in the workflow's history, as `temporal workflow show
        -o json` prints it (anyone who may read the history can)."""
        code, output = await self.temporal("show", "-w", workflow_id, "-o", "json")
        assert code == 0, output
        found = []
        for event in json.loads(output)["events"]:
            accepted = event.get("workflowExecutionUpdateAcceptedEventAttributes")
            if accepted and accepted["acceptedRequest"]["input"]["name"] == "approve":
                payload = accepted["acceptedRequest"]["input"]["args"]["payloads"][0]
                found.append(json.loads(base64.b64decode(payload["data"])))
        return found

    async def resend(self, workflow_id: str, argument: dict[str, Any], *, as_signal: bool = False):
        """`argument` sent again through the Temporal CLI: (exit code, output)."""
        kind = ("signal",) if as_signal else ("update", "execute")
        return await self.temporal(
            *kind, "-w", workflow_id, "--name", "approve", "--input", json.dumps(argument)
        )


@asynccontextmanager
async def api_stack(harness: RolloutHarness, tmp_path: Path) -> AsyncIterator[Stack]:
    address = harness.env.client.service_client.config.target_host
    settings = Settings(
        data_dir=tmp_path,
        temporal_address=address,
        task_queue=harness.task_queue,
        access_file=write_policy(
            tmp_path / "policy",
            tokens={who: (TOKENS[who], [(["default"], ROLES[who])]) for who in TOKENS},
        ),
    )
    async with live_api(harness.store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            yield Stack(http, harness, address)


def request_of(path: str, *, first_approvals: int = 1) -> dict[str, Any]:
    first: dict[str, Any] = {"channel": "canary", "cooldown": "0s", "manual": True}
    if first_approvals > 1:
        first["approvals"] = {"required": first_approvals}
    return {
        "path": path,
        "value": {"max_connections": 2000},
        "stages": [first, {"percentile": 50, "cooldown": "0s", "manual": True}],
        "author": "alice@example.com",
    }


async def start(stack: Stack, request: dict[str, Any]) -> str:
    started = await stack.http.post("/v1/admin/rollouts", json=request, headers=bearer("alice"))
    assert started.status_code == 202, started.text
    workflow_id: str = started.json()["workflow_id"]
    return workflow_id


async def approve(stack: Stack, path: str, who: str, digest: str) -> dict[str, Any]:
    approved = await stack.http.post(
        f"/v1/admin/rollouts/{path}:approve",
        json={"digest": digest, "reason": f"{who} reviewed it"},
        headers=bearer(who),
    )
    assert approved.status_code == 200, approved.text
    answer: dict[str, Any] = approved.json()
    assert answer["accepted"] is True, answer
    return answer


async def test_a_captured_approval_does_not_approve_the_next_stage(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> None:
    path = f"bound/next-stage-{uuid.uuid4().hex[:8]}"
    async with api_stack(rollout_harness, tmp_path) as stack:
        workflow_id = await start(stack, request_of(path))
        handle = rollout_harness.client.get_workflow_handle(workflow_id)
        digest = (await wait_for_state(handle, "awaiting_approval", stage_index=0))["digest"]
        info = await handle.describe()
        await approve(stack, path, "bob", digest)
        await wait_for_state(handle, "awaiting_approval", stage_index=1)

        [captured] = await stack.captured_approvals(workflow_id)
        code, output = await stack.resend(workflow_id, captured)
        assert code != 0, f"stage 1's approval, sent again, approved stage 2: {output}"
        assert (
            "this signed approval was given for stage 1, and the rollout is at stage 2/2 50%: an "
            "approval counts only for the stage it was given for" in output
        ), output
        assert (captured["by"], captured["stage_index"], captured["rollout_run"]) == (
            "bob",
            0,
            info.run_id,
        ), captured
        # a signal cannot be refused: ignored, and the history says why
        code, output = await stack.resend(workflow_id, captured, as_signal=True)
        assert code == 0, output

        async def noted() -> dict[str, Any]:
            progress = await status(handle)
            reasons = [row["reason"] for row in progress["history"]]
            assert any(
                reason.startswith("approve ignored: this signed approval was given for stage 1")
                for reason in reasons
            ), reasons
            return progress

        progress = await eventually(noted, what="the replayed signal to be noted")
        assert (progress["state"], progress["stage_index"]) == ("awaiting_approval", 1)
        assert progress["approved"] is False

        # the approval of stage 2 through the API counts, and names its stage
        answer = await approve(stack, path, "carol", digest)
        assert answer["message"].startswith("approved 50%") or answer["state"] == "promoted"
        assert (await rollout_result(handle))["outcome"] == "promoted"
        history = await stack.http.get(f"/v1/admin/history/{path}", headers=bearer("alice"))
        approvals = [
            row["details"]["approval"]
            for row in history.json()["entries"]
            if "approval" in row.get("details", {})
        ]
        assert [(a["identity"], a["stage"], a["stage_index"]) for a in approvals] == [
            ("bob", "channel:canary", 0),
            ("carol", "50%", 1),
        ], approvals
        assert all(a["nonce"] and a["rollout_run"] == info.run_id for a in approvals), approvals
        # the rollout's run is its first run's id, which the API read from the status to sign
        assert (await status(handle))["approval_run"] == info.run_id


async def test_a_captured_approval_counts_once(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> None:
    path = f"bound/once-{uuid.uuid4().hex[:8]}"
    async with api_stack(rollout_harness, tmp_path) as stack:
        workflow_id = await start(stack, request_of(path, first_approvals=2))
        handle = rollout_harness.client.get_workflow_handle(workflow_id)
        digest = (await wait_for_state(handle, "awaiting_approval", stage_index=0))["digest"]
        await approve(stack, path, "bob", digest)
        [captured] = await stack.captured_approvals(workflow_id)

        code, output = await stack.resend(workflow_id, captured)
        assert code != 0, output
        assert (
            f"this signed approval (nonce {captured.get('nonce')}) was taken already" in output
        ), output
        progress = await status(handle)
        assert [approval["by"] for approval in progress["approvals"]] == ["bob"]
        assert (progress["state"], progress["stage_index"]) == ("awaiting_approval", 0)


async def test_a_captured_approval_does_not_count_on_a_new_run(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> None:
    path = f"bound/new-run-{uuid.uuid4().hex[:8]}"
    request = request_of(path)
    async with api_stack(rollout_harness, tmp_path) as stack:
        workflow_id = await start(stack, request)
        first = rollout_harness.client.get_workflow_handle(workflow_id)
        digest = (await wait_for_state(first, "awaiting_approval", stage_index=0))["digest"]
        await approve(stack, path, "bob", digest)
        await wait_for_state(first, "awaiting_approval", stage_index=1)
        [captured] = await stack.captured_approvals(workflow_id)
        halted = await stack.http.post(
            f"/v1/admin/rollouts/{path}:halt", json={"reason": "again"}, headers=bearer("alice")
        )
        assert halted.status_code == 200, halted.text
        assert (await rollout_result(first))["outcome"] == "halted"

        # the same request again: the same workflow id and the same plan digest, a new run
        assert await start(stack, request) == workflow_id
        second = rollout_harness.client.get_workflow_handle(workflow_id)
        progress = await wait_for_state(second, "awaiting_approval", stage_index=0)
        assert progress["digest"] == digest

        code, output = await stack.resend(workflow_id, captured)
        assert code != 0, f"the first run's approval, sent again, approved the new run: {output}"
        assert (
            f"this signed approval was given for another run of workflow {workflow_id!r} "
            f"(run {captured['rollout_run']}), not for this one (run {progress['approval_run']})"
            in output
        ), output
        progress = await status(second)
        assert (progress["state"], progress["stage_index"]) == ("awaiting_approval", 0)
        assert progress["approved"] is False
