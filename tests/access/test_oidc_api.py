"""Operators with OpenID Connect tokens from a real provider (npm's oidc-provider, run locally),
over the real API: identity from the token, roles from its groups, rotation of the provider's
keys, and each refusal as the caller sees it (401 with why; 503 when the provider is down)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.access import write_policy
from tests.fixtures.oidc import running_oidc_provider, sign
from tests.fixtures.services import live_api

PATH = "app/config"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_operators_sign_in_with_the_providers_tokens(tmp_path: Path) -> None:
    with running_oidc_provider(tmp_path / "oidc") as provider:
        policy = write_policy(
            tmp_path / "policy",
            clients={"fleet": ("fleet-secret", ["team-a"])},
            scrapers={"prometheus": "prometheus-secret"},
            # keys fetched again at once for a new key id (the default waits 30 s between)
            oidc={"issuer": provider.issuer, "audience": "tempoconf", "key_refresh_seconds": 0},
            groups={
                "deployers": [(["team-a"], ["operator"])],
                "readers": [(["team-*"], ["viewer"])],
            },
        )
        store = Store(f"sqlite:///{tmp_path / 'store.db'}", migrate=True)
        make_stable(store, PATH, {"n": 1}, namespace="team-a")
        async with live_api(store, Settings(data_dir=tmp_path, access_file=policy)) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                schema = f"/v1/admin/stable/{PATH}?namespace=team-a"
                deployer = provider.token("deployer")
                assert (await http.get(schema, headers=bearer(deployer))).status_code == 200
                # roles come from groups: the reader views, but may not start
                reader = provider.token("reader")
                assert (await http.get(schema, headers=bearer(reader))).status_code == 200
                start = {
                    "path": PATH,
                    "namespace": "team-a",
                    "value": {"n": 2},
                    "stages": [{"channel": "canary"}],
                }
                planned = await http.post("/v1/admin/plans", json=start, headers=bearer(reader))
                assert planned.status_code == 403, planned.text
                assert "'oidc:reader' needs the operator role in namespace 'team-a'" in planned.text
                planned = await http.post("/v1/admin/plans", json=start, headers=bearer(deployer))
                assert planned.status_code == 200, planned.text
                # no groups, no role
                loner = await http.get(schema, headers=bearer(provider.token("loner")))
                assert loner.status_code == 403, loner.text
                # the identity is the token's, and a body may not claim another
                freeze = await http.post(
                    "/v1/admin/plans",
                    json={**start, "started_by": "someone-else"},
                    headers=bearer(deployer),
                )
                assert freeze.status_code == 403, freeze.text
                # an OpenID identity is in its own space: `oidc:` and its subject
                assert "this caller is 'oidc:deployer'" in freeze.text
                # its body may name it bare, as before the space: the API records `oidc:deployer`
                bare = await http.post(
                    "/v1/admin/plans",
                    json={**start, "started_by": "deployer"},
                    headers=bearer(deployer),
                )
                assert bare.status_code == 200, bare.text
                # an operator's token is no client token
                polled = await http.get(
                    f"/v1/configs/{PATH}?namespace=team-a", headers=bearer(deployer)
                )
                assert polled.status_code == 401, polled.text
                assert "not an OpenID Connect token" in polled.text

                # the provider rotates its key: new tokens verify (the unknown kid refetches)
                provider.rotate()
                rotated = provider.token("deployer")
                assert (await http.get(schema, headers=bearer(rotated))).status_code == 200

                # a token signed by a key the provider never published
                forged = sign(
                    {
                        "iss": provider.issuer,
                        "aud": "tempoconf",
                        "sub": "mallory",
                        "groups": ["deployers"],
                        "exp": 4102444800,
                    },
                    provider.keys[0] | {"kid": "not-the-providers"},
                )
                refused = await http.get(schema, headers=bearer(forged))
                assert refused.status_code == 401, refused.text
                assert refused.json()["error"].startswith("OpenID Connect token refused")

                # a token long expired, signed with the provider's own key
                expired = sign(
                    {
                        "iss": provider.issuer,
                        "aud": "tempoconf",
                        "sub": "deployer",
                        "exp": 1_000_000_000,
                    },
                    provider.keys[0],
                )
                answer = await http.get(schema, headers=bearer(expired))
                assert answer.status_code == 401 and "expired" in answer.text, answer.text

                # the provider down, its keys not yet known for a new kid: 503, naming it
                provider.stop()
                unknown = sign(
                    {"iss": provider.issuer, "aud": "tempoconf", "sub": "x", "exp": 4102444800},
                    provider.keys[0] | {"kid": "another"},
                )
                down = await http.get(schema, headers=bearer(unknown))
                assert down.status_code in (401, 503), down.text
                metrics = (await http.get("/metrics", headers=bearer("prometheus-secret"))).text
                assert re.search(r'reason="oidc_(unknown_key|expired)"', metrics), metrics
        store.close()
