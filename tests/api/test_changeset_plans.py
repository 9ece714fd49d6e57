"""`POST /v1/admin/plans` for a changeset (issue 25): the digest is the one the running rollout
requires (the plan function the prepare step uses), and every config comes with its version,
value, stable value and change, so a client shows each config's diff."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from tempoconf.canonical import version_id
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.digest import plan_digest
from tempoconf.rollout.plan import plan_from_request
from tempoconf.rollout.validation import validate_rollout
from tempoconf.store.store import Store

FRONTEND = {"api": "v2", "timeout_ms": 800}
BACKEND = {"api": "v2", "accepts": ["v1", "v2"]}
REQUEST: dict[str, Any] = {
    "changes": [
        {"path": "plans/frontend", "value": FRONTEND},
        {"path": "plans/backend", "value": BACKEND},
    ],
    "stages": [{"percentile": 50, "manual": True, "approvals": {"required": 2}}],
    "author": "alice@example.com",
}


def make_stable(store: Store, path: str, value: Any) -> str:
    version = version_id(value)
    record = VersionRecord(version, value, "setup", "", "", datetime.now(UTC))
    store.put_version("default", path, record)
    store.set_stable(
        "default", path, version, actor="setup", reason="first value", event_key=f"setup:{path}"
    )
    return version


async def test_a_changesets_plan_has_the_rollouts_digest_and_every_configs_diff(
    client: httpx.AsyncClient, api_store: Store
) -> None:
    old = {"api": "v1", "timeout_ms": 500}
    stable = make_stable(api_store, "plans/frontend", old)

    answer = await client.post("/v1/admin/plans", json=REQUEST)

    assert answer.status_code == 200, answer.text
    body = answer.json()
    validated = validate_rollout(REQUEST, api_store)
    assert body["digest"] == plan_digest(plan_from_request(validated.request, validated.version))
    frontend, backend = body["changes"]
    assert frontend == {
        "namespace": "default",
        "path": "plans/frontend",
        "version": version_id(FRONTEND),
        "stable_version": stable,
        "change": 'api "v1" → "v2", timeout_ms 500 → 800',
        "value": FRONTEND,
        "stable_value": old,
        "version_exists": False,
    }
    assert backend["version"] == version_id(BACKEND) and backend["value"] == BACKEND
    assert backend["stable_version"] is None and backend["stable_value"] is None
    assert backend["change"] == "first value"
