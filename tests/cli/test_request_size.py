"""A rollout request over MAX_REQUEST_BYTES is refused the same way through every door: the CLI
(`tempoconf rollout start FILE`, direct mode), the Temporal CLI (`temporal workflow start
--input-file`: the workflow fails at prepare) and the admin API (400), each with the message of
parse_rollout_request naming its size and the limit.

Before, a 1.5 MB value went through `temporal workflow start` and was promoted while the admin
API answered 413, and a 3.5 MB one was refused by Temporal's blob limit, not by tempoconf.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.canonical import canonical_json
from tempoconf.rollout.request import MAX_REQUEST_BYTES
from tests.cli.conftest import RunningDev
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(180)

VALUE_BYTES = 1_500_000


def large_request(dev: RunningDev, name: str) -> tuple[str, dict[str, Any], Path, str]:
    """(path, request, its file, the message every door must give): a 1.5 MB value. The file
    is written with whitespace, as a person would: the limit is on the canonical JSON."""
    path = f"cli/size-{name}-{uuid.uuid4().hex[:8]}"
    request = {
        "path": path,
        "value": {"blob": "x" * VALUE_BYTES},
        "stages": [{"channel": "canary", "cooldown": "1s"}],
    }
    size = len(canonical_json(request).encode("utf-8"))
    assert size > MAX_REQUEST_BYTES
    message = (
        f"/value: the rollout request is {size:,} bytes as JSON; a rollout request is at most "
        f"1,048,576 bytes (1 MiB)"
    )
    request_file = dev.workdir / f"{name}.json"
    request_file.write_text(json.dumps(request, indent=2), encoding="utf-8")
    return path, request, request_file, message


def test_the_cli_refuses_it_before_starting(dev: RunningDev) -> None:
    path, _, request_file, message = large_request(dev, "cli")

    refused = dev.cli("rollout", "start", request_file)

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert message in refused.stderr, refused.stderr
    assert "nothing was started." in refused.stderr
    assert dev.temporal(
        "workflow", "describe", "-w", f"rollout:default/{path}", ok=False
    ).returncode


def test_temporal_workflow_start_fails_at_prepare_with_the_same_message(dev: RunningDev) -> None:
    path, _, request_file, message = large_request(dev, "temporal")
    workflow_id = f"rollout:default/{path}"

    dev.temporal(
        "workflow", "start", "--type", "ConfigRollout", "--task-queue", "tempoconf",
        "--fail-existing", "--workflow-id", workflow_id, "--input-file", str(request_file),
    )  # fmt: skip

    def failed() -> str:
        described = dev.temporal("workflow", "describe", "-w", workflow_id, "-o", "json")
        status = str(json.loads(described.stdout)["workflowExecutionInfo"]["status"])
        assert status == "WORKFLOW_EXECUTION_STATUS_FAILED", status
        return status

    eventually_sync(failed, what=f"{workflow_id} to fail")
    result = dev.temporal("workflow", "result", "-w", workflow_id, "-o", "json", ok=False)
    assert result.returncode == 1, result.stdout + result.stderr
    failure = json.loads(result.stdout)["closeEvent"]["workflowExecutionFailedEventAttributes"]
    text = json.dumps(failure)
    assert message in text, text[:2000]
    assert "InvalidRolloutRequest" in text
    status = dev.cli("rollout", "status", path)
    assert "promoted" not in status.stdout and message in status.stdout + status.stderr


def test_the_admin_api_refuses_it_with_400_and_the_same_message(dev: RunningDev) -> None:
    path, _, request_file, message = large_request(dev, "api")

    answer = httpx.post(
        f"{dev.api_url}/v1/admin/rollouts",
        content=request_file.read_bytes(),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )

    assert answer.status_code == 400, (answer.status_code, answer.text[:500])
    assert message in answer.text
