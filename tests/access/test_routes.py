"""Every route of the OpenAPI document, under an access policy, over real HTTP against a real
Temporal server and worker: no credential is a 401; a client token, an operator of another
namespace and each role too weak are 403s naming what is missing; the right role gets an answer
the document lists (never a 401, a 403 or a 5xx). Client routes likewise for client tokens."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tempoconf.access.roles import Role
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness

NAMESPACE = "team-a"
PATH = "app/config"
OPERATORS = {f"{role}-a": (f"{role}-secret", [([NAMESPACE], [role.value])]) for role in Role}
OPERATORS["admin-b"] = ("admin-b-secret", [(["team-b"], ["admin"])])
CLIENTS = {"fleet-a": ("fleet-a-secret", [NAMESPACE]), "fleet-b": ("fleet-b-secret", ["team-b"])}
SCRAPERS = {"prometheus": "prometheus-secret"}
ROLE_KEY = "x-tempoconf-role"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@dataclass
class Call:
    operation: dict[str, Any]
    method: str
    url: str
    params: dict[str, str]
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.method} {self.url}"

    async def send(self, http: httpx.AsyncClient, secret: str | None) -> httpx.Response:
        headers = {**self.headers, **(bearer(secret) if secret else {})}
        content = json.dumps(self.body).encode() if self.body is not None else None
        if content is not None:
            headers["Content-Type"] = "application/json"
        return await http.request(
            self.method, self.url, params=self.params, content=content, headers=headers
        )


def _body(operation_id: str, version: str) -> Any:
    rollout = {
        "path": PATH,
        "namespace": NAMESPACE,
        "value": {"limit": 2},
        "default_cooldown_time": "1s",
        "stages": [{"channel": "canary", "manual": True}],
    }
    return {
        "startRollout": rollout,
        "planRollout": rollout,
        "putSchema": {"schema": {"type": "object"}},
        "startFreeze": {"namespace": NAMESPACE, "reason": "release"},
        "postReport": {
            "client": "host-1",
            "path": PATH,
            "namespace": NAMESPACE,
            "version": version,
            "ok": 1,
            "failed": 0,
        },
    }.get(operation_id, {} if operation_id.startswith(("evaluate", "endFreeze")) else None)


def calls(document: dict[str, Any], version: str) -> Iterator[Call]:
    """Each operation that takes a token, as a valid request in NAMESPACE."""
    for template, item in document["paths"].items():
        for method, operation in item.items():
            if not operation.get("security"):
                continue
            url = (
                template.replace("{path}", PATH)
                .replace("{namespace}", NAMESPACE)
                .replace("{key}", PATH)
            )
            params = {"namespace": NAMESPACE}
            if template == "/v1/configs":
                params["path"] = PATH
            body = _body(operation["operationId"], version)
            if method == "post" and body is None:
                body = {}
            yield Call(
                operation,
                method.upper(),
                url,
                params,
                body,
                {"X-Tempoconf-Namespace": NAMESPACE} if template.startswith("/ofrep") else {},
            )


def _documented(call: Call, answer: httpx.Response) -> None:
    assert answer.status_code < 500, (call.name, answer.status_code, answer.text)
    assert str(answer.status_code) in call.operation["responses"], (call.name, answer.text)


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    return write_policy(tmp_path / "policy", tokens=OPERATORS, clients=CLIENTS, scrapers=SCRAPERS)


async def test_every_route_answers_each_caller_as_documented(
    rollout_harness: RolloutHarness, tmp_path: Path, policy: Path
) -> None:
    settings_ = Settings(
        data_dir=tmp_path,
        temporal_address=rollout_harness.env.client.service_client.config.target_host,
        task_queue=rollout_harness.task_queue,
        access_file=policy,
    )
    stable = make_stable(rollout_harness.store, PATH, {"limit": 1}, namespace=NAMESPACE)
    async with live_api(rollout_harness.store, settings_) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            document = (await http.get("/openapi.json")).json()
            tried = 0
            for call in calls(document, stable.version):
                tried += 1
                missing = await call.send(http, None)
                assert missing.status_code == 401, (call.name, missing.text)
                assert missing.headers["WWW-Authenticate"].startswith("Bearer")
                role = call.operation.get(ROLE_KEY)
                if {"scraperToken": []} in call.operation["security"]:
                    await _scraper_route(http, call)
                elif role is None:
                    await _client_route(http, call)
                else:
                    await _admin_route(http, call, Role(role))
            assert tried == sum(
                1
                for item in document["paths"].values()
                for op in item.values()
                if op.get("security")
            )
            assert tried >= 25
            metrics = (await http.get("/metrics", headers=bearer(SCRAPERS["prometheus"]))).text
            assert re.search(
                r'tempoconf_api_access_denied_total\{reason="role",'
                r'route="/v1/admin/schemas/\{path\}"\} [1-9]',
                metrics,
            ) or re.search(
                r'tempoconf_api_access_denied_total\{route="/v1/admin/schemas/\{path\}",'
                r'reason="role"\} [1-9]',
                metrics,
            ), metrics


async def _admin_route(http: httpx.AsyncClient, call: Call, role: Role) -> None:
    client = await call.send(http, CLIENTS["fleet-a"][0])
    assert client.status_code == 403, (call.name, client.text)
    assert "this is the client token 'fleet-a'" in client.json()["error"]
    elsewhere = await call.send(http, OPERATORS["admin-b"][0])
    assert elsewhere.status_code == 403, (call.name, elsewhere.text)
    assert f"'admin-b' needs the {role.value} role in namespace 'team-a'" in elsewhere.text
    assert "admin-b-secret" not in elsewhere.text
    for weaker in (held for held in Role if role not in held.includes):
        refused = await call.send(http, OPERATORS[f"{weaker.value}-a"][0])
        assert refused.status_code == 403, (call.name, weaker, refused.text)
        assert f"needs the {role.value} role" in refused.json()["error"]
    allowed = await call.send(http, OPERATORS[f"{role.value}-a"][0])
    assert allowed.status_code not in (401, 403), (call.name, role, allowed.text)
    _documented(call, allowed)


async def _scraper_route(http: httpx.AsyncClient, call: Call) -> None:
    """/metrics names every namespace's configs: a scraper's, and nobody else's."""
    for secret, kind in ((CLIENTS["fleet-a"][0], "client"), (OPERATORS["admin-a"][0], "operator")):
        refused = await call.send(http, secret)
        assert refused.status_code == 403, (call.name, refused.text)
        assert f"this is the {kind} token" in refused.json()["error"]
    allowed = await call.send(http, SCRAPERS["prometheus"])
    assert allowed.status_code == 200, (call.name, allowed.text)
    _documented(call, allowed)


async def _client_route(http: httpx.AsyncClient, call: Call) -> None:
    elsewhere = await call.send(http, CLIENTS["fleet-b"][0])
    assert elsewhere.status_code == 403, (call.name, elsewhere.text)
    assert "may not read namespace 'team-a'" in elsewhere.text
    operator = await call.send(http, OPERATORS["admin-a"][0])
    assert operator.status_code == 403, (call.name, operator.text)
    assert "client routes take a client token" in operator.text
    allowed = await call.send(http, CLIENTS["fleet-a"][0])
    assert allowed.status_code in (200, 202), (call.name, allowed.text)
    _documented(call, allowed)


async def test_a_changeset_needs_the_role_in_every_namespace_it_touches(
    tmp_path: Path,
) -> None:
    policy = write_policy(
        tmp_path / "policy",
        tokens={"alice": ("alice-secret", [([NAMESPACE], ["operator"])])},
    )
    store = Store(f"sqlite:///{tmp_path / 'store.db'}", migrate=True)
    changeset = {
        "changes": [
            {"path": PATH, "namespace": NAMESPACE, "value": {"a": 1}},
            {"path": PATH, "namespace": "team-b", "value": {"b": 1}},
        ],
        "stages": [{"channel": "canary"}],
    }
    async with live_api(store, Settings(data_dir=tmp_path, access_file=policy)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            planned = await http.post(
                "/v1/admin/plans", json=changeset, headers=bearer("alice-secret")
            )
            assert planned.status_code == 403, planned.text
            assert "'alice' needs the operator role in namespace 'team-b'" in planned.text
            changeset["changes"][1]["namespace"] = NAMESPACE
            changeset["changes"][1]["path"] = "app/other"
            planned = await http.post(
                "/v1/admin/plans", json=changeset, headers=bearer("alice-secret")
            )
            assert planned.status_code == 200, planned.text
    store.close()


async def test_lists_across_namespaces_show_only_those_the_caller_may_view(
    tmp_path: Path,
) -> None:
    policy = write_policy(
        tmp_path / "policy",
        tokens={
            "alice": ("alice-secret", [([NAMESPACE], ["viewer"])]),
            "root": ("root-secret", [(["*"], ["admin"])]),
        },
    )
    store = Store(f"sqlite:///{tmp_path / 'store.db'}", migrate=True)
    for namespace in (NAMESPACE, "team-b"):
        make_stable(store, PATH, {"n": namespace}, namespace=namespace)
    async with live_api(store, Settings(data_dir=tmp_path, access_file=policy)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            for namespace in (NAMESPACE, "team-b"):
                frozen = await http.post(
                    "/v1/admin/freezes",
                    json={"namespace": namespace, "reason": "release"},
                    headers=bearer("root-secret"),
                )
                assert frozen.status_code == 201, frozen.text
            served = await http.get("/v1/admin/configs", headers=bearer("alice-secret"))
            assert {c["namespace"] for c in served.json()["configs"]} == {NAMESPACE}
            assert {f["namespace"] for f in served.json()["freezes"]} == {NAMESPACE}
            freezes = await http.get("/v1/admin/freezes", headers=bearer("alice-secret"))
            assert {f["namespace"] for f in freezes.json()["freezes"]} == {NAMESPACE}
            everything = await http.get("/v1/admin/configs", headers=bearer("root-secret"))
            assert {c["namespace"] for c in everything.json()["configs"]} == {NAMESPACE, "team-b"}
    store.close()


# Header values a client can send (latin-1, no CR, LF or NUL): anything at all after that.
_HEADER_VALUES = st.one_of(
    st.text(
        alphabet=st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"),
        max_size=200,
    ),
    st.builds(
        lambda scheme, rest: f"{scheme} {rest}",
        st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", "Token", "Bearer  "]),
        st.text(
            alphabet=st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"),
            max_size=200,
        ),
    ),
    st.builds(
        lambda a, b, c: f"Bearer {a}.{b}.{c}",  # shaped like a JWT: the OpenID path
        *(st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789-_", max_size=60),) * 3,
    ),
)


async def test_malformed_authorization_headers_are_401s_never_errors(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path / "policy",
        tokens={"alice": ("alice-secret", [(["*"], ["admin"])])},
        clients={"fleet": ("fleet-secret", ["*"])},
        oidc={"issuer": "http://127.0.0.1:9/", "audience": "tempoconf"},
    )
    store = Store(f"sqlite:///{tmp_path / 'store.db'}", migrate=True)
    make_stable(store, PATH, {"n": 1})
    async with live_api(store, Settings(data_dir=tmp_path, access_file=policy)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            answers: list[tuple[str, int]] = []

            @settings(
                max_examples=150,
                deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture],
            )
            @given(value=_HEADER_VALUES)
            def check(value: str) -> None:
                answers.append((value, 0))

            check()
            for value, _ in answers:
                for target in (f"/v1/admin/schemas/{PATH}", f"/v1/configs/{PATH}"):
                    # h11 sends no value with leading or trailing whitespace
                    header = value.strip(" \t").encode("latin-1")
                    answer = await http.get(target, headers={"Authorization": header})
                    assert answer.status_code in (401, 403, 503), (value, answer.text)
                    if answer.status_code == 503:  # a JWT-shaped one asks the OpenID provider
                        assert "OpenID" in answer.text or "provider" in answer.text, answer.text
                    assert "alice-secret" not in answer.text
