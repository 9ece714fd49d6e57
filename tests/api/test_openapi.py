"""/openapi.json describes exactly the routes the app serves, each with its parameters, and each
body in it is the JSON Schema of the model that reads or builds it; real answers match it."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest_asyncio
from jsonschema import Draft202012Validator
from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaMode
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.applications import Starlette
from starlette.routing import Route

from tempoconf.api.answers import (
    Accepted,
    BundleAnswer,
    ChangesAnswer,
    ClientsAnswer,
    CommandAnswer,
    ConfigAnswer,
    ConfigsAnswer,
    ErrorAnswer,
    HealthAnswer,
    HistoryAnswer,
    PlanContextAnswer,
    ReadinessAnswer,
    RolloutStarted,
    RolloutStateAnswer,
    SchemaAnswer,
    ServedStateAnswer,
    StableAnswer,
    VersionsAnswer,
)
from tempoconf.api.app import create_app
from tempoconf.api.ofrep_answers import (
    OfrepBulkAnswer,
    OfrepBulkError,
    OfrepFlagAnswer,
    OfrepFlagError,
    OfrepRequest,
)
from tempoconf.api.openapi import REF_TEMPLATE
from tempoconf.api.routes.freezes import (
    FreezeAnswer,
    FreezeEndAnswer,
    FreezeEndBody,
    FreezesAnswer,
    FreezeStartBody,
)
from tempoconf.api.routes.reports import ReportBody
from tempoconf.api.routes.schemas import SchemaBody
from tempoconf.api.routing import template_of
from tempoconf.contract_schema import ContractJsonSchema
from tempoconf.rollout.commands import COMMAND_NAMES, OperatorCommand
from tempoconf.rollout.request import RolloutRequest
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.temporal import RolloutHarness

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "options", "head"}


def served_operations(app: Starlette) -> set[tuple[str, str]]:
    operations = set()
    for route in app.routes:
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":  # Starlette answers HEAD wherever it answers GET
                operations.add((template_of(route.path), method.lower()))
    return operations


def documented_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" not in node:
        return node
    target: Any = document
    for part in node["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    assert isinstance(target, dict)
    return target


async def test_every_route_is_documented_and_every_documented_route_is_served(
    app: Starlette, client: httpx.AsyncClient
) -> None:
    response = await client.get("/openapi.json")

    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1")
    assert served_operations(app) == documented_operations(document)


async def test_each_operation_documents_its_path_parameters_refs_and_security(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()
    operation_ids = set()
    for path, item in document["paths"].items():
        placeholders = set(re.findall(r"\{(\w+)\}", path))
        for method, operation in item.items():
            parameters = [resolve(document, p) for p in operation.get("parameters", [])]
            in_path = {p["name"] for p in parameters if p["in"] == "path"}
            assert in_path == placeholders, (path, method)
            assert operation["responses"], (path, method)
            for response in operation["responses"].values():
                for media in response.get("content", {}).values():
                    resolve(document, media["schema"])  # every $ref resolves
            if "security" in operation:
                for requirement in operation["security"]:
                    assert set(requirement) <= set(document["components"]["securitySchemes"])
            if path.startswith("/v1/admin/"):
                assert {"adminToken": []} in operation["security"]
                assert "401" in operation["responses"]
            assert operation["operationId"] not in operation_ids
            operation_ids.add(operation["operationId"])


async def test_the_command_routes_are_path_colon_command_and_no_slash_form_is_documented(
    client: httpx.AsyncClient,
) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    for name in COMMAND_NAMES:
        canonical = paths[f"/v1/admin/rollouts/{{path}}:{name}"]["post"]
        assert canonical.get("deprecated", False) is False
        assert f"/v1/admin/rollouts/{{path}}/{name}" not in paths
    assert not [
        (path, method)
        for path, item in paths.items()
        for method, operation in item.items()
        if operation.get("deprecated")
    ]


async def test_the_poll_operation_documents_its_query_parameters(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/v1/configs/{path}"]["get"]
    names = {resolve(document, p)["name"] for p in operation["parameters"]}

    assert names == {
        "path",
        "namespace",
        "client",
        "channel",
        "label",
        "wait",
        "stable",
        "If-None-Match",
    }
    assert set(operation["responses"]) >= {"200", "304", "400", "401", "404"}


# -- each body is its model's schema ------------------------------------------------------------

_COMMAND = (OperatorCommand, {"200": CommandAnswer})
OFREP_ERRORS = ("400", "401", "404", "408", "413", "503")
"""OFREP's routes answer their errors in OFREP's shape (404 only on the single call)."""
BODIES: dict[tuple[str, str], tuple[type[Any] | None, dict[str, type[Any]]]] = {
    ("/v1/configs/{path}", "get"): (None, {"200": ConfigAnswer}),
    ("/v1/configs", "get"): (None, {"200": ConfigsAnswer}),
    ("/v1/bundles/{path}", "get"): (None, {"200": BundleAnswer}),
    ("/v1/changes", "get"): (None, {"200": ChangesAnswer}),
    ("/v1/reports", "post"): (ReportBody, {"202": Accepted}),
    ("/v1/admin/schemas/{path}", "get"): (None, {"200": SchemaAnswer}),
    ("/v1/admin/schemas/{path}", "put"): (SchemaBody, {"200": SchemaAnswer}),
    ("/v1/admin/versions/{path}", "get"): (None, {"200": VersionsAnswer}),
    ("/v1/admin/stable/{path}", "get"): (None, {"200": StableAnswer}),
    ("/v1/admin/history/{path}", "get"): (None, {"200": HistoryAnswer}),
    ("/v1/admin/clients/{path}", "get"): (None, {"200": ClientsAnswer}),
    ("/v1/admin/rollouts", "post"): (RolloutRequest, {"202": RolloutStarted}),
    ("/v1/admin/plans", "post"): (RolloutRequest, {"200": PlanContextAnswer}),
    ("/v1/admin/rollouts/{path}", "get"): (None, {"200": RolloutStateAnswer}),
    **{(f"/v1/admin/rollouts/{{path}}:{name}", "post"): _COMMAND for name in COMMAND_NAMES},
    ("/v1/admin/freezes", "get"): (None, {"200": FreezesAnswer}),
    ("/v1/admin/freezes", "post"): (FreezeStartBody, {"201": FreezeAnswer}),
    ("/v1/admin/freezes/{namespace}:end", "post"): (FreezeEndBody, {"200": FreezeEndAnswer}),
    ("/v1/admin/configs", "get"): (None, {"200": ServedStateAnswer}),
    ("/ofrep/v1/evaluate/flags/{key}", "post"): (
        OfrepRequest,
        {"200": OfrepFlagAnswer, **dict.fromkeys(OFREP_ERRORS, OfrepFlagError)},
    ),
    ("/ofrep/v1/evaluate/flags", "post"): (
        OfrepRequest,
        {"200": OfrepBulkAnswer, **dict.fromkeys(OFREP_ERRORS, OfrepBulkError)},
    ),
    ("/healthz", "get"): (None, {"200": HealthAnswer}),
    ("/readyz", "get"): (None, {"200": ReadinessAnswer, "503": ReadinessAnswer}),
}
"""What reads each request body and builds each JSON answer; any other JSON answer is an error."""
NOT_MODELLED = {("/metrics", "get"), ("/openapi.json", "get")}
"""Not JSON of ours: Prometheus text, and the document itself."""


def fresh_schema(model: type[Any], mode: JsonSchemaMode) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's schema generated now, on its own, and the schemas it refers to by name."""
    schema = TypeAdapter(model).json_schema(
        mode=mode,
        ref_template=REF_TEMPLATE,
        schema_generator=ContractJsonSchema,
    )
    return schema, schema.pop("$defs", {})


def assert_is_schema_of(
    document: dict[str, Any],
    node: dict[str, Any],
    model: type[Any],
    mode: JsonSchemaMode,
    used: set[str],
) -> None:
    schema, definitions = fresh_schema(model, mode)
    components = document["components"]["schemas"]
    assert node == {"$ref": REF_TEMPLATE.format(model=model.__name__)}, model
    assert resolve(document, node) == schema, model
    for name, definition in definitions.items():
        assert components[name] == definition, (model, name)
    used.update({model.__name__, *definitions})


def json_schema_of(body: dict[str, Any]) -> dict[str, Any]:
    assert set(body["content"]) == {"application/json"}, body
    schema: dict[str, Any] = body["content"]["application/json"]["schema"]
    return schema


async def test_each_body_is_its_models_schema_and_every_schema_is_a_models(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()
    used: set[str] = set()

    assert documented_operations(document) == set(BODIES) | NOT_MODELLED
    for (path, method), (request_model, answers) in BODIES.items():
        operation = document["paths"][path][method]
        if request_model is None:
            assert "requestBody" not in operation, (path, method)
        else:
            body = json_schema_of(operation["requestBody"])
            assert_is_schema_of(document, body, request_model, "validation", used)
        for status, response in operation["responses"].items():
            if "content" not in response:
                assert status == "304", (path, method, status)
                continue
            model = answers.get(status, ErrorAnswer)
            assert status in answers or status >= "400", (path, method, status)
            assert_is_schema_of(document, json_schema_of(response), model, "serialization", used)
    # nothing hand-written is left in the components: each one is a model's schema
    assert set(document["components"]["schemas"]) == used


def test_the_request_body_takes_what_the_request_model_takes() -> None:
    # The hand-written schema this replaced refused all of these (additionalProperties false).
    from tempoconf.api.openapi import openapi_document

    properties = openapi_document()["components"]["schemas"]["RolloutRequest"]["properties"]
    assert {"version", "strategy", "webhooks", "health", "value", "stages"} <= set(properties)
    stage = openapi_document()["components"]["schemas"]["StageSpec"]["properties"]
    assert "health" in stage


# -- real answers match the document ------------------------------------------------------------


class DocumentedAnswers:
    """Checks an answer against what the document says that operation answers with that status."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self.registry: Registry[Any] = Registry().with_resource("urn:openapi", resource)
        self.checked: set[tuple[str, str, int]] = set()

    def check(self, path: str, method: str, response: httpx.Response) -> None:
        documented = self.document["paths"][path][method]["responses"]
        assert str(response.status_code) in documented, (path, method, response.text)
        schema = json_schema_of(documented[str(response.status_code)])
        validator = Draft202012Validator(
            {"$ref": "urn:openapi" + schema["$ref"]}, registry=self.registry
        )
        errors = [
            f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(response.json())
        ]
        assert errors == [], (path, method, response.status_code, response.json())
        # and nothing undocumented (the answers' schemas do not forbid more, for newer servers)
        properties = resolve(self.document, schema)["properties"]
        assert set(response.json()) <= set(properties), (path, method, response.json())
        self.checked.add((path, method, response.status_code))


async def test_the_answers_without_temporal_are_as_documented(
    client: httpx.AsyncClient, api_store: Store
) -> None:
    answers = DocumentedAnswers((await client.get("/openapi.json")).json())
    path = f"openapi/config-{uuid.uuid4().hex[:8]}"
    stable = make_stable(api_store, path, {"max_connections": 1000})
    config = f"/v1/configs/{path}"

    async def poll() -> httpx.Response:
        return await client.get(config, params={"client": "host-1"})

    served = await poll()
    for _ in range(200):  # the snapshots follow the store within a poll interval
        if served.status_code == 200:
            break
        served = await poll()
    answers.check("/v1/configs/{path}", "get", served)
    answers.check("/v1/configs/{path}", "get", await client.get(config, params={"wait": "x"}))
    report = {"path": path, "client": "host-1", "version": stable.version, "ok": 3, "failed": 0,
              "channel": "canary", "labels": {"region": "eu"}}  # fmt: skip
    answers.check("/v1/reports", "post", await client.post("/v1/reports", json=report))
    answers.check("/v1/reports", "post", await client.post("/v1/reports", json={"ok": -1}))
    schema = f"/v1/admin/schemas/{path}"
    answers.check("/v1/admin/schemas/{path}", "get", await client.get(schema))
    put = await client.put(schema, json={"schema": {"type": "object"}, "reason": "test"})
    answers.check("/v1/admin/schemas/{path}", "put", put)
    answers.check("/v1/admin/schemas/{path}", "get", await client.get(schema))
    answers.check(
        "/v1/admin/versions/{path}", "get", await client.get(f"/v1/admin/versions/{path}")
    )
    answers.check("/v1/admin/history/{path}", "get", await client.get(f"/v1/admin/history/{path}"))
    answers.check("/v1/admin/clients/{path}", "get", await client.get(f"/v1/admin/clients/{path}"))
    api_store.acquire_locks({("default", path): stable.version}, workflow_id="w", run_id="r")
    api_store.start_freeze("openapi", reason="test", by="test")
    served = await client.get("/v1/admin/configs", params=[("namespace", "default")] * 2)
    answers.check("/v1/admin/configs", "get", served)
    assert served.json()["configs"][0]["lock"] is not None
    answers.check("/v1/admin/configs", "get", await client.get("/v1/admin/configs"))
    bad = await client.get("/v1/admin/configs", params={"namespace": "Nope"})
    answers.check("/v1/admin/configs", "get", bad)
    answers.check("/healthz", "get", await client.get("/healthz"))
    answers.check("/readyz", "get", await client.get("/readyz"))

    assert {status for _, _, status in answers.checked} == {200, 202, 400, 404}


@pytest_asyncio.fixture
async def admin(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """The API over the harness's store, starting workflows on the harness's task queue."""
    settings = Settings(data_dir=tmp_path, task_queue=rollout_harness.task_queue)
    app = create_app(
        rollout_harness.store, settings, poll_interval=0.05,
        temporal_client=rollout_harness.realtime_client,
    )  # fmt: skip
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://tempoconf.test", timeout=30
        ) as http:
            yield http


async def test_the_rollout_answers_are_as_documented(
    rollout_harness: RolloutHarness, admin: httpx.AsyncClient
) -> None:
    answers = DocumentedAnswers((await admin.get("/openapi.json")).json())
    path = f"openapi/rollout-{uuid.uuid4().hex[:8]}"
    make_stable(rollout_harness.store, path, {"max_connections": 1000})
    request = {
        "path": path, "value": {"max_connections": 2000}, "default_cooldown_time": "1h",
        "stages": [{"channel": "canary", "health": [{"kind": "reports", "max_error_ratio": 0.1}]}],
        "strategy": {"linear": {"step": 50}}, "webhooks": [],
    }  # fmt: skip

    started = await admin.post("/v1/admin/rollouts", json=request)
    answers.check("/v1/admin/rollouts", "post", started)
    assert started.status_code == 202, started.text
    state = f"/v1/admin/rollouts/{path}"
    answers.check("/v1/admin/rollouts/{path}", "get", await admin.get(state))
    # pause waits until it took effect: the rollout is past preparing by its answer
    paused = await admin.post(f"{state}:pause", json={"reason": "lunch"})
    answers.check("/v1/admin/rollouts/{path}:pause", "post", paused)
    assert paused.status_code == 200, paused.text
    answers.check("/v1/admin/rollouts/{path}", "get", await admin.get(state))
    answers.check("/v1/admin/rollouts/{path}:approve", "post", await admin.post(f"{state}:approve"))
    halted = await admin.post(f"{state}:halt", json={"reason": "done"})
    answers.check("/v1/admin/rollouts/{path}:halt", "post", halted)
    answers.check("/v1/admin/rollouts", "post", await admin.post("/v1/admin/rollouts", json={}))

    assert {status for _, _, status in answers.checked} == {200, 202, 400, 409}
