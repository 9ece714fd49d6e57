"""The document's shared pieces: the body schemas (generated from the models), the named
parameters and security schemes, and the helpers that refer to them from an operation."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import TypeAdapter

from tempoconf.access.roles import Role
from tempoconf.api.answers import (
    Accepted,
    BundleAnswer,
    ChangesAnswer,
    ClientsAnswer,
    CommandAnswer,
    ConfigAnswer,
    ConfigsAnswer,
    ErrorAnswer,
    FreezeAnswer,
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
from tempoconf.api.distribution import MAX_WAIT
from tempoconf.api.ofrep_answers import (
    OfrepBulkAnswer,
    OfrepBulkError,
    OfrepFlagAnswer,
    OfrepFlagError,
    OfrepRequest,
)
from tempoconf.api.routes.clients import DEFAULT_SINCE_SECONDS, MAX_SINCE_SECONDS
from tempoconf.api.routes.freezes import (
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
from tempoconf.rollout.commands import OperatorCommand
from tempoconf.rollout.request import RolloutRequest
from tempoconf.rollout.spec_fields import ConfigPath, Namespace

__all__ = [
    "ADMIN",
    "ANSWERS",
    "CLIENT",
    "SCRAPER",
    "REF_TEMPLATE",
    "REQUEST_BODIES",
    "answer",
    "body_schemas",
    "error",
    "json_answer",
    "namespace_schema",
    "not_modified",
    "parameters",
    "params",
    "request",
    "security_schemes",
    "unauthorized",
    "with_etag",
]

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
    ChangesAnswer,
    FreezeAnswer,
    FreezeEndAnswer,
    FreezesAnswer,
    ServedStateAnswer,
    OfrepFlagAnswer,
    OfrepFlagError,
    OfrepBulkAnswer,
    OfrepBulkError,
)
"""The models of the JSON answers: documented as they serialize."""
Mode = Literal["validation", "serialization"]

ADMIN: list[dict[str, list[str]]] = [{"adminToken": []}, {}]
CLIENT: list[dict[str, list[str]]] = [{"clientToken": []}, {}]
SCRAPER: list[dict[str, list[str]]] = [{"scraperToken": []}, {}]
ROLE_KEY = "x-tempoconf-role"
"""The role an admin operation needs in its namespace(s) under an access policy."""


def admin_role(role: Role) -> dict[str, Any]:
    """An admin operation's security: an operator's token, holding `role` where it acts."""
    return {"security": ADMIN, ROLE_KEY: role.value}


def forbidden(what: str) -> dict[str, Any]:
    return {
        "description": f"{what} (an access policy is on): the caller and what it lacks",
        "content": {"application/json": {"schema": _ref(ErrorAnswer)}},
    }


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


def json_answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def answer(model: type[Any], description: str) -> dict[str, Any]:
    return json_answer(_ref(model), description)


def request(model: type[Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(model)}}}


def error(description: str) -> dict[str, Any]:
    return answer(ErrorAnswer, description)


def retry_later(description: str) -> dict[str, Any]:
    """A 503 that says when to try again (`Retry-After`, seconds): the SDK and the agent do."""
    return {
        **error(description),
        "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 0}}},
    }


def params(*names: str) -> list[dict[str, str]]:
    return [{"$ref": f"#/components/parameters/{name}"} for name in names]


def unauthorized() -> dict[str, Any]:
    return {
        "description": "Missing or wrong bearer token (only when a token is configured)",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        "content": {"application/json": {"schema": _ref(ErrorAnswer)}},
    }


def with_etag(response: dict[str, Any], *more_headers: str) -> dict[str, Any]:
    """A 200 that a client may hold and revalidate with If-None-Match."""
    headers = ("ETag", *more_headers)
    return {**response, "headers": {name: {"schema": {"type": "string"}} for name in headers}}


def not_modified(what: str = "copy") -> dict[str, Any]:
    """The 304 of a request whose If-None-Match names what is current."""
    return {
        "description": f"The {what} held (If-None-Match) is current",
        "headers": {"ETag": {"schema": {"type": "string"}}},
    }


def namespace_schema() -> dict[str, Any]:
    return TypeAdapter(Namespace).json_schema()


def parameters() -> dict[str, Any]:
    """The parameters operations name by `$ref` (components/parameters)."""

    def query(name: str, schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "schema": schema,
            "description": description,
            **extra,
        }

    def wait(until: str) -> dict[str, Any]:
        return query(
            "wait",
            {"type": "number", "minimum": 0, "maximum": MAX_WAIT, "default": 0},
            "Long-poll: with If-None-Match, hold the request up to this many seconds "
            f"until {until} changes, else answer 304",
        )

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
            {**namespace_schema(), "default": DEFAULT_NAMESPACE},
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
        "Wait": wait("what this client resolves to"),
        "BundleWait": wait("the bundle"),
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
            "Workflow id: one of this config's own rollouts (default: the lock holder's, else "
            "rollout:{namespace}/{path}); a start's: the request's own id, or it followed by "
            "`:` and a suffix. Another config's rollout is refused, as an id that names none",
        ),
    }


def security_schemes() -> dict[str, Any]:
    def bearer(description: str) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "description": description}

    return {
        "adminToken": bearer(
            "An operator's token: with an access policy (TEMPOCONF_ACCESS_FILE), one of its "
            "`tokens` or an OpenID Connect access token, holding the operation's "
            "`x-tempoconf-role` in its namespace; without one, TEMPOCONF_ADMIN_TOKEN(S), "
            "required only when set"
        ),
        "clientToken": bearer(
            "A client token: with an access policy, one of its `clients`, for its namespaces; "
            "without one, TEMPOCONF_CLIENT_TOKEN, required only when set"
        ),
        "scraperToken": bearer(
            "A scraper token (GET /metrics): with an access policy, one of its `scrapers`; "
            "without one, none (the metrics are open)"
        ),
    }
