"""`GET|PUT /v1/admin/schemas/{path}`: a config's JSON Schema."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.access.roles import Role
from tempoconf.api.answers import SchemaAnswer
from tempoconf.api.auth import acting_identity
from tempoconf.api.bodies import ADMIN_BODY_LIMIT, invalid, read_json, validate_body
from tempoconf.api.deps import authorized_config, state_of
from tempoconf.api.errors import ApiError
from tempoconf.api.routing import CONFIG_PATH, route
from tempoconf.problems import Problem
from tempoconf.schema_validation import schema_problems
from tempoconf.storable import STORABLE

__all__ = ["SchemaBody", "routes"]


class SchemaBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )

    schema_: Any = Field(alias="schema")
    """A draft 2020-12 JSON Schema (an object or a boolean)."""
    reason: Annotated[str, Field(max_length=2000), STORABLE] = ""
    by: Annotated[str, Field(max_length=200), STORABLE] = ""


async def get_schema(request: Request) -> JSONResponse:
    _, namespace, path = await authorized_config(request, Role.VIEWER)
    schema = await asyncio.to_thread(state_of(request).store.get_schema, namespace, path)
    if schema is None:
        raise ApiError(404, f"config {path!r} in namespace {namespace!r} has no schema")
    return JSONResponse(SchemaAnswer(namespace=namespace, path=path, schema=schema).body())


async def put_schema(request: Request) -> JSONResponse:
    principal, namespace, path = await authorized_config(request, Role.ADMIN)
    raw = await read_json(request, limit=ADMIN_BODY_LIMIT)
    by = acting_identity(principal, raw, what="schema")
    body = validate_body(SchemaBody, raw, what="schema request")
    problems = [
        Problem("/schema" + problem.pointer, problem.message)
        for problem in schema_problems(body.schema_)
    ]
    if problems:
        raise invalid("schema", problems)
    await asyncio.to_thread(
        state_of(request).store.set_schema,
        namespace,
        path,
        body.schema_,
        actor=by.name,
        reason=body.reason,
    )
    return JSONResponse(SchemaAnswer(namespace=namespace, path=path, schema=body.schema_).body())


async def schema(request: Request) -> JSONResponse:
    # One route for both methods, so a 405 lists both in its Allow header.
    return await (put_schema if request.method == "PUT" else get_schema)(request)


routes = [route(f"/v1/admin/schemas/{CONFIG_PATH}", schema, methods=["GET", "PUT"])]
