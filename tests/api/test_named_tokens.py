"""Named admin tokens (TEMPOCONF_ADMIN_TOKENS) over real HTTP, against a real Temporal server and
worker: the API acts as the token's name, refuses a body `by` naming someone else, and so counts
four-eyes approvals by who called; the single TEMPOCONF_ADMIN_TOKEN works as before."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tempoconf.settings import Settings
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.workflows.test_approvals import digest_of, four_eyes_request, unique_path
from tests.workflows.test_rollout import status, wait_for_state

TOKENS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
SHARED = "shared-secret"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_the_tokens_name_is_who_approves(
    rollout_harness: RolloutHarness, tmp_path: Any
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        temporal_address=rollout_harness.env.client.service_client.config.target_host,
        task_queue=rollout_harness.task_queue,
        admin_token=SHARED,
        admin_tokens=tuple(TOKENS.items()),
    )
    path = unique_path()
    request = four_eyes_request(path)
    digest = digest_of(request)
    async with live_api(rollout_harness.store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:

            async def approve(who: str, body: dict[str, Any]) -> httpx.Response:
                return await http.post(
                    f"/v1/admin/rollouts/{path}:approve", json=body, headers=bearer(TOKENS[who])
                )

            planned = await http.post(
                "/v1/admin/plans", json=request, headers=bearer(TOKENS["bob"])
            )
            assert planned.status_code == 200, planned.text
            assert planned.json()["digest"] == digest

            handle = await rollout_harness.start(request)
            await wait_for_state(handle, "awaiting_approval", stage_index=0)

            wrong = await http.post(
                f"/v1/admin/rollouts/{path}:approve", json={}, headers=bearer("nobody")
            )
            assert wrong.status_code == 401

            # bob's token speaks for bob only
            impostor = await approve("bob", {"by": "carol", "digest": digest})
            assert impostor.status_code == 403, impostor.text
            assert "this admin token is 'bob'" in impostor.json()["error"]
            assert "'carol' names someone else" in impostor.json()["error"]

            # the author's token: refused, even with no `by` in the body
            own = await approve("alice", {"digest": digest})
            assert own.status_code == 409
            assert "alice is the rollout's author (alice@example.com)" in own.json()["error"]

            first = await approve("bob", {"digest": digest, "reason": "reviewed"})
            assert first.status_code == 200, first.text
            assert first.json()["state"] == "awaiting_approval"
            assert [a["by"] for a in (await status(handle))["approvals"]] == ["bob"]
            again = await approve("bob", {"by": "bob", "digest": digest})
            assert again.status_code == 409
            assert "bob approved it already (1/2)" in again.json()["error"]

            stale = digest_of(four_eyes_request(path, value={"max_connections": 1}))
            outdated = await approve("carol", {"digest": stale})
            assert outdated.status_code == 409
            assert stale in outdated.json()["error"] and digest in outdated.json()["error"]

            # the single shared token names nobody: a body `by` is kept, as before
            paused = await http.post(
                f"/v1/admin/rollouts/{path}:pause",
                json={"by": "dave", "reason": "lunch"},
                headers=bearer(SHARED),
            )
            assert paused.status_code == 200, paused.text
            resumed = await http.post(
                f"/v1/admin/rollouts/{path}:resume", headers=bearer(TOKENS["carol"])
            )
            assert resumed.status_code == 200, resumed.text
            history = (await status(handle))["history"]
            assert [row["by"] for row in history if row["reason"].startswith(("pause", "resume"))] == [
                "dave", "carol",
            ]  # fmt: skip

            second = await approve("carol", {"digest": digest})
            assert second.status_code == 200, second.text
            assert (await rollout_result(handle))["outcome"] == "promoted"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("alice", "TEMPOCONF_ADMIN_TOKENS: entry 1 is not NAME:TOKEN"),
        ("alice:a,:b", "TEMPOCONF_ADMIN_TOKENS: entry 2 is not NAME:TOKEN"),
        ("alice:a,bob:", "TEMPOCONF_ADMIN_TOKENS: entry 2 is not NAME:TOKEN"),
        ("alice:a,alice:b", "TEMPOCONF_ADMIN_TOKENS: the name 'alice' is given twice"),
        ("alice:a,bob:a", "TEMPOCONF_ADMIN_TOKENS: entry 2 repeats the token of another name"),
    ],
)
def test_bad_named_tokens_are_refused_naming_the_variable(value: str, problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        Settings.from_env({"TEMPOCONF_ADMIN_TOKENS": value})
    assert str(refused.value).startswith(problem)


def test_named_tokens_are_read_and_kept_out_of_repr() -> None:
    settings = Settings.from_env({"TEMPOCONF_ADMIN_TOKENS": " alice:s3:cret , bob:t0ken "})
    assert settings.admin_tokens == (("alice", "s3:cret"), ("bob", "t0ken"))
    assert "s3:cret" not in repr(settings)
