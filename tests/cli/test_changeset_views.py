"""A changeset on a real `tempoconf dev` (issue 25): one plan digest in `rollout plan` (direct and
API mode), `POST /v1/admin/plans`, `rollout status` (both modes) and the Web UI's current details;
approvals bound to it move the changeset on; every view names every config with its version; the
Temporal CLI's workflow list finds the changeset by its second config (`TempoconfPaths`)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.canonical import version_id
from tempoconf.rollout.changesets import changeset_workflow_id
from tests.cli.conftest import RunningDev, run_cli, start_dev
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(240)

TOKENS = "bob:bob-secret,carol:carol-secret"
FRONTEND = {"api": "v2", "timeout_ms": 800}
BACKEND = {"api": "v2", "accepts": ["v1", "v2"]}
DIGEST = re.compile(r"^  digest     (sha256:[0-9a-f]{32})", re.MULTILINE)


def test_a_changeset_has_one_digest_everywhere_and_every_view_names_every_config(
    tmp_path: Path,
) -> None:
    dev = start_dev(tmp_path, variables={"TEMPOCONF_ADMIN_TOKENS": TOKENS})
    try:
        run_changeset(dev, tmp_path)
    finally:
        dev.stop()


def run_changeset(dev: RunningDev, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    frontend, backend = f"views/frontend-{suffix}", f"views/backend-{suffix}"
    request = {
        "changes": [{"path": frontend, "value": FRONTEND}, {"path": backend, "value": BACKEND}],
        "stages": [
            {"percentile": 50, "cooldown": "0s", "manual": True, "approvals": {"required": 2}}
        ],
        "author": "alice@example.com",
        "message": "both move to api v2",
    }
    file = tmp_path / "changeset.json"
    file.write_text(json.dumps(request), encoding="utf-8")
    api_mode = {**dev.env, "TEMPOCONF_ADMIN_TOKEN": "bob-secret"}

    def cli(*args: str, env: dict[str, str] = dev.env) -> str:
        done = run_cli(*args, env=env, cwd=dev.workdir)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    # -- the plan: one digest from both backends and the admin route; every config named
    direct_plan = cli("rollout", "plan", str(file))
    api_plan = cli("rollout", "plan", str(file), env=api_mode)
    [digest] = DIGEST.findall(direct_plan)
    assert DIGEST.findall(api_plan) == [digest], api_plan
    answer = httpx.post(
        f"{dev.api_url}/v1/admin/plans",
        json=request,
        headers={"Authorization": "Bearer bob-secret"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["digest"] == digest
    for plan in (direct_plan, api_plan):
        assert "for a changeset of 2 configs" in plan, plan
        for path, value in ((frontend, FRONTEND), (backend, BACKEND)):
            assert re.search(rf"config +default/{path} +version {version_id(value)} ", plan), plan
            assert f"value diff of default/{path} against stable:" in plan, plan
        assert '+  "timeout_ms": 800' in plan and '+  "accepts": [' in plan, plan

    # -- started: the start line names each config and its version
    started = cli("rollout", "start", str(file))
    assert (
        f"started the rollout of changeset of 2 configs: default/{frontend} to version "
        f"{version_id(FRONTEND)}, default/{backend} to version {version_id(BACKEND)}\n"
    ) in started, started
    workflow_id = changeset_workflow_id([("default", frontend), ("default", backend)])

    def awaiting() -> str:
        status = cli("rollout", "status", backend)
        assert "awaiting_approval" in status, status
        return status

    status = eventually_sync(awaiting, what="the changeset to await approvals", timeout=60)
    api_status = cli("rollout", "status", frontend, env=api_mode)
    for view in (status, api_status):
        assert DIGEST.findall(view) == [digest], view
        assert f"rollout of changeset of 2 configs  (workflow {workflow_id}" in view, view
        assert f"default/{frontend} {version_id(FRONTEND)}: first value" in view, view
        assert f"default/{backend} {version_id(BACKEND)}: first value" in view, view

    # -- what the Web UI shows: current details (the status query's digest), summary, details
    metadata = dev.temporal("workflow", "metadata", "-w", workflow_id).stdout
    assert f"plan digest `{digest}`" in metadata, metadata
    for path, value in ((frontend, FRONTEND), (backend, BACKEND)):
        assert f"- default/{path}: first value (`{version_id(value)}`)" in metadata, metadata
    described = json.loads(
        dev.temporal("workflow", "describe", "-w", workflow_id, "-o", "json").stdout
    )
    user_metadata: dict[str, Any] = described["executionConfig"]["userMetadata"]
    summary, details = user_metadata["summary"], user_metadata["details"]
    assert summary == (
        f"changeset of 2 configs: default/{frontend}: first value ({version_id(FRONTEND)}); "
        f"default/{backend}: first value ({version_id(BACKEND)})"
    )
    assert f"- default/{backend} → version `{version_id(BACKEND)}`: first value" in details

    # -- the workflow list finds it by its second config, with the venv's Temporal CLI
    listed = dev.temporal(
        "workflow", "list", "-q", f'TempoconfPaths="{backend}"', "-o", "json"
    ).stdout
    assert [row["execution"]["workflowId"] for row in json.loads(listed)] == [workflow_id]

    # -- approvals naming the plan's digest move it on: bob through the API, then the direct
    # backend (its identity is the operator's user@host, not the author's)
    first = cli("rollout", "approve", backend, "--digest", digest, env=api_mode)
    assert "approval 1/2" in first, first
    cli("rollout", "approve", frontend, "--digest", digest)

    def promoted() -> bool:
        return "promoted" in cli("rollout", "status", frontend).splitlines()[1]

    eventually_sync(promoted, what="the changeset to be promoted", timeout=60)
    for path, value in ((frontend, FRONTEND), (backend, BACKEND)):
        served = httpx.get(f"{dev.api_url}/v1/configs/{path}", timeout=10).json()
        assert served["value"] == value, served
