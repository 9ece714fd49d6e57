"""Signed approvals end to end: an API whose access policy signs commands, over real HTTP, a
real Temporal server and worker, and the venv's Temporal CLI. The API starts the rollout with its
key; an approval through the Temporal CLI is refused, `tempoconf rollout approve` in direct mode
says to go through the API, an approval through the API moves the stage, and a halt through the
Temporal CLI still works."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx

from tempoconf.access.signing import CommandSigner
from tempoconf.settings import Settings
from tempoconf.temporal.binaries import temporal_cli_path
from tests.cli.conftest import TEMPOCONF, cli_env
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.workflows.test_rollout import status, wait_for_state

TOKENS = {"alice": "alice-secret", "bob": "bob-secret"}
ROLES = {"alice": "operator", "bob": "approver"}


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


async def run(*command: str | Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """A process's exit code and output; awaited, so the worker on this loop keeps working."""
    process = await asyncio.create_subprocess_exec(
        *map(str, command),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


async def test_approve_through_the_api_only_and_halt_through_the_temporal_cli(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> None:
    address = rollout_harness.env.client.service_client.config.target_host
    settings = Settings(
        data_dir=tmp_path,
        temporal_address=address,
        task_queue=rollout_harness.task_queue,
        access_file=write_policy(
            tmp_path / "policy",
            tokens={who: (TOKENS[who], [(["default"], [ROLES[who]])]) for who in TOKENS},
        ),
    )
    path = f"signed/e2e-{uuid.uuid4().hex[:8]}"
    request: dict[str, Any] = {
        "path": path,
        "value": {"max_connections": 2000},
        "stages": [
            {"channel": "canary", "cooldown": "0s", "manual": True},
            {"percentile": 50, "cooldown": "0s", "manual": True},
        ],
        "author": "alice@example.com",
    }
    temporal = [temporal_cli_path(), "workflow"]
    async with live_api(rollout_harness.store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            other = CommandSigner.generate().public_key
            refused = await http.post(
                "/v1/admin/rollouts",
                json={**request, "approval_key": other},
                headers=bearer("alice"),
            )
            assert refused.status_code == 400, refused.text
            assert "is not this API's signing key" in refused.json()["error"]
            own = await http.post(
                f"/v1/admin/rollouts/{path}:approve",
                json={"signature": "x"},
                headers=bearer("bob"),
            )
            assert own.status_code == 400 and "the API signs commands itself" in own.text

            started = await http.post("/v1/admin/rollouts", json=request, headers=bearer("alice"))
            assert started.status_code == 202, started.text
            workflow_id = started.json()["workflow_id"]
            handle = rollout_harness.client.get_workflow_handle(workflow_id)
            progress = await wait_for_state(handle, "awaiting_approval", stage_index=0)
            assert progress["signed_approvals"] is True
            digest = progress["digest"]

            # the Temporal CLI cannot sign: its approve is refused, with the validator's message
            argument = json.dumps({"by": "bob", "digest": digest})
            code, output = await run(
                *temporal, "update", "execute", "--address", address, "-w", workflow_id,
                "--name", "approve", "--input", argument,
            )  # fmt: skip
            assert code != 0, output
            assert "takes approvals only through the tempoconf API" in output, output
            assert f"tempoconf rollout approve {path}" in output, output

            # nor can tempoconf in direct mode (Temporal itself, no API): it says what to do
            direct = cli_env(TEMPORAL_ADDRESS=address, TEMPOCONF_DATA_DIR=str(tmp_path))
            code, output = await run(
                TEMPOCONF, "rollout", "approve", path, "--id", workflow_id, "--digest", digest,
                env=direct,
            )  # fmt: skip
            assert code == 1, output
            assert "takes approvals only through the tempoconf API" in output, output
            assert "cannot sign: set TEMPOCONF_API_URL" in output, output
            assert (await status(handle))["stage_index"] == 0

            # the API signs bob's approval: the stage moves on
            approved = await http.post(
                f"/v1/admin/rollouts/{path}:approve",
                json={"digest": digest, "reason": "reviewed"},
                headers=bearer("bob"),
            )
            assert approved.status_code == 200, approved.text
            assert approved.json()["accepted"] is True
            await wait_for_state(handle, "awaiting_approval", stage_index=1)
            rows = [row for row in (await status(handle))["history"] if row["by"] == "bob"]
            assert rows and rows[-1]["details"]["approval"]["signature"], rows

            # a halt needs no signature: the way back is always open
            code, output = await run(
                *temporal, "signal", "--address", address, "-w", workflow_id,
                "--name", "halt", "--input", json.dumps({"reason": "enough", "by": "oncall"}),
            )  # fmt: skip
            assert code == 0, output
            result = await rollout_result(handle)
            assert result["outcome"] == "halted" and result["reason"] == "enough", result
