"""JSON Schema (draft 2020-12) checks of config values and of schemas themselves."""

from __future__ import annotations

from typing import Any

import pytest

from tempoconf.schema_validation import schema_problems, value_problems

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "is_debug": {"type": "boolean"},
        "max_connections": {"type": "integer", "minimum": 1, "maximum": 10000},
        "hosts": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "limits": {
            "type": "object",
            "properties": {"a/b": {"type": "integer"}},
        },
    },
    "required": ["max_connections"],
    "additionalProperties": False,
}


def pointers(problems: list[Any]) -> list[str]:
    return [problem.pointer for problem in problems]


def test_a_valid_value_has_no_problems() -> None:
    assert value_problems(SCHEMA, {"is_debug": False, "max_connections": 2000}) == []


def test_a_violation_is_reported_at_its_pointer_under_value() -> None:
    (problem,) = value_problems(SCHEMA, {"max_connections": 20000})
    assert problem.pointer == "/value/max_connections"
    assert "20000 is greater than the maximum of 10000" in problem.message
    assert "schema" in problem.message


def test_every_violation_is_listed() -> None:
    value = {
        "is_debug": "yes",
        "max_connections": 0,
        "hosts": ["ok", "", 3],
        "limits": {"a/b": "x"},
        "extra": 1,
    }
    problems = value_problems(SCHEMA, value)
    assert sorted(pointers(problems)) == sorted(
        [
            "/value",  # additionalProperties: 'extra'
            "/value/hosts/1",
            "/value/hosts/2",
            "/value/is_debug",
            "/value/limits/a~1b",  # RFC 6901 escaping
            "/value/max_connections",
        ]
    )
    messages = " | ".join(problem.message for problem in problems)
    assert "'extra' was unexpected" in messages
    assert "'yes' is not of type 'boolean'" in messages


def test_missing_required_property() -> None:
    (problem,) = value_problems(SCHEMA, {})
    assert problem.pointer == "/value"
    assert "'max_connections' is a required property" in problem.message


def test_pointer_prefix_is_configurable() -> None:
    (problem,) = value_problems(SCHEMA, {"max_connections": "many"}, pointer_prefix="")
    assert problem.pointer == "/max_connections"


def test_whole_value_of_wrong_type() -> None:
    (problem,) = value_problems(SCHEMA, [1, 2])
    assert problem.pointer == "/value"
    assert "not of type 'object'" in problem.message


def test_boolean_schemas() -> None:
    assert value_problems(True, {"anything": 1}) == []
    assert pointers(value_problems(False, 1)) == ["/value"]


def test_draft_2020_12_keywords_are_applied() -> None:
    schema = {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}}
    assert value_problems(schema, [1, "a", "b"]) == []
    assert pointers(value_problems(schema, ["x", 2])) == ["/value/0", "/value/1"]


def test_refs_within_the_schema_resolve() -> None:
    schema = {
        "$defs": {"port": {"type": "integer", "maximum": 65535}},
        "properties": {"port": {"$ref": "#/$defs/port"}},
    }
    assert value_problems(schema, {"port": 80}) == []
    assert pointers(value_problems(schema, {"port": 70000})) == ["/value/port"]


def test_valid_schemas_have_no_problems() -> None:
    assert schema_problems(SCHEMA) == []
    assert schema_problems({}) == []
    assert schema_problems(True) == []


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"type": "strin"}, "/type"),
        ({"properties": {"port": {"minimum": "zero"}}}, "/properties/port/minimum"),
        ({"required": "name"}, "/required"),
        ({"additionalProperties": 3}, "/additionalProperties"),
    ],
)
def test_invalid_schemas_are_reported_at_their_pointer(schema: Any, pointer: str) -> None:
    problems = schema_problems(schema)
    assert pointer in pointers(problems)
    assert all(problem.message.startswith("invalid JSON Schema") for problem in problems)


def test_every_schema_problem_is_listed() -> None:
    problems = schema_problems(
        {"type": "strin", "properties": {"a": {"minimum": "x"}}, "required": 5}
    )
    assert sorted(pointers(problems)) == ["/properties/a/minimum", "/required", "/type"]


@pytest.mark.parametrize("schema", [None, "object", 3, ["type"]])
def test_a_schema_is_an_object_or_boolean(schema: Any) -> None:
    (problem,) = schema_problems(schema)
    assert problem.pointer == ""
    assert "object or a boolean" in problem.message


def test_an_invalid_schema_cannot_pass_a_value() -> None:
    (problem,) = value_problems({"type": "strin"}, "anything")
    assert problem.pointer == "/value"
    assert "schema is invalid" in problem.message


def test_a_dangling_ref_cannot_pass_a_value() -> None:
    (problem,) = value_problems({"$ref": "#/$defs/missing"}, 1)
    assert problem.pointer == "/value"
    assert "cannot be checked" in problem.message
