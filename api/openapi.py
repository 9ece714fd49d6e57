"""The OpenAPI 3.1 document of the API, served at `/openapi.json`.

Written out rather than derived: the poll path runs ahead of the framework, and the document is a
contract the client SDK and operators read. `tests/api/test_openapi.py` checks it against the
routes the app serves, both ways.
"""

from __future__ import annotations

from typing import Any

from tempoconf import __version__
from tempoconf.api.bodies import ADMIN_BODY_LIMIT, REPORT_BODY_LIMIT
from tempoconf.api.distribution import MAX_WAIT
from tempoconf.api.routes.clients import DEFAULT_SINCE_SECONDS, MAX_SINCE_SECONDS
from tempoconf.api.routes.reports import (
    MAX_CHANNEL_LENGTH,
    MAX_COUNT,
    MAX_ERROR_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_LABELS,
)
from tempoconf.api.routes.versions import DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT
from tempoconf.commands import COMMAND_NAMES, COMMANDS

__all__ = ["openapi_document"]

def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _params(*names: str) -> list[dict[str, str]]:
    return [{"$ref": f"#/components/parameters/{name}"} for name in names]


_UNAUTHORIZED = {
    "description": "Missing or wrong bearer token (only when a token is configured)",
    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
    "content": {"application/json": {"schema": _ref("Error")}},
}
_ADMIN = [{"adminToken": []}, {}]
_CLIENT = [{"clientToken": []}, {}]
_NULLABLE_STRING = {"type": ["string", "null"]}
_PATH = {"type": "string", "minLength": 1, "maxLength": 255,
         "pattern": "^[a-z0-9._-]+(/[a-z0-9._-]+)*$"}
_NAMESPACE = {"type": "string", "default": "default", "pattern": "^[a-z0-9][a-z0-9._-]{0,62}$"}
_TIME = {"type": "string", "format": "date-time"}
_DURATION = {
    "description": 'Seconds (300), a string ("300s", "15m", "1h30m", "250ms") or {"seconds": 300}',
    "oneOf": [
        {"type": "number", "minimum": 0},
        {"type": "string"},
        {"type": "object", "properties": {"seconds": {"type": "number"}, "nanos": {"type": "integer"}}},
    ],
}


def _schemas() -> dict[str, Any]:
    return {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {"type": "string", "description": "What is wrong, and where"},
                "problems": {"type": "array", "items": _ref("Problem")},
            },
        },
        "Problem": {
            "type": "object",
            "required": ["pointer", "message"],
            "properties": {
                "pointer": {"type": "string", "description": "JSON pointer into the input"},
                "message": {"type": "string"},
            },
        },
        "Config": {
            "type": "object",
            "required": ["namespace", "path", "version", "stage", "value", "expires_at", "metadata"],
            "properties": {
                "namespace": {"type": "string"},
                "path": {"type": "string"},
                "version": {"type": "string"},
                "stage": {"type": "string", "description": '"stable" when no stage applies'},
                "value": {"description": "The config value (any JSON)"},
                "expires_at": {
                    "type": ["string", "null"], "format": "date-time",
                    "description": "Lease of the stage that applies; null on stable",
                },
                "metadata": {
                    "type": "object",
                    "properties": {
                        "author": {"type": "string"},
                        "commit": {"type": "string"},
                        "message": {"type": "string"},
                        "created_at": {"type": ["string", "null"], "format": "date-time"},
                    },
                },
            },
        },
        "Report": {
            "type": "object",
            "required": ["path", "client", "version", "ok", "failed"],
            "description": "Unknown fields are ignored.",
            "properties": {
                "path": _PATH,
                "namespace": _NAMESPACE,
                "client": {"type": "string", "minLength": 1, "maxLength": 255},
                "version": {"type": "string", "minLength": 1, "maxLength": 64},
                "ok": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT},
                "failed": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT},
                "error": {"type": ["string", "null"], "maxLength": MAX_ERROR_LENGTH},
                "channel": {"type": ["string", "null"], "minLength": 1, "maxLength": MAX_CHANNEL_LENGTH,
                            "description": "The channel the client polls with"},
                "labels": {"type": ["object", "null"], "maxProperties": MAX_LABELS,
                           "propertyNames": {"minLength": 1, "maxLength": MAX_LABEL_LENGTH,
                                             "pattern": "^[^=]+$"},
                           "additionalProperties": {"type": "string", "maxLength": MAX_LABEL_LENGTH},
                           "description": "The labels the client polls with. A report naming "
                                          "neither channel nor labels counts with the identity "
                                          "the client last polled with"},
            },
        },
        "Accepted": {
            "type": "object",
            "required": ["accepted"],
            "properties": {"accepted": {"const": True}},
        },
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {
                "status": {"enum": ["ok", "unavailable"]},
                "revision": {"type": "integer"},
                "error": {"type": "string"},
            },
        },
        "SchemaDocument": {
            "type": "object",
            "required": ["namespace", "path", "schema"],
            "properties": {
                "namespace": {"type": "string"},
                "path": {"type": "string"},
                "schema": {"description": "A JSON Schema (draft 2020-12)"},
            },
        },
        "SchemaPut": {
            "type": "object",
            "required": ["schema"],
            "additionalProperties": False,
            "properties": {
                "schema": {"type": ["object", "boolean"],
                           "description": "A JSON Schema (draft 2020-12)"},
                "reason": {"type": "string", "maxLength": 2000},
                "by": {"type": "string", "maxLength": 200},
            },
        },
        "VersionInfo": {
            "type": "object",
            "properties": {
                "version": {"type": "string"},
                "author": {"type": "string"},
                "commit": {"type": "string"},
                "message": {"type": "string"},
                "created_at": _TIME,
                "is_stable": {"type": "boolean"},
                "stable_since": {"type": "array", "items": _TIME},
            },
        },
        "Versions": {
            "type": "object",
            "properties": {
                "namespace": {"type": "string"},
                "path": {"type": "string"},
                "stable": _NULLABLE_STRING,
                "versions": {"type": "array", "items": _ref("VersionInfo"),
                             "description": "Newest first"},
            },
        },
        "AuditEntry": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "at": _TIME,
                "actor": {"type": "string"},
                "action": {"type": "string"},
                "reason": {"type": "string"},
                "version": _NULLABLE_STRING,
                "workflow_id": _NULLABLE_STRING,
                "details": {"type": "object"},
            },
        },
        "History": {
            "type": "object",
            "properties": {
                "namespace": {"type": "string"},
                "path": {"type": "string"},
                "entries": {"type": "array", "items": _ref("AuditEntry"), "description": "Oldest first"},
            },
        },
        "SeenClient": {
            "type": "object",
            "required": ["client", "channel", "labels", "last_seen", "last_version"],
            "properties": {
                "client": {"type": "string"},
                "channel": {"type": ["string", "null"],
                            "description": "null for a client without one, or known only from "
                                           "reports that named none"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "last_seen": _TIME,
                "last_version": {"type": ["string", "null"],
                                 "description": "The version it was last served, or last "
                                                "reported on"},
            },
        },
        "Clients": {
            "type": "object",
            "required": ["namespace", "path", "since", "clients"],
            "properties": {
                "namespace": {"type": "string"},
                "path": {"type": "string"},
                "since": _TIME,
                "clients": {"type": "array", "items": _ref("SeenClient"),
                            "description": "Each client once, sorted by client id"},
            },
        },
        "RolloutRequest": {
            "type": "object",
            "required": ["path", "value"],
            "additionalProperties": False,
            "description": "The input of the ConfigRollout workflow (docs/contract.md)",
            "properties": {
                "path": _PATH,
                "namespace": _NAMESPACE,
                "value": {"description": "The new config value (any JSON)"},
                "default_cooldown_time": _DURATION,
                "default_expiration_time": _DURATION,
                "stages": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "channel": {"type": "string"},
                            "percentile": {"type": "number", "minimum": 0, "maximum": 100},
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                            "cooldown": _DURATION,
                            "expiration": _DURATION,
                            "manual": {"type": "boolean"},
                            "name": {"type": "string"},
                        },
                    },
                },
                "health": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["kind"],
                        "properties": {"kind": {"enum": ["reports", "prometheus", "http"]}},
                    },
                },
                "author": {"type": "string", "maxLength": 200},
                "commit": {"type": "string", "maxLength": 200},
                "message": {"type": "string", "maxLength": 2000},
            },
        },
        "RolloutStarted": {
            "type": "object",
            "properties": {
                "namespace": {"type": "string"},
                "path": {"type": "string"},
                "version": {"type": "string"},
                "stages": {"type": "array", "items": {"type": "string"}},
                "workflow_id": {"type": "string"},
                "run_id": {"type": "string"},
            },
        },
        "RolloutState": {
            "type": "object",
            "properties": {
                "namespace": {"type": "string"},
                "path": {"type": "string"},
                "rollout": {
                    "type": ["object", "null"],
                    "description": "The store's active-rollout row",
                    "properties": {
                        "workflow_id": {"type": "string"},
                        "run_id": {"type": "string"},
                        "version": {"type": "string"},
                        "state": {"type": "string"},
                        "stage_index": {"type": "integer"},
                        "started_at": _TIME,
                        "updated_at": _TIME,
                    },
                },
                "lock": {
                    "type": ["object", "null"],
                    "properties": {
                        "workflow_id": {"type": "string"},
                        "run_id": {"type": "string"},
                        "version": {"type": "string"},
                        "acquired_at": _TIME,
                    },
                },
                "workflow": {
                    "type": "object",
                    "properties": {
                        "workflow_id": {"type": "string"},
                        "run_id": _NULLABLE_STRING,
                        "execution_status": _NULLABLE_STRING,
                        "status": {"type": ["object", "null"],
                                   "description": "The workflow's `status` query"},
                        "error": {"type": ["string", "null"],
                                  "description": "Why Temporal could not tell"},
                    },
                },
            },
        },
        "Command": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "reason": {"type": "string", "maxLength": 2000},
                "by": {"type": "string", "maxLength": 200},
            },
        },
        "CommandResult": {
            "type": "object",
            "description": "The workflow's short answer, once the command took effect (or after "
                           "10 s, then `message` starts with `requested:`). The full progress is "
                           "`GET /v1/admin/rollouts/{path}`.",
            "required": ["workflow_id", "command", "accepted", "state", "phase", "message"],
            "properties": {
                "workflow_id": {"type": "string"},
                "command": {"enum": list(COMMAND_NAMES)},
                "accepted": {"type": "boolean",
                             "description": "False when it changed nothing (e.g. a second halt)"},
                "state": {"type": "string", "description": "The rollout's state after it"},
                "phase": {"type": "string"},
                "stage": {"type": ["string", "null"]},
                "stage_number": {"type": "integer", "description": "1-based; 0 before the first stage"},
                "stage_count": {"type": "integer"},
                "paused": {"type": "boolean"},
                "message": {"type": "string", "description": "What the command did"},
            },
        },
    }


def _parameters() -> dict[str, Any]:
    def query(name: str, schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "in": "query", "required": False, "schema": schema,
                "description": description, **extra}

    return {
        "ConfigPath": {
            "name": "path", "in": "path", "required": True,
            "description": "Config path: 1-255 characters of [a-z0-9._-] segments joined by '/', "
                           "written as is (slashes not encoded)",
            "schema": _PATH,
        },
        "Namespace": query("namespace", _NAMESPACE, "Config namespace"),
        "Client": query("client", {"type": "string"},
                        "Client id (default: anonymous, never in a percentile stage)"),
        "Channel": query("channel", {"type": "string"}, "The client's channel"),
        "Label": query("label", {"type": "array", "items": {"type": "string", "pattern": "^[^=]+="}},
                       "A label key=value; repeatable", style="form", explode=True),
        "Wait": query("wait", {"type": "number", "minimum": 0, "maximum": MAX_WAIT, "default": 0},
                      "Long-poll: with If-None-Match, hold the request up to this many seconds "
                      "until what this client resolves to changes, else answer 304"),
        "Stable": query("stable", {"enum": ["true", "false", "1", "0", "yes", "no"]},
                        "true: always the stable version"),
        "IfNoneMatch": {"name": "If-None-Match", "in": "header", "required": False,
                        "schema": {"type": "string"}, "description": "ETag of the copy held"},
        "Limit": query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_HISTORY_LIMIT,
                                 "default": DEFAULT_HISTORY_LIMIT}, "Newest entries to return"),
        "SinceSeconds": query(
            "since_seconds",
            {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_SINCE_SECONDS,
             "default": DEFAULT_SINCE_SECONDS},
            "How far back, in seconds, a client must have been seen",
        ),
        "WorkflowId": query("workflow_id", {"type": "string", "minLength": 1, "maxLength": 1000},
                            "Workflow id (default: the lock holder's, else rollout:{namespace}/{path})"),
    }


def _paths() -> dict[str, Any]:
    admin_errors = {"401": _UNAUTHORIZED}
    paths: dict[str, Any] = {
        "/v1/configs/{path}": {
            "get": {
                "operationId": "getConfig",
                "summary": "The version this client resolves to",
                "tags": ["distribution"],
                "security": _CLIENT,
                "parameters": _params(
                    "ConfigPath", "Namespace", "Client", "Channel", "Label", "Wait", "Stable",
                    "IfNoneMatch",
                ),
                "responses": {
                    "200": {
                        **_json(_ref("Config"), "The resolved config"),
                        "headers": {"ETag": {"schema": {"type": "string"}}},
                    },
                    "304": {"description": "The copy held (If-None-Match) is current",
                            "headers": {"ETag": {"schema": {"type": "string"}}}},
                    "400": _error("Invalid path or query parameter"),
                    "401": _UNAUTHORIZED,
                    "404": _error("Unknown config, or nothing to serve this client yet"),
                    "503": _error("The snapshots were never loaded from the store"),
                },
            }
        },
        "/v1/reports": {
            "post": {
                "operationId": "postReport",
                "summary": "A client's health report on the version it runs",
                "tags": ["distribution"],
                "security": _CLIENT,
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": _ref("Report")}}},
                "responses": {
                    "202": _json(_ref("Accepted"), "Stored"),
                    "400": _error("Malformed JSON or invalid fields (each listed)"),
                    "401": _UNAUTHORIZED,
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
                    "200": _json(_ref("SchemaDocument"), "The schema"),
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
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": _ref("SchemaPut")}}},
                "responses": {
                    "200": _json(_ref("SchemaDocument"), "Stored"),
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
                    "200": _json(_ref("Versions"), "The versions"),
                    "400": _error("Invalid path or namespace"),
                    **admin_errors,
                    "404": _error("Unknown config"),
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
                    "200": _json(_ref("History"), "The audit log"),
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
                "parameters": _params("ConfigPath", "Namespace", "SinceSeconds"),
                "responses": {
                    "200": _json(_ref("Clients"),
                                 "The clients; polls reach the store within a few seconds"),
                    "400": _error("Invalid path, namespace or since_seconds"),
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
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": _ref("RolloutRequest")}}},
                "responses": {
                    "202": _json(_ref("RolloutStarted"), "Started"),
                    "400": _error("Invalid request or value (every problem listed)"),
                    **admin_errors,
                    "409": _error("The config already has a running rollout"),
                    "413": _error(f"Body over {ADMIN_BODY_LIMIT} bytes"),
                    "503": _error("Temporal is unreachable"),
                },
            }
        },
        "/v1/admin/rollouts/{path}": {
            "get": {
                "operationId": "getRollout",
                "summary": "The active rollout: store row, lock, and the workflow's status",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("ConfigPath", "Namespace", "WorkflowId"),
                "responses": {
                    "200": _json(_ref("RolloutState"),
                                 "The state; `workflow.error` says why Temporal could not tell"),
                    "400": _error("Invalid path or namespace"),
                    **admin_errors,
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "The store answers and the snapshots are current",
                "tags": ["operations"],
                "responses": {
                    "200": _json(_ref("Health"), "Healthy"),
                    "503": _json(_ref("Health"), "Unavailable"),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics",
                "tags": ["operations"],
                "responses": {"200": {"description": "Prometheus text format",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}}},
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
        paths[f"/v1/admin/rollouts/{{path}}/{name}"] = {
            "post": {
                "operationId": f"{name}Rollout",
                "summary": COMMANDS[name].summary + " Sent as a workflow update.",
                "tags": ["admin"],
                "security": _ADMIN,
                "parameters": _params("ConfigPath", "Namespace", "WorkflowId"),
                "requestBody": {"required": False,
                                "content": {"application/json": {"schema": _ref("Command")}}},
                "responses": {
                    "200": _json(_ref("CommandResult"), "Answered by the workflow"),
                    "400": _error("Invalid path, namespace or body"),
                    **admin_errors,
                    "404": _error("No running rollout"),
                    "409": _error("Refused by the workflow (its message)"),
                    "413": _error(f"Body over {ADMIN_BODY_LIMIT} bytes"),
                    "503": _error("Temporal is unreachable"),
                },
            }
        }
    return paths


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tempoconf distribution API",
            "version": __version__,
            "description": "Serves each polling client the config version its identity resolves "
                           "to; takes health reports; admin endpoints drive rollouts on Temporal. "
                           "A `{path}` parameter is a config path and may contain '/'.",
        },
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "parameters": _parameters(),
            "securitySchemes": {
                "adminToken": {"type": "http", "scheme": "bearer",
                               "description": "TEMPOCONF_ADMIN_TOKEN; required only when set"},
                "clientToken": {"type": "http", "scheme": "bearer",
                                "description": "TEMPOCONF_CLIENT_TOKEN; required only when set"},
            },
        },
    }
