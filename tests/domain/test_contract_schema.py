"""The rollout request's published JSON Schema (docs/rollout-request.schema.json) says what the
request model accepts: the examples pass it, the bad one fails it where it documents, durations
are described in all three forms, and the rules the model checks in validators are in it too."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tempoconf.contract_schema import ROLLOUT_REQUEST_SCHEMA_ID, rollout_request_schema
from tempoconf.durations import DURATION_JSON_SCHEMA, parse_duration
from tempoconf.problems import InvalidRequestError
from tempoconf.rollout.request import DEFAULT_COOLDOWN, DEFAULT_EXPIRATION, parse_rollout_request
from tests.domain.test_request import DESIGN_EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "rollout-request.schema.json"
EXAMPLES = ROOT / "examples"
REQUEST_EXAMPLES = sorted([*EXAMPLES.glob("rollout*.json"), *EXAMPLES.glob("demo-*.json")])
BAD_EXAMPLE = EXAMPLES / "rollout-bad.json"


@cache
def validator() -> Draft202012Validator:
    schema = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_errors(request: Any) -> list[str]:
    """Where the published schema refuses `request`: JSON pointers, sorted."""
    return sorted(
        "/" + "/".join(map(str, error.absolute_path)) for error in validator().iter_errors(request)
    )


def model_accepts(request: Any) -> bool:
    try:
        parse_rollout_request(request)
    except InvalidRequestError:
        return False
    return True


def test_the_published_file_is_the_generated_schema() -> None:
    published = json.loads(PUBLISHED.read_text(encoding="utf-8"))

    assert published == rollout_request_schema()
    assert published["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert published["$id"] == ROLLOUT_REQUEST_SCHEMA_ID


def test_every_example_request_passes_the_schema_and_the_model() -> None:
    good = [path for path in REQUEST_EXAMPLES if path != BAD_EXAMPLE]
    assert len(good) >= 6 and BAD_EXAMPLE in REQUEST_EXAMPLES
    for path in good:
        request = json.loads(path.read_text(encoding="utf-8"))
        assert schema_errors(request) == [], path.name
        assert model_accepts(request), path.name


def test_the_bad_example_fails_the_schema_where_it_is_wrong() -> None:
    request = json.loads(BAD_EXAMPLE.read_text(encoding="utf-8"))

    assert not model_accepts(request)
    # What a schema can see; the rest (an expiration of 0s, three decimals, the value against the
    # config's own schema) only the model and the store check.
    assert schema_errors(request) == [
        "/default_cooldown_time",  # "five minutes"
        "/health/0",  # a reports check without a bound
        "/health/1",  # kind dns
        "/stages/0",  # cooldwon
        "/stages/1/percentile",  # 150
        "/stages/2",  # names no target
    ]


@pytest.mark.parametrize(
    "duration",
    [300, 0, 0.25, "300", "300s", " 15m ", "1h30m", "250ms", "1.5h", ".5s", "+5m", "2us", "3µs",
     "7ns", {"seconds": 300}, {"seconds": "300", "nanos": 5}, {"nanos": 250_000_000}, {}],
)  # fmt: skip
def test_the_duration_schema_takes_what_parse_duration_reads(duration: Any) -> None:
    parse_duration(duration)
    assert list(Draft202012Validator(DURATION_JSON_SCHEMA).iter_errors(duration)) == []


@pytest.mark.parametrize(
    "duration",
    [-1, "-5m", "five minutes", "5 min", "", "1d", True, None, [300], 4e9,
     {"seconds": -1}, {"seconds": 1.5}, {"seconds": 1, "minutes": 2}, {"nanos": 10**9}],
)  # fmt: skip
def test_the_duration_schema_refuses_what_parse_duration_refuses(duration: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(duration)
    assert list(Draft202012Validator(DURATION_JSON_SCHEMA).iter_errors(duration)) != []


def test_durations_are_documented_in_all_three_forms_with_defaults_in_seconds() -> None:
    properties = rollout_request_schema()["properties"]
    cooldown = properties["default_cooldown_time"]

    assert [form["type"] for form in cooldown["oneOf"]] == ["number", "string", "object"]
    assert cooldown["default"] == DEFAULT_COOLDOWN.total_seconds()
    assert properties["default_expiration_time"]["default"] == DEFAULT_EXPIRATION.total_seconds()
    assert parse_duration(cooldown["default"]) == DEFAULT_COOLDOWN
    assert DURATION_JSON_SCHEMA["examples"] == [300, "300s", "1h30m", "250ms", {"seconds": 300}]


_DROP = object()


def _with(**changes: Any) -> dict[str, Any]:
    """The contract's example with `changes`; a field set to _DROP is left out."""
    request = copy.deepcopy(DESIGN_EXAMPLE)
    request.update(changes)
    return {key: value for key, value in request.items() if value is not _DROP}


@pytest.mark.parametrize(
    ("request_", "accepted"),
    [
        (_with(), True),
        (_with(value=None), True),  # the value null
        (_with(value=_DROP), False),  # neither value nor version
        (_with(value=_DROP, version="0123456789abcdef"), True),
        (_with(version="0123456789abcdef"), False),  # both
        (_with(version="0123456789ABCDEF", value=_DROP), False),
        (_with(path="a//b"), False),
        (_with(path="a/../b"), False),
        (_with(namespace="-x"), False),
        (_with(stages=[{"cooldown": "60s"}]), False),
        (_with(stages=[{"channel": None, "labels": {"region": "eu"}}]), True),
        # The strategy's stages follow the explicit ones and must widen them, which only the
        # model checks (the example's 50% stage reaches a 30% one: tests/domain/test_request.py).
        (_with(stages=[{"channel": "canary"}], strategy={"linear": {"step": 30}}), True),
        (_with(strategy={"linear": {"step": 25}, "exponential": {"start": 1, "factor": 2}}), False),
        (
            _with(
                stages=[{"channel": "canary"}],
                strategy={"linear": None, "exponential": {"start": 1, "factor": 2}},
            ),
            True,
        ),
        (_with(strategy={}), False),
        (_with(health=[{"kind": "prometheus", "url": "http://p:9090", "query": "up"}]), False),
        (
            _with(health=[{"kind": "prometheus", "url": "http://p:9090", "query": "up", "min": 1}]),
            True,
        ),
        (_with(health=[{"kind": "reports", "max_baseline_factor": 2}]), True),
        (_with(health=[{"kind": "http", "url": "ftp://judge"}]), False),
        (_with(webhooks=["https://hooks.example/rollouts"]), True),
        (_with(default_cooldown_time={"seconds": "90"}), True),
        # Unknown fields are refused, `$schema` too: editors map the schema to files by name.
        (_with(**{"$schema": "./docs/rollout-request.schema.json"}), False),
    ],
)
def test_the_schema_accepts_what_the_model_accepts(
    request_: dict[str, Any], accepted: bool
) -> None:
    assert model_accepts(request_) is accepted
    assert (schema_errors(request_) == []) is accepted, schema_errors(request_)
