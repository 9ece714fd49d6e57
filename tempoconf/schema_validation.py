"""JSON Schema (draft 2020-12) checks of config values and of schemas themselves."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from tempoconf.problems import Problem, json_pointer

__all__ = ["schema_problems", "value_problems"]


def schema_problems(schema: Any) -> list[Problem]:
    """Why `schema` is not a usable draft 2020-12 JSON Schema (empty when it is)."""
    if not isinstance(schema, dict | bool):
        return [Problem("", f"a JSON Schema is an object or a boolean, not {type(schema).__name__}")]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return [Problem(json_pointer(error.absolute_path), f"invalid JSON Schema: {error.message}")]
    return []


def value_problems(schema: Any, value: Any, *, pointer_prefix: str = "/value") -> list[Problem]:
    """Every violation of `schema` by `value`, each at its JSON pointer (prefixed, e.g. /value/port)."""
    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda error: list(map(str, error.absolute_path)))
    return [
        Problem(pointer_prefix + json_pointer(error.absolute_path), f"fails the config's schema: {error.message}")
        for error in errors
    ]
