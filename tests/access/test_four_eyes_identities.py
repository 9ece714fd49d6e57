"""Four eyes compare people, not text (issue 41): over the real API under an access policy, a real
OpenID provider, a real Temporal server and worker. An author's display name or `+tag` does not
let her approve her own change; a token the policy gives the author's email cannot approve it,
nor one with the starter's; an OpenID identity's email counts only when the token says it is
verified; and an OpenID `bob` and a token `bob` are two approvers, in two spaces of identities,
each named as such in the audit log."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tempoconf.settings import Settings
from tests.fixtures.access import write_policy
from tests.fixtures.oidc import OidcClient, OidcProvider, running_oidc_provider
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.workflows.test_rollout import status, wait_for_state

pytestmark = pytest.mark.timeout(180)

TOKENS = {
    "alice": ("alice-secret", ["operator"]),
    "mallory": ("mallory-secret", ["operator", "approver"]),
    "release-bot": ("release-bot-secret", ["approver"]),
    "aw": ("aw-secret", ["approver"]),
    "bob": ("bob-secret", ["approver"]),
}
EMAILS = {
    "release-bot": ["Mallory+Bot@Example.com"],  # the bot speaks for mallory
    "alice": ["alice.w@example.com"],
    "aw": ["alice.w@example.com"],  # alice's second token
}
OIDC_CLIENTS = (
    OidcClient("bob", "bob-oidc-secret", ("approvers",)),
    OidcClient(
        "m.jones",
        "m-jones-secret",
        ("approvers",),
        claims={"email": "mallory@example.com", "email_verified": True},
    ),
    OidcClient(
        "claims-anything",
        "claims-anything-secret",
        ("approvers",),
        claims={"email": "mallory@example.com", "email_verified": False},
    ),
)


@dataclass
class Stack:
    http: httpx.AsyncClient
    harness: RolloutHarness
    provider: OidcProvider

    def bearer(self, who: str, *, oidc: bool = False) -> dict[str, str]:
        """A token of the policy's, or with `oidc` (or no such token) the provider's."""
        if who in TOKENS and not oidc:
            return {"Authorization": f"Bearer {TOKENS[who][0]}"}
        return {"Authorization": f"Bearer {self.provider.token(who)}"}

    async def start(self, author: str, *, required: int = 1, by: str = "alice") -> tuple[str, Any]:
        path = f"four-eyes/{uuid.uuid4().hex[:8]}"
        request = {
            "path": path,
            "value": {"limit": 100},
            "stages": [
                {
                    "channel": "canary",
                    "cooldown": "0s",
                    "manual": True,
                    "approvals": {"required": required},
                }
            ],
            "author": author,
        }
        started = await self.http.post("/v1/admin/rollouts", json=request, headers=self.bearer(by))
        assert started.status_code == 202, started.text
        handle = self.harness.client.get_workflow_handle(started.json()["workflow_id"])
        await wait_for_state(handle, "awaiting_approval", stage_index=0)
        return path, handle

    async def approve(
        self, path: str, handle: Any, who: str, *, oidc: bool = False
    ) -> httpx.Response:
        digest = (await status(handle))["digest"]
        return await self.http.post(
            f"/v1/admin/rollouts/{path}:approve",
            json={"digest": digest, "reason": f"reviewed by {who}"},
            headers=self.bearer(who, oidc=oidc),
        )


@pytest_asyncio.fixture
async def stack(rollout_harness: RolloutHarness, tmp_path: Path) -> AsyncIterator[Stack]:
    with running_oidc_provider(tmp_path / "oidc", clients=OIDC_CLIENTS) as provider:
        policy = write_policy(
            tmp_path / "policy",
            tokens={
                name: (secret, [(["default"], roles)]) for name, (secret, roles) in TOKENS.items()
            },
            emails=EMAILS,
            oidc={"issuer": provider.issuer, "audience": "tempoconf"},
            groups={"approvers": [(["default"], ["approver"])]},
        )
        settings = Settings(
            data_dir=tmp_path,
            temporal_address=rollout_harness.env.client.service_client.config.target_host,
            task_queue=rollout_harness.task_queue,
            access_file=policy,
        )
        async with live_api(rollout_harness.store, settings) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                yield Stack(http, rollout_harness, provider)


@pytest.mark.parametrize("author", ["Mallory <mallory@example.com>", "mallory+x@example.com"])
async def test_mallory_cannot_approve_her_own_change_under_another_form_of_her_name(
    stack: Stack, author: str
) -> None:
    path, handle = await stack.start(author)
    refused = await stack.approve(path, handle, "mallory")
    assert refused.status_code == 409, refused.text
    assert f"mallory is the rollout's author ({author})" in refused.json()["error"], refused.text
    assert (await status(handle))["approvals"] == []


async def test_a_token_the_policy_gives_the_authors_email_cannot_approve(stack: Stack) -> None:
    path, handle = await stack.start("Mallory <mallory@example.com>")
    refused = await stack.approve(path, handle, "release-bot")
    assert refused.status_code == 409, refused.text
    assert (
        "release-bot is the rollout's author (Mallory <mallory@example.com>), by the email "
        "mallory@example.com" in refused.json()["error"]
    ), refused.text
    # nor the starter's: alice started it, aw is alice's other token
    refused = await stack.approve(path, handle, "aw")
    assert refused.status_code == 409, refused.text
    assert (
        "aw is the rollout's starter (alice), by the email alice.w@example.com"
        in (refused.json()["error"])
    ), refused.text
    approved = await stack.approve(path, handle, "bob")
    assert approved.status_code == 200, approved.text
    assert (await rollout_result(handle))["outcome"] == "promoted"


async def test_an_openid_email_counts_only_when_verified(stack: Stack) -> None:
    path, handle = await stack.start("Mallory <mallory@example.com>")
    refused = await stack.approve(path, handle, "m.jones")
    assert refused.status_code == 409, refused.text
    assert "oidc:m.jones is the rollout's author" in refused.json()["error"], refused.text
    # an email the provider does not vouch for is what the user typed: no part of who it is
    approved = await stack.approve(path, handle, "claims-anything")
    assert approved.status_code == 200, approved.text
    assert (await rollout_result(handle))["outcome"] == "promoted"


async def test_an_openid_bob_and_a_token_bob_are_two_approvers(stack: Stack) -> None:
    path, handle = await stack.start("carol@example.com", required=2)
    first = await stack.approve(path, handle, "bob")  # the policy's token
    assert first.status_code == 200, first.text
    second = await stack.approve(path, handle, "bob", oidc=True)  # the provider's subject bob
    assert second.status_code == 200, f"the OpenID bob was taken for the token bob: {second.text}"
    assert (await rollout_result(handle))["outcome"] == "promoted"
    history = await stack.http.get(f"/v1/admin/history/{path}", headers=stack.bearer("alice"))
    approvals = [
        (row["actor"], row["details"]["approval"]["identity"])
        for row in history.json()["entries"]
        if "approval" in row.get("details", {})
    ]
    assert approvals == [("bob", "bob"), ("oidc:bob", "oidc:bob")], approvals
