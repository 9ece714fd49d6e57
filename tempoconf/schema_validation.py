"""JSON Schema (draft 2020-12) checks of config values and of schemas themselves."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from tempoconf.problems import Problem, json_pointer
from tempoconf.storable import json_depth_problem, json_text_problems

__all__ = ["schema_problems", "value_problems"]


def schema_problems(schema: Any) -> list[Problem]:
    """Every reason `schema` is not a usable draft 2020-12 JSON Schema (empty when it is)."""
    if not isinstance(schema, dict | bool):
        return [
            Problem("", f"a JSON Schema is an object or a boolean, not {type(schema).__name__}")
        ]
    unstorable = json_text_problems(schema)
    if unstorable:
        return unstorable
    too_deep = json_depth_problem(schema)
    if too_deep is not None:
        return [too_deep]
    meta = Draft202012Validator(
        Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(meta.iter_errors(schema), key=lambda error: list(map(str, error.absolute_path)))
    return [
        Problem(json_pointer(error.absolute_path), f"invalid JSON Schema: {error.message}")
        for error in errors
    ]


def value_problems(schema: Any, value: Any, *, pointer_prefix: str = "/value") -> list[Problem]:
    """Every violation of `schema` by `value`, each at its JSON pointer (prefixed, e.g. /value/port).

    A schema that is itself invalid cannot judge anything: that is reported at `pointer_prefix`.
    """
    broken = schema_problems(schema)
    if broken:
        reasons = "; ".join(str(problem) for problem in broken)
        return [
            Problem(
                pointer_prefix, f"cannot be checked: the config's schema is invalid ({reasons})"
            )
        ]
    validator = Draft202012Validator(schema)
    try:
        found = list(validator.iter_errors(value))
    except (SchemaError, Unresolvable) as error:  # e.g. a $ref to nowhere
        return [Problem(pointer_prefix, f"cannot be checked against the config's schema: {error}")]
    errors = sorted(found, key=lambda error: list(map(str, error.absolute_path)))
    return [
        Problem(
            pointer_prefix + json_pointer(error.absolute_path),
            f"fails the config's schema: {error.message}",
        )
        for error in errors
    ]
