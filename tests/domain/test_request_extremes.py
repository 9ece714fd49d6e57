"""Every part of every example rollout request, and of requests that use every other field,
replaced in turn by an extreme JSON value: the request is refused with InvalidRequestError (a 400
from the API, a non-retryable failure from the workflow's prepare step) or accepted, and nothing
else escapes. An OverflowError from a protobuf duration past float's range once escaped pydantic:
a 500 from the API, and a prepare step retried 12 times before failing with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tempoconf.problems import InvalidRequestError
from tempoconf.rollout.request import RolloutRequest, parse_rollout_request
from tests.fixtures.extremes import EXTREMES, parts, replaced

EXAMPLES = sorted(Path(__file__).parents[2].joinpath("examples").glob("rollout*.json"))

PROMETHEUS = "http://127.0.0.1:9090"
EVERY_CHECK_FIELD: dict[str, Any] = {
    "interval": {"seconds": 10, "nanos": 0},
    "initial_delay": {"seconds": 5, "nanos": 0},
    "failure_limit": 2,
    "on_no_data": "pass",
    "name": "check",
    "attempts": 3,
}
CHECKS: list[dict[str, Any]] = [
    {"kind": "reports", "max_error_ratio": 0.1, "min_clients": 1, **EVERY_CHECK_FIELD},
    {"kind": "reports", "max_baseline_factor": 2, "window": {"seconds": 60, "nanos": 0}},
    {
        "kind": "reports",
        "judge": {
            "sequential": {
                "max_increase": 0.005,
                "max_latency_increase_ms": 20,
                "confidence": 0.99,
                "on_inconclusive": "extend",
                "max_extension": {"seconds": 600, "nanos": 0},
                "after_extension": "pass",
            }
        },
    },
    {"kind": "prometheus", "url": PROMETHEUS, "query": "up", "max": 1, "min": 0},
    {
        "kind": "prometheus",
        "url": PROMETHEUS,
        "judge": {"sequential": {"max_increase": 0.005, "on_inconclusive": "fail"}},
        "counts": {
            "cohort_failed": 'sum by (instance) (increase(errors_total{version="{version}"}[{elapsed}]))',
            "cohort_total": 'sum by (instance) (increase(calls_total{version="{version}"}[{elapsed}]))',
            "baseline_failed": 'sum by (instance) (increase(errors_total{version!="{version}"}[{elapsed}]))',
            "baseline_total": 'sum by (instance) (increase(calls_total{version!="{version}"}[{elapsed}]))',
        },
        "timeout": {"seconds": 2, "nanos": 0},
    },
    {"kind": "http", "url": PROMETHEUS, "timeout": {"seconds": 2, "nanos": 0}},
]
STAGE_OF_EVERY_FIELD: dict[str, Any] = {
    "labels": {"zone": "a"},
    "cooldown": {"seconds": "30", "nanos": 0},
    "expiration": {"seconds": 3600, "nanos": 0},
    "manual": True,
    "name": "zone a",
    "health": CHECKS,
    "approvals": {"required": 1, "forbid_author": False},
    "min_applied": 0.9,
    "applied_window": {"seconds": 60, "nanos": 0},
    "apply_timeout": {"seconds": 600, "nanos": 0},
    "on_apply_timeout": "hold",
}
EVERY_FIELD: list[dict[str, Any]] = [
    {
        "path": "a/every_field",
        "namespace": "default",
        "value": {"x": 1},
        "webhooks": ["http://127.0.0.1:9/hook"],
        "default_cooldown_time": {"seconds": 60, "nanos": 0},
        "default_expiration_time": {"seconds": 7200, "nanos": 0},
        "stages": [{"channel": "canary"}, STAGE_OF_EVERY_FIELD, {"percentile": 50}],
        "health": CHECKS,
        "author": "alice@example.com",
        "commit": "3f2a9c1",
        "message": "every field",
        "started_by": "alice",
        "started_by_emails": ["alice@example.com"],
        "approval_key": "ed25519:A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=",
        "windows": [{"days": ["sun"], "from": "03:00", "to": "04:00", "timezone": "UTC"}],
        "override_freeze": {"reason": "incident fix"},
    },
    {
        "changes": [
            {"path": "a/one", "namespace": "default", "value": 1},
            {"path": "a/two", "version": "0123456789abcdef"},
        ],
        "strategy": {"linear": {"step": 25, "every": {"seconds": 60, "nanos": 0}}},
    },
    {
        "path": "a/exponential",
        "version": "0123456789abcdef",
        "strategy": {
            "exponential": {"start": 1, "factor": 10, "every": {"seconds": 60, "nanos": 0}}
        },
    },
]
"""Requests that, with the examples, use every field of the request, durations in every form."""


def _with_every_stage_duration(request: dict[str, Any]) -> dict[str, Any]:
    """The example with each stage's optional durations set too, so they are replaced as well."""
    for stage in request.get("stages", []):
        stage.setdefault("cooldown", "1s")
        stage.setdefault("expiration", "1h")
    return request


REQUESTS = [
    *(
        pytest.param(request, id=f"every-field-{index}")
        for index, request in enumerate(EVERY_FIELD)
    ),
    *(
        pytest.param(_with_every_stage_duration(json.loads(path.read_text())), id=path.name)
        for path in EXAMPLES
    ),
]


def _schema_fields(schema: dict[str, Any]) -> set[str]:
    """Every field the JSON Schema names, as a path of names (`*` for an item)."""
    definitions = schema.get("$defs", {})
    fields: set[str] = set()

    def visit(node: dict[str, Any], at: str, seen: frozenset[str]) -> None:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                visit(definitions[name], at, seen | {name})
            return
        for choice in (*node.get("anyOf", ()), *node.get("oneOf", ()), *node.get("allOf", ())):
            visit(choice, at, seen)
        if isinstance(node.get("items"), dict):
            visit(node["items"], f"{at}/*", seen)
        for name, member in node.get("properties", {}).items():
            fields.add(f"{at}/{name}")
            visit(member, f"{at}/{name}", seen)

    visit(schema, "", frozenset())
    return fields


def test_the_requests_swept_use_every_field_of_the_request() -> None:
    used = {
        "/" + "/".join("*" if isinstance(step, int) else step for step in at)
        for request in REQUESTS
        for at in parts(request.values[0])
    }
    unused = _schema_fields(RolloutRequest.model_json_schema()) - used
    assert not unused, f"add these fields to EVERY_FIELD: {sorted(unused)}"


def test_every_field_requests_are_valid() -> None:
    for request in EVERY_FIELD:
        parse_rollout_request(request)


@pytest.mark.parametrize("request_", REQUESTS)
def test_an_extreme_value_anywhere_is_refused_with_problems_or_accepted(
    request_: dict[str, Any],
) -> None:
    escaped: list[str] = []
    refused = 0
    for at in list(parts(request_)):
        for extreme in EXTREMES:
            try:
                parse_rollout_request(replaced(request_, at, extreme))
            except InvalidRequestError:
                refused += 1
            except Exception as error:  # noqa: BLE001 - what the test looks for
                escaped.append(f"/{'/'.join(map(str, at))} = {str(extreme)[:20]!r}: {error!r}")

    assert not escaped, "\n".join(escaped[:20])
    assert refused > 0  # the sweep reached the validators
