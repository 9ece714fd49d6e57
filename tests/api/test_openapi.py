"""/openapi.json describes exactly the routes the app serves, each with its parameters."""

from __future__ import annotations

import re
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.routing import Route

from tempoconf.api.routing import template_of

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


async def test_the_poll_operation_documents_its_query_parameters(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/v1/configs/{path}"]["get"]
    names = {resolve(document, p)["name"] for p in operation["parameters"]}

    assert names == {
        "path", "namespace", "client", "channel", "label", "wait", "stable", "If-None-Match",
    }
    assert set(operation["responses"]) >= {"200", "304", "400", "401", "404"}
