"""The paths operators use: configs' schemas, versions and history, clients seen, rollouts and
the commands on them, freezes of namespaces, and what is served of every config at once."""

from __future__ import annotations

from typing import Any

from tempoconf.access.roles import Role
from tempoconf.api.answers import (
    ClientsAnswer,
    CommandAnswer,
    FreezeAnswer,
    HistoryAnswer,
    PlanContextAnswer,
    RolloutStarted,
    RolloutStateAnswer,
    SchemaAnswer,
    ServedStateAnswer,
    StableAnswer,
    VersionsAnswer,
)
from tempoconf.api.bodies import ADMIN_BODY_LIMIT, ROLLOUT_BODY_LIMIT
from tempoconf.api.openapi.components import (
    admin_role,
    answer,
    error,
    namespace_schema,
    params,
    request,
    retry_later,
    unauthorized,
)
from tempoconf.api.routes.freezes import (
    DEFAULT_FREEZE_LIMIT,
    MAX_FREEZE_LIMIT,
    FreezeEndAnswer,
    FreezeEndBody,
    FreezesAnswer,
    FreezeStartBody,
)
from tempoconf.api.routes.schemas import SchemaBody
from tempoconf.rollout.commands import COMMAND_NAMES, COMMANDS, CommandName, OperatorCommand
from tempoconf.rollout.request import RolloutRequest

__all__ = ["admin_paths", "command_paths", "freeze_paths", "served_paths"]

_TOO_LARGE = f"Body over {ADMIN_BODY_LIMIT} bytes"
_ROLLOUT_TOO_LARGE = f"Body over {ROLLOUT_BODY_LIMIT} bytes"


def admin_paths() -> dict[str, Any]:
    """Reads of a config's schema, versions, history and clients; starting and planning rollouts."""
    return {
        "/v1/admin/schemas/{path}": {
            "get": {
                "operationId": "getSchema",
                "summary": "A config's JSON Schema",
                "tags": ["admin"],
                **admin_role(Role.VIEWER),
                "parameters": params("ConfigPath", "Namespace"),
                "responses": {
                    "200": answer(SchemaAnswer, "The schema"),
                    "400": error("Invalid path or namespace"),
                    "401": unauthorized(),
                    "404": error("The config has no schema"),
                },
            },
            "put": {
                "operationId": "putSchema",
                "summary": "Register or replace a config's JSON Schema",
                "tags": ["admin"],
                **admin_role(Role.ADMIN),
                "parameters": params("ConfigPath", "Namespace"),
                "requestBody": request(SchemaBody),
                "responses": {
                    "200": answer(SchemaAnswer, "Stored"),
                    "400": error("Invalid input, or not a valid JSON Schema (problems listed)"),
                    "401": unauthorized(),
                    "413": error(_TOO_LARGE),
                },
            },
        },
        "/v1/admin/versions/{path}": {
            "get": {
                "operationId": "listVersions",
                "summary": "Every version of a config, newest first, stable marked",
                "tags": ["admin"],
                **admin_role(Role.VIEWER),
                "parameters": params("ConfigPath", "Namespace"),
                "responses": {
                    "200": answer(VersionsAnswer, "The versions"),
                    "400": error("Invalid path or namespace"),
                    "401": unauthorized(),
                    "404": error("Unknown config"),
                },
            }
        },
        "/v1/admin/stable/{path}": {
            "get": {
                "operationId": "getStable",
                "summary": "A config's stable version, with its value",
                "tags": ["admin"],
                **admin_role(Role.VIEWER),
                "parameters": params("ConfigPath", "Namespace"),
                "responses": {
                    "200": answer(StableAnswer, "The stable version"),
                    "400": error("Invalid path or namespace"),
                    "401": unauthorized(),
                    "404": error("The config has no stable version"),
                },
            }
        },
        "/v1/admin/history/{path}": {
            "get": {
                "operationId": "getHistory",
                "summary": "A config's audit log, oldest first",
                "tags": ["admin"],
                **admin_role(Role.VIEWER),
                "parameters": params("ConfigPath", "Namespace", "Limit"),
                "responses": {
                    "200": answer(HistoryAnswer, "The audit log"),
                    "400": error("Invalid path, namespace or limit"),
                    "401": unauthorized(),
                },
            }
        },
        "/v1/admin/clients/{path}": {
            "get": {
                "operationId": "listRecentClients",
                "summary": "Clients seen recently (from their polls or their health reports): "
                "who a rollout plan counts",
                "tags": ["admin"],
                **admin_role(Role.VIEWER),
                "parameters": params(
                    "ConfigPath", "Namespace", "SinceSeconds", "AppliedVersion", "NotApplied"
                ),
                "responses": {
                    "200": answer(
                        ClientsAnswer,
                        "The clients, with what each applied; polls and apply reports reach the "
                        "store within a few seconds",
                    ),
                    "400": error(
                        "Invalid path, namespace, since_seconds, version or not_applied "
                        "(not_applied needs version)"
                    ),
                    "401": unauthorized(),
                },
            }
        },
        "/v1/admin/rollouts": {
            "post": {
                "operationId": "startRollout",
                "summary": "Start the ConfigRollout workflow",
                "tags": ["admin"],
                **admin_role(Role.OPERATOR),
                "parameters": params("WorkflowId"),
                "requestBody": request(RolloutRequest),
                "responses": {
                    "202": answer(RolloutStarted, "Started"),
                    "400": error(
                        "Invalid request or value (every problem listed), or a workflow_id "
                        "that is not one of the request's own"
                    ),
                    "401": unauthorized(),
                    "409": error("The config already has a running rollout"),
                    "413": error(_ROLLOUT_TOO_LARGE),
                    "503": retry_later("Temporal is unreachable (named in the message)"),
                },
            }
        },
        "/v1/admin/plans": {
            "post": {
                "operationId": "planRollout",
                "summary": "What a rollout request would do, validated as a start; nothing is "
                "stored or started",
                "tags": ["admin"],
                **admin_role(Role.OPERATOR),
                "requestBody": request(RolloutRequest),
                "responses": {
                    "200": answer(PlanContextAnswer, "What it would do"),
                    "400": error("Invalid request or value (every problem listed)"),
                    "401": unauthorized(),
                    "413": error(_ROLLOUT_TOO_LARGE),
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
                **admin_role(Role.VIEWER),
                "parameters": params("ConfigPath", "Namespace", "WorkflowId"),
                "responses": {
                    "200": answer(
                        RolloutStateAnswer,
                        "The state; `workflow.error` says why Temporal could not tell",
                    ),
                    "400": error("Invalid path or namespace"),
                    "401": unauthorized(),
                    "404": error("A workflow_id that is no rollout of this config"),
                },
            }
        },
    }


def command_paths() -> dict[str, Any]:
    """`POST /v1/admin/rollouts/{path}:{command}`, one path a command (tempoconf.rollout.commands)."""
    return {
        f"/v1/admin/rollouts/{{path}}:{name}": {
            "post": {
                "operationId": f"{name}Rollout",
                "summary": COMMANDS[name].summary + " Sent as a workflow update.",
                "tags": ["admin"],
                **admin_role(Role.APPROVER if name == CommandName.APPROVE else Role.OPERATOR),
                "parameters": params("ConfigPath", "Namespace", "WorkflowId"),
                "requestBody": request(OperatorCommand, required=False),
                "responses": {
                    "200": answer(CommandAnswer, "Answered by the workflow"),
                    "400": error("Invalid path, namespace or body"),
                    "401": unauthorized(),
                    "403": error("A named admin token with a body `by` naming someone else"),
                    "404": error(
                        "No running rollout, or a workflow_id that is no rollout of this config"
                    ),
                    "409": error("Refused by the workflow (its message)"),
                    "413": error(_TOO_LARGE),
                    "503": retry_later("Temporal is unreachable (named in the message)"),
                },
            }
        }
        for name in COMMAND_NAMES
    }


def freeze_paths() -> dict[str, Any]:
    """Freezes of namespaces (tempoconf.gates.freezes): while one is active no rollout in the
    namespace widens or promotes."""
    return {
        "/v1/admin/freezes": {
            "get": {
                "operationId": "listFreezes",
                "summary": "Freezes, newest first: active and recent",
                "tags": ["admin"],
                **admin_role(Role.VIEWER),
                "parameters": [
                    {
                        "name": "namespace",
                        "in": "query",
                        "required": False,
                        "schema": namespace_schema(),
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
                    "200": answer(FreezesAnswer, "The freezes"),
                    "400": error("Invalid namespace or limit"),
                    "401": unauthorized(),
                },
            },
            "post": {
                "operationId": "startFreeze",
                "summary": "Freeze a namespace: no rollout in it widens or promotes until the "
                "freeze ends (at `until`, or by `:end`)",
                "tags": ["admin"],
                **admin_role(Role.ADMIN),
                "requestBody": request(FreezeStartBody),
                "responses": {
                    "201": answer(FreezeAnswer, "The freeze, active"),
                    "400": error("Invalid input (problems listed): e.g. an `until` in the past"),
                    "401": unauthorized(),
                    "409": error("The namespace is frozen already (end that freeze first)"),
                    "413": error(_TOO_LARGE),
                },
            },
        },
        "/v1/admin/freezes/{namespace}:end": {
            "post": {
                "operationId": "endFreeze",
                "summary": "End a namespace's active freeze now",
                "tags": ["admin"],
                **admin_role(Role.ADMIN),
                "parameters": [
                    {
                        "name": "namespace",
                        "in": "path",
                        "required": True,
                        "schema": namespace_schema(),
                        "description": "The frozen namespace",
                    }
                ],
                "requestBody": request(FreezeEndBody, required=False),
                "responses": {
                    "200": answer(
                        FreezeEndAnswer,
                        "The freeze, ended, and how many waiting rollouts were told to look "
                        "again now",
                    ),
                    "400": error("Invalid namespace or body"),
                    "401": unauthorized(),
                    "404": error("The namespace is not frozen"),
                    "413": error(_TOO_LARGE),
                },
            }
        },
    }


def served_paths() -> dict[str, Any]:
    """What is served, read at once: configs as code (`tempoconf diff|apply DIR`) compare a
    directory of configs with it."""
    return {
        "/v1/admin/configs": {
            "get": {
                "operationId": "listServedConfigs",
                "summary": "Every config the store knows (a version, a stable version, a schema "
                "or a lock), by namespace and path, with its stable version, its schema's digest "
                "and its lock, and the namespaces' active freezes: one read for configs as code",
                "tags": ["admin"],
                **admin_role(Role.VIEWER),
                "parameters": [
                    {
                        "name": "namespace",
                        "in": "query",
                        "required": False,
                        "description": "A namespace; repeat it for several, e.g. "
                        "?namespace=a&namespace=b (default: every namespace)",
                        "schema": {"type": "array", "items": namespace_schema()},
                        "style": "form",
                        "explode": True,
                    }
                ],
                "responses": {
                    "200": answer(ServedStateAnswer, "The configs and the active freezes"),
                    "400": error("Invalid namespace"),
                    "401": unauthorized(),
                },
            }
        },
    }
