"""The OpenAPI 3.1 document of the API, served at `/openapi.json`.

The paths, parameters and their prose are written here; every body's schema is generated from
the model that reads it (requests, validation mode) or builds it (answers, serialization mode).
`tests/api/test_openapi.py` checks both: each body is its model's schema, and the paths are the
routes the app serves, both ways.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import TypeAdapter

from tempoconf import __version__
from tempoconf.api.answers import (
    Accepted,
    BundleAnswer,
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
    StableAnswer,
    VersionsAnswer,
)
from tempoconf.api.bodies import ADMIN_BODY_LIMIT, REPORT_BODY_LIMIT
from tempoconf.api.distribution import MAX_WAIT
from tempoconf.api.ofrep import BULK_ROUTE, FLAG_ROUTE, OFREP_BODY_LIMIT
from tempoconf.api.ofrep_answers import (
    OfrepBulkAnswer,
    OfrepBulkError,
    OfrepFlagAnswer,
    OfrepFlagError,
    OfrepRequest,
)
from tempoconf.api.routes.clients import DEFAULT_SINCE_SECONDS, MAX_SINCE_SECONDS
from tempoconf.api.routes.freezes import (
    DEFAULT_FREEZE_LIMIT,
    MAX_FREEZE_LIMIT,
    FreezeAnswer,
    FreezeEndAnswer,
    FreezeEndBody,
    FreezesAnswer,
    FreezeStartBody,
)
from tempoconf.api.routes.reports import ReportBody
from tempoconf.api.routes.schemas import SchemaBody
from tempoconf.api.routes.versions import DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT
from tempoconf.contract_schema import ContractJsonSchema
from tempoconf.paths import DEFAULT_NAMESPACE
from tempoconf.resolution.ofrep import NAMESPACE_HEADER
from tempoconf.rollout.commands import COMMAND_NAMES, COMMANDS, OperatorCommand
from tempoconf.rollout.request import ConfigPath, Namespace, RolloutRequest

__all__ = ["ANSWERS", "REF_TEMPLATE", "REQUEST_BODIES", "body_schemas", "openapi_document"]

REF_TEMPLATE = "#/components/schemas/{model}"
REQUEST_BODIES: tuple[type[Any], ...] = (
    RolloutRequest,
    ReportBody,
    SchemaBody,
    OperatorCommand,
    FreezeStartBody,
    FreezeEndBody,
    OfrepRequest,
)
"""The models that read request bodies: documented as they validate."""
ANSWERS: tuple[type[Any], ...] = (
    ErrorAnswer,
    ConfigAnswer,
    Accepted,
    HealthAnswer,
    ReadinessAnswer,
    SchemaAnswer,
    VersionsAnswer,
    StableAnswer,
    HistoryAnswer,
    ClientsAnswer,
    PlanContextAnswer,
    RolloutStarted,
    RolloutStateAnswer,
    CommandAnswer,
    ConfigsAnswer,
    BundleAnswer,
    FreezeAnswer,
    FreezeEndAnswer,
    FreezesAnswer,
    OfrepFlagAnswer,
    OfrepFlagError,
    OfrepBulkAnswer,
    OfrepBulkError,
)
"""The models of the JSON answers: documented as they serialize."""
Mode = Literal["validation", "serialization"]


@cache
def body_schemas() -> tuple[dict[type[Any], dict[str, Any]], dict[str, Any]]:
    """Each body model's `$ref`, and the component schemas they refer to, generated together."""
    inputs: list[tuple[type[Any], Mode, TypeAdapter[Any]]] = [
        *((model, "validation", TypeAdapter(model)) for model in REQUEST_BODIES),
        *((model, "serialization", TypeAdapter(model)) for model in ANSWERS),
    ]
    # Keyed by the model class itself (any hashable key works); the stubs ask for a str-like key.
    refs, definitions = TypeAdapter.json_schemas(
        inputs,  # type: ignore[type-var]
        ref_template=REF_TEMPLATE,
        schema_generator=ContractJsonSchema,
    )
    return {model: refs[(model, mode)] for model, mode, _ in inputs}, definitions.get("$defs", {})


def _ref(model: type[Any]) -> dict[str, Any]:
    return body_schemas()[0][model]


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _answer(model: type[Any], description: str) -> dict[str, Any]:
    return _json(_ref(model), description)


def _request(model: type[Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(model)}}}


def _error(description: str) -> dict[str, Any]:
    return _answer(ErrorAnswer, description)


def _params(*names: str) -> list[dict[str, str]]:
    return [{"$ref": f"#/components/parameters/{name}"} for name in names]


def _unauthorized() -> dict[str, Any]:
    return {
        "description": "Missing or wrong bearer token (only when a token is configured)",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        "content": {"application/json": {"schema": _ref(ErrorAnswer)}},
    }


_ADMIN: list[dict[str, list[str]]] = [{"adminToken": []}, {}]
_CLIENT: list[dict[str, list[str]]] = [{"clientToken": []}, {}]


def _parameters() -> dict[str, Any]:
    def query(name: str, schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "schema": schema,
            "description": description,
            **extra,
        }

    return {
        "ConfigPath": {
            "name": "path",
            "in": "path",
            "required": True,
            "description": "Config path: 1-255 characters of [a-z0-9._-] segments joined by '/', "
            "written as is (slashes not encoded)",
            "schema": TypeAdapter(ConfigPath).json_schema(),
        },
        "Namespace": query(
            "namespace",
            {**TypeAdapter(Namespace).json_schema(), "default": DEFAULT_NAMESPACE},
            "Config namespace",
        ),
        "Client": query(
            "client",
            {"type": "string"},
            "Client id (default: anonymous, never in a percentile stage)",
        ),
        "Channel": query("channel", {"type": "string"}, "The client's channel"),
        "Label": query(
            "label",
            {"type": "array", "items": {"type": "string", "pattern": "^[^=]+="}},
            "A label key=value; repeatable",
            style="form",
            explode=True,
        ),
        "Wait": query(
            "wait",
            {"type": "number", "minimum": 0, "maximum": MAX_WAIT, "default": 0},
            "Long-poll: with If-None-Match, hold the request up to this many seconds "
            "until what this client resolves to changes, else answer 304",
        ),
        "BundleWait": query(
            "wait",
            {"type": "number", "minimum": 0, "maximum": MAX_WAIT, "default": 0},
            "Long-poll: with If-None-Match, hold the request up to this many seconds "
            "until the bundle changes, else answer 304",
        ),
        "Stable": query(
            "stable",
            {"enum": ["true", "false", "1", "0", "yes", "no"]},
            "true: always the stable version",
        ),
        "IfNoneMatch": {
            "name": "If-None-Match",
            "in": "header",
            "required": False,
            "schema": {"type": "string"},
            "description": "ETag of the copy held",
        },
        "Limit": query(
            "limit",
            {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_HISTORY_LIMIT,
                "default": DEFAULT_HISTORY_LIMIT,
            },
            "Newest entries to return",
        ),
        "SinceSeconds": query(
            "since_seconds",
            {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_SINCE_SECONDS,
                "default": DEFAULT_SINCE_SECONDS,
            },
            "How far back, in seconds, a client must have been seen",
        ),
        "AppliedVersion": query(
            "version",
            {"type": "string", "pattern": "^[0-9a-f]{16}$"},
            "Only the clients served this version or that reported applying it",
        ),
        "NotApplied": query(
            "not_applied",
            {"type": "boolean", "default": False},
            "With `version`: only the clients whose last applied version is not it (stragglers)",
        ),
        "WorkflowId": query(
            "workflow_id",
            {"type": "string", "minLength": 1, "maxLength": 1000},
            "Workflow id (default: the lock holder's, else rollout:{namespace}/{path})",
        ),
    }


def _paths() -> dict[str, Any]:
    admin_errors = {"401": _unauthorized()}
    paths: dict[str, Any] = {
        "/v1/configs/{path}": {
            "get": {
                "operationId": "getConfig",
                "summary": "The version this client resolves to",
                "tags": ["distribution"],
                "security": _CLIENT,
                "parameters": _params(
                    "ConfigPath",
                    "Namespace",
                    "Client",
                    "Channel",
                    "Label",
                    "Wait",
                    "Stable",
                    "IfNoneMatch",
                ),
                "responses": {
                    "200": {
                        **_answer(ConfigAnswer, "The resolved config"),
                        "headers": {"ETag": {"schema": {"type": "string"}}},
                    },
                    "304": {
                        "description": "The copy held (If-None-Match) is current",
                        "headers": {"ETag": {"schema": {"type": "string"}}},
                    },
                    "400": _error("Invalid path or query parameter"),
                    "401": _unauthorized(),
                    "404": _error("Unknown config, or nothing to serve this client yet"),
                    "503": _error("The snapshots were never loaded from the store"),
                },
            }
        },
        "/v1/bundles/{path}": {
            "get": {
                "operationId": "getBundle",
                "summary": "Everything a client needs to resolve the config itself, the same for "
                "every client (local evaluation, edge relays)",
                "description": "The stable and staged versions and the live rollout's stages with "
                "their cohort rules and leases; a client resolves any identity from it as "
                "`GET /v1/configs/{path}` would (docs/contract.md, Resolution). A strong ETag "
                "(a digest of the body) and `Cache-Control: public, max-age=0, must-revalidate`: "
                "any cache may hold it and revalidate. With `wait` and If-None-Match, the request "
                "is held until the bundle changes (never at a lease's end: the body does not "
                "change then).",
                "tags": ["distribution"],
                "security": _CLIENT,
                "parameters": _params("ConfigPath", "Namespace", "BundleWait", "IfNoneMatch"),
                "responses": {
                    "200": {
                        **_answer(BundleAnswer, "The config's bundle"),
                        "headers": {
                            "ETag": {"schema": {"type": "string"}},
                            "Cache-Control": {"schema": {"type": "string"}},
                        },
                    },
                    "304": {
                        "description": "The copy held (If-None-Match) is current",
                        "headers": {"ETag": {"schema": {"type": "string"}}},
                    },
                    "400": _error("Invalid path or query parameter"),
                    "401": _unauthorized(),
                    "404": _error("Unknown config in this namespace"),
                    "503": _error("The snapshots were never loaded from the store"),
                },
            }
        },
        "/v1/configs": {
            "get": {
                "operationId": "getConfigs",
                "summary": "Several configs for one client, from one snapshot, with one ETag",
                "tags": ["distribution"],
                "security": _CLIENT,
                "parameters": [
                    {
                        "name": "path",
                        "in": "query",
                        "required": True,
                        "description": "A config path; repeat it for each config (1 to 20), "
                        "e.g. ?path=a/x&path=a/y. The answer never mixes configs before and "
                        "after a publish (a changeset's configs change together).",
                        "schema": {"type": "array", "items": TypeAdapter(ConfigPath).json_schema()},
                        "style": "form",
                        "explode": True,
                    },
                    *_params("Namespace", "Client", "Channel", "Label", "Wait", "Stable"),
                    *_params("IfNoneMatch"),
                ],
                "responses": {
                    "200": {
                        **_answer(ConfigsAnswer, "The resolved configs, in the order asked"),
                        "headers": {"ETag": {"schema": {"type": "string"}}},
                    },
                    "304": {
                        "description": "The copy held (If-None-Match) is current",
                        "headers": {"ETag": {"schema": {"type": "string"}}},
                    },
                    "400": _error("Invalid, missing or repeated path, or invalid query parameter"),
                    "401": _unauthorized(),
                    "404": _error("An unknown config, or one with nothing to serve this client"),
                    "503": _error("The snapshots were never loaded from the store"),
                },
            }
        },
        "/v1/reports": {
            "post": {
                "operationId": "postReport",
                "summary": "A client's health report on the version it runs, and (with "
                "`applied`) whether it applied that version",
                "tags": ["distribution"],
                "security": _CLIENT,
                "requestBody": _request(ReportBody),
                "responses": {
                    "202": _answer(Accepted, "Stored"),
                    "400": _error("Malformed JSON or invalid fields (each listed)"),
                    "401": _unauthorized(),
                    "404": _error("The config has no such version"),
                    "413": _error(f"Body over {REPORT_BODY_LIMIT} bytes"),
                },
            }
        },
        "/v1/admin/schemas/{path}": {
            "get": {
                "operationId": "getSchema",
                "summary": "A config's JSON Schema",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("ConfigPath", "Namespace"),
                "responses": {
                    "200": _answer(SchemaAnswer, "The schema"),
                    "400": _error("Invalid path or namespace"),
                    **admin_errors,
                    "404": _error("The config has no schema"),
                },
            },
            "put": {
                "operationId": "putSchema",
                "summary": "Register or replace a config's JSON Schema",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("ConfigPath", "Namespace"),
                "requestBody": _request(SchemaBody),
                "responses": {
                    "200": _answer(SchemaAnswer, "Stored"),
                    "400": _error("Invalid input, or not a valid JSON Schema (problems listed)"),
                    **admin_errors,
                    "413": _error(f"Body over {ADMIN_BODY_LIMIT} bytes"),
                },
            },
        },
        "/v1/admin/versions/{path}": {
            "get": {
                "operationId": "listVersions",
                "summary": "Every version of a config, newest first, stable marked",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("ConfigPath", "Namespace"),
                "responses": {
                    "200": _answer(VersionsAnswer, "The versions"),
                    "400": _error("Invalid path or namespace"),
                    **admin_errors,
                    "404": _error("Unknown config"),
                },
            }
        },
        "/v1/admin/stable/{path}": {
            "get": {
                "operationId": "getStable",
                "summary": "A config's stable version, with its value",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("ConfigPath", "Namespace"),
                "responses": {
                    "200": _answer(StableAnswer, "The stable version"),
                    "400": _error("Invalid path or namespace"),
                    **admin_errors,
                    "404": _error("The config has no stable version"),
                },
            }
        },
        "/v1/admin/history/{path}": {
            "get": {
                "operationId": "getHistory",
                "summary": "A config's audit log, oldest first",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("ConfigPath", "Namespace", "Limit"),
                "responses": {
                    "200": _answer(HistoryAnswer, "The audit log"),
                    "400": _error("Invalid path, namespace or limit"),
                    **admin_errors,
                },
            }
        },
        "/v1/admin/clients/{path}": {
            "get": {
                "operationId": "listRecentClients",
                "summary": "Clients seen recently (from their polls or their health reports): "
                "who a rollout plan counts",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params(
                    "ConfigPath", "Namespace", "SinceSeconds", "AppliedVersion", "NotApplied"
                ),
                "responses": {
                    "200": _answer(
                        ClientsAnswer,
                        "The clients, with what each applied; polls and apply reports reach the "
                        "store within a few seconds",
                    ),
                    "400": _error(
                        "Invalid path, namespace, since_seconds, version or not_applied "
                        "(not_applied needs version)"
                    ),
                    **admin_errors,
                },
            }
        },
        "/v1/admin/rollouts": {
            "post": {
                "operationId": "startRollout",
                "summary": "Start the ConfigRollout workflow",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("WorkflowId"),
                "requestBody": _request(RolloutRequest),
                "responses": {
                    "202": _answer(RolloutStarted, "Started"),
                    "400": _error("Invalid request or value (every problem listed)"),
                    **admin_errors,
                    "409": _error("The config already has a running rollout"),
                    "413": _error(f"Body over {ADMIN_BODY_LIMIT} bytes"),
                    "503": _error("Temporal is unreachable"),
                },
            }
        },
        "/v1/admin/plans": {
            "post": {
                "operationId": "planRollout",
                "summary": "What a rollout request would do, validated as a start; nothing is "
                "stored or started",
                "tags": ["admin"],
                "security": _ADMIN,
                "requestBody": _request(RolloutRequest),
                "responses": {
                    "200": _answer(PlanContextAnswer, "What it would do"),
                    "400": _error("Invalid request or value (every problem listed)"),
                    **admin_errors,
                    "413": _error(f"Body over {ADMIN_BODY_LIMIT} bytes"),
                },
            }
        },
        "/v1/admin/rollouts/{path}": {
            "get": {
                "operationId": "getRollout",
                "summary": "The current rollout (the lock holder, else the active rollout, else "
                "the newest in the audit log): store row, lock, the workflow's status or result, "
                "and who started it",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("ConfigPath", "Namespace", "WorkflowId"),
                "responses": {
                    "200": _answer(
                        RolloutStateAnswer,
                        "The state; `workflow.error` says why Temporal could not tell",
                    ),
                    "400": _error("Invalid path or namespace"),
                    **admin_errors,
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness: the process serves (200 whatever the store does)",
                "tags": ["operations"],
                "responses": {"200": _answer(HealthAnswer, "Alive")},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: snapshots to serve polls from, and their age",
                "tags": ["operations"],
                "parameters": [
                    {
                        "name": "max_age",
                        "in": "query",
                        "required": False,
                        "description": "Seconds: 503 when the snapshots served are older",
                        "schema": {"type": "number", "minimum": 0},
                    }
                ],
                "responses": {
                    "200": _answer(ReadinessAnswer, "Ready (also while the store is unreachable)"),
                    "400": _error("Invalid max_age"),
                    "503": _answer(
                        ReadinessAnswer, "No snapshots loaded yet, or older than max_age"
                    ),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics",
                "tags": ["operations"],
                "responses": {
                    "200": {
                        "description": "Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "tags": ["operations"],
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1 document")},
            }
        },
    }
    for name in COMMAND_NAMES:
        operation = {
            "operationId": f"{name}Rollout",
            "summary": COMMANDS[name].summary + " Sent as a workflow update.",
            "tags": ["admin"],
            "security": _ADMIN,
            "parameters": _params("ConfigPath", "Namespace", "WorkflowId"),
            "requestBody": _request(OperatorCommand, required=False),
            "responses": {
                "200": _answer(CommandAnswer, "Answered by the workflow"),
                "400": _error("Invalid path, namespace or body"),
                **admin_errors,
                "403": _error("A named admin token with a body `by` naming someone else"),
                "404": _error("No running rollout"),
                "409": _error("Refused by the workflow (its message)"),
                "413": _error(f"Body over {ADMIN_BODY_LIMIT} bytes"),
                "503": _error("Temporal is unreachable"),
            },
        }
        paths[f"/v1/admin/rollouts/{{path}}:{name}"] = {"post": operation}
        paths[f"/v1/admin/rollouts/{{path}}/{name}"] = {
            "post": {
                **operation,
                "operationId": f"{name}RolloutDeprecated",
                "summary": f"Deprecated form of `POST /v1/admin/rollouts/{{path}}:{name}`, which "
                f"no config path can be mistaken for (a config may be named `.../{name}`); "
                "answers carry `Deprecation: true` and a `Link` to the canonical form.",
                "deprecated": True,
            }
        }
    paths.update(_freeze_paths(admin_errors))
    paths.update(_ofrep_paths())
    return paths


def _ofrep_paths() -> dict[str, Any]:
    """OFREP's evaluation endpoints (tempoconf.resolution.ofrep): a flag is a config, its key the path."""
    namespace = {
        "name": NAMESPACE_HEADER,
        "in": "header",
        "required": False,
        "schema": {**TypeAdapter(Namespace).json_schema(), "default": DEFAULT_NAMESPACE},
        "description": "The namespace of the flags (configs)",
    }

    def errors(model: type[Any]) -> dict[str, Any]:
        return {
            "400": _answer(
                model, "PARSE_ERROR: the body is empty or not a JSON object; INVALID_CONTEXT: an "
                "attribute of the context is not a string (named); GENERAL: a bad header",
            ),
            "401": {
                **_answer(model, "Missing or wrong bearer token (only when a client token is "
                          "configured)"),
                "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
            },
            "408": _answer(model, "The body did not arrive in time"),
            "413": _answer(model, f"Body over {OFREP_BODY_LIMIT} bytes"),
            "503": _answer(model, "The snapshots were never loaded from the store"),
        }  # fmt: skip

    return {
        FLAG_ROUTE: {
            "post": {
                "operationId": "ofrepEvaluateFlag",
                "summary": "OFREP: one flag (a config, by its path) evaluated for the context's "
                "client, as `GET /v1/configs/{path}` resolves it",
                "tags": ["ofrep"],
                "security": _CLIENT,
                "parameters": [
                    {
                        "name": "key",
                        "in": "path",
                        "required": True,
                        "description": "The flag key: a config path, slashes written as is",
                        "schema": {"type": "string"},
                    },
                    namespace,
                ],
                "requestBody": _request(OfrepRequest),
                "responses": {
                    "200": _answer(OfrepFlagAnswer, "The flag's value for this client"),
                    **errors(OfrepFlagError),
                    "404": _answer(
                        OfrepFlagError,
                        "FLAG_NOT_FOUND: no such config, or nothing to serve this client",
                    ),
                },
            }
        },
        BULK_ROUTE: {
            "post": {
                "operationId": "ofrepEvaluateFlags",
                "summary": "OFREP: every flag (config) of the namespace evaluated for the "
                "context's client, with one ETag",
                "tags": ["ofrep"],
                "security": _CLIENT,
                "parameters": [namespace, *_params("IfNoneMatch")],
                "requestBody": _request(OfrepRequest),
                "responses": {
                    "200": {
                        **_answer(OfrepBulkAnswer, "Every flag of the namespace, sorted by key"),
                        "headers": {"ETag": {"schema": {"type": "string"}}},
                    },
                    "304": {
                        "description": "The evaluation held (If-None-Match) is current",
                        "headers": {"ETag": {"schema": {"type": "string"}}},
                    },
                    **errors(OfrepBulkError),
                },
            }
        },
    }


def _freeze_paths(admin_errors: dict[str, Any]) -> dict[str, Any]:
    """Freezes of namespaces (tempoconf.gates.freezes): while one is active no rollout in the
    namespace widens or promotes."""
    return {
        "/v1/admin/freezes": {
            "get": {
                "operationId": "listFreezes",
                "summary": "Freezes, newest first: active and recent",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": [
                    {
                        "name": "namespace",
                        "in": "query",
                        "required": False,
                        "schema": TypeAdapter(Namespace).json_schema(),
                        "description": "Only this namespace's freezes (default: every namespace)",
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_FREEZE_LIMIT,
                            "default": DEFAULT_FREEZE_LIMIT,
                        },
                        "description": "At most this many",
                    },
                ],
                "responses": {
                    "200": _answer(FreezesAnswer, "The freezes"),
                    "400": _error("Invalid namespace or limit"),
                    **admin_errors,
                },
            },
            "post": {
                "operationId": "startFreeze",
                "summary": "Freeze a namespace: no rollout in it widens or promotes until the "
                "freeze ends (at `until`, or by `:end`)",
                "tags": ["admin"],
                "security": _ADMIN,
                "requestBody": _request(FreezeStartBody),
                "responses": {
                    "201": _answer(FreezeAnswer, "The freeze, active"),
                    "400": _error("Invalid input (problems listed): e.g. an `until` in the past"),
                    **admin_errors,
                    "409": _error("The namespace is frozen already (end that freeze first)"),
                    "413": _error(f"Body over {ADMIN_BODY_LIMIT} bytes"),
                },
            },
        },
        "/v1/admin/freezes/{namespace}:end": {
            "post": {
                "operationId": "endFreeze",
                "summary": "End a namespace's active freeze now",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": [
                    {
                        "name": "namespace",
                        "in": "path",
                        "required": True,
                        "schema": TypeAdapter(Namespace).json_schema(),
                        "description": "The frozen namespace",
                    }
                ],
                "requestBody": _request(FreezeEndBody, required=False),
                "responses": {
                    "200": _answer(
                        FreezeEndAnswer,
                        "The freeze, ended, and how many waiting rollouts were told to look "
                        "again now",
                    ),
                    "400": _error("Invalid namespace or body"),
                    **admin_errors,
                    "404": _error("The namespace is not frozen"),
                    "413": _error(f"Body over {ADMIN_BODY_LIMIT} bytes"),
                },
            }
        },
    }


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tempoconf distribution API",
            "version": __version__,
            "description": "Serves each polling client the config version its identity resolves "
            "to; takes health reports; admin endpoints drive rollouts on Temporal. "
            "A `{path}` parameter is a config path and may contain '/', never ':': a "
            "command on a rollout is `POST /v1/admin/rollouts/{path}:{command}`.",
        },
        "paths": _paths(),
        "components": {
            "schemas": body_schemas()[1],
            "parameters": _parameters(),
            "securitySchemes": {
                "adminToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "TEMPOCONF_ADMIN_TOKEN; required only when set",
                },
                "clientToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "TEMPOCONF_CLIENT_TOKEN; required only when set",
                },
            },
        },
    }
