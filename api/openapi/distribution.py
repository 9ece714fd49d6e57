"""The paths clients use: polls, bundles, health reports, and OFREP's evaluations."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from tempoconf.api.answers import Accepted, BundleAnswer, ChangesAnswer, ConfigAnswer, ConfigsAnswer
from tempoconf.api.bodies import REPORT_BODY_LIMIT
from tempoconf.api.distribution import MAX_WAIT
from tempoconf.api.ofrep import BULK_ROUTE, FLAG_ROUTE, OFREP_BODY_LIMIT
from tempoconf.api.ofrep_answers import (
    OfrepBulkAnswer,
    OfrepBulkError,
    OfrepFlagAnswer,
    OfrepFlagError,
    OfrepRequest,
)
from tempoconf.api.openapi.components import (
    CLIENT,
    answer,
    error,
    namespace_schema,
    not_modified,
    params,
    request,
    retry_later,
    unauthorized,
    with_etag,
)
from tempoconf.api.routes.reports import ReportBody
from tempoconf.paths import DEFAULT_NAMESPACE
from tempoconf.resolution.ofrep import NAMESPACE_HEADER
from tempoconf.rollout.spec_fields import ConfigPath

__all__ = ["distribution_paths", "ofrep_paths"]

_NEVER_LOADED = "The snapshots were never loaded from the store"


def _polled(ok: dict[str, Any], invalid: str, not_found: str) -> dict[str, Any]:
    """The answers of a GET served from the snapshots, revalidated by ETag."""
    return {
        "200": ok,
        "304": not_modified(),
        "400": error(invalid),
        "401": unauthorized(),
        "404": error(not_found),
        "503": error(_NEVER_LOADED),
    }


def _changes() -> dict[str, Any]:
    def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "schema": schema,
            "description": description,
        }

    return {
        "get": {
            "operationId": "getChanges",
            "summary": "The configs changed after a revision: one long-poll for an edge relay, "
            "instead of one per config it serves",
            "description": "Answers as soon as the process holds a revision after `since` with "
            "changes in the namespaces the caller reads (or the one `namespace` names), else "
            "after `wait` seconds with none. `reset: true` (no `changes`) when `since` is "
            "missing, older than the changes this process remembers, or newer than its "
            "revision: refetch every config served, then follow on from `revision`.",
            "tags": ["distribution"],
            "security": CLIENT,
            "parameters": [
                query(
                    "since",
                    {"type": "integer", "minimum": 0},
                    "The `revision` of the previous answer (leave it out on a first call)",
                ),
                query(
                    "wait",
                    {"type": "number", "minimum": 0, "maximum": MAX_WAIT, "default": 0},
                    "Long-poll: hold the request up to this many seconds until a change",
                ),
                query("namespace", namespace_schema(), "Only this namespace's changes"),
            ],
            "responses": {
                "200": answer(ChangesAnswer, "The changes after `since`, or a reset"),
                "400": error("Invalid since, wait or namespace"),
                "401": unauthorized(),
                "503": error(_NEVER_LOADED),
            },
        }
    }


def distribution_paths() -> dict[str, Any]:
    return {
        "/v1/configs/{path}": {
            "get": {
                "operationId": "getConfig",
                "summary": "The version this client resolves to",
                "tags": ["distribution"],
                "security": CLIENT,
                "parameters": params(
                    "ConfigPath",
                    "Namespace",
                    "Client",
                    "Channel",
                    "Label",
                    "Wait",
                    "Stable",
                    "IfNoneMatch",
                ),
                "responses": _polled(
                    with_etag(answer(ConfigAnswer, "The resolved config")),
                    "Invalid path or query parameter",
                    "Unknown config, or nothing to serve this client yet",
                ),
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
                "security": CLIENT,
                "parameters": params("ConfigPath", "Namespace", "BundleWait", "IfNoneMatch"),
                "responses": _polled(
                    with_etag(answer(BundleAnswer, "The config's bundle"), "Cache-Control"),
                    "Invalid path or query parameter",
                    "Unknown config in this namespace",
                ),
            }
        },
        "/v1/changes": _changes(),
        "/v1/configs": {
            "get": {
                "operationId": "getConfigs",
                "summary": "Several configs for one client, from one snapshot, with one ETag",
                "tags": ["distribution"],
                "security": CLIENT,
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
                    *params("Namespace", "Client", "Channel", "Label", "Wait", "Stable"),
                    *params("IfNoneMatch"),
                ],
                "responses": _polled(
                    with_etag(answer(ConfigsAnswer, "The resolved configs, in the order asked")),
                    "Invalid, missing or repeated path, or invalid query parameter",
                    "An unknown config, or one with nothing to serve this client",
                ),
            }
        },
        "/v1/reports": {
            "post": {
                "operationId": "postReport",
                "summary": "A client's health report on the version it runs, and (with "
                "`applied`) whether it applied that version",
                "tags": ["distribution"],
                "security": CLIENT,
                "requestBody": request(ReportBody),
                "responses": {
                    "202": answer(
                        Accepted, "Stored, or kept until the store is back: it will be counted"
                    ),
                    "400": error("Malformed JSON or invalid fields (each listed)"),
                    "401": unauthorized(),
                    "404": error("The config has no such version"),
                    "413": error(f"Body over {REPORT_BODY_LIMIT} bytes"),
                    "503": retry_later(
                        "The store is unreachable and too many reports wait for it, or it cannot "
                        "say whether a version not served exists: send it again after Retry-After"
                    ),
                },
            }
        },
    }


def ofrep_paths() -> dict[str, Any]:
    """OFREP's evaluation endpoints (tempoconf.resolution.ofrep): a flag is a config, its key the path."""
    namespace = {
        "name": NAMESPACE_HEADER,
        "in": "header",
        "required": False,
        "schema": {**namespace_schema(), "default": DEFAULT_NAMESPACE},
        "description": "The namespace of the flags (configs)",
    }

    def errors(model: type[Any]) -> dict[str, Any]:
        return {
            "400": answer(
                model, "PARSE_ERROR: the body is empty or not a JSON object; INVALID_CONTEXT: an "
                "attribute of the context is not a string (named); GENERAL: a bad header",
            ),
            "401": {
                **answer(model, "Missing or wrong bearer token (only when a client token is "
                         "configured)"),
                "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
            },
            "408": answer(model, "The body did not arrive in time"),
            "413": answer(model, f"Body over {OFREP_BODY_LIMIT} bytes"),
            "503": answer(model, _NEVER_LOADED),
        }  # fmt: skip

    return {
        FLAG_ROUTE: {
            "post": {
                "operationId": "ofrepEvaluateFlag",
                "summary": "OFREP: one flag (a config, by its path) evaluated for the context's "
                "client, as `GET /v1/configs/{path}` resolves it",
                "tags": ["ofrep"],
                "security": CLIENT,
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
                "requestBody": request(OfrepRequest),
                "responses": {
                    "200": answer(OfrepFlagAnswer, "The flag's value for this client"),
                    **errors(OfrepFlagError),
                    "404": answer(
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
                "security": CLIENT,
                "parameters": [namespace, *params("IfNoneMatch")],
                "requestBody": request(OfrepRequest),
                "responses": {
                    "200": with_etag(
                        answer(OfrepBulkAnswer, "Every flag of the namespace, sorted by key")
                    ),
                    "304": not_modified("evaluation"),
                    **errors(OfrepBulkError),
                },
            }
        },
    }
