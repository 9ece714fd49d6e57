"""The field types and the base model the rollout request's parts share (tempoconf.rollout.request).

A duration, a config path, a namespace and a URL, each with its JSON Schema; the strict base of
every part of the request; the JSON Schema of an "at least one of" rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
)

from tempoconf.canonical import canonical_json
from tempoconf.durations import DURATION_JSON_SCHEMA, parse_duration
from tempoconf.paths import namespace_problem, path_problem
from tempoconf.problems import Problem
from tempoconf.storable import json_depth_problem

__all__ = [
    "VERSION_ID_PATTERN",
    "ConfigPath",
    "Duration",
    "HttpUrl",
    "Namespace",
    "StrictSpec",
    "one_of",
    "positive_duration",
    "unstorable_value_problems",
]

# In JSON a duration is written as seconds (pydantic's default, ISO 8601 "PT5M", is a form that
# parse_duration does not read), so a dumped check or stage validates again as it was. Its JSON
# Schema as an input is every form parse_duration reads (as an output: a number, from the serializer).
Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(lambda value: value.total_seconds(), return_type=float, when_used="json"),
    WithJsonSchema(DURATION_JSON_SCHEMA, mode="validation"),
]

VERSION_ID_PATTERN = r"^[0-9a-f]{16}$"
"""A version id: 16 lowercase hex characters."""


def _refuse(problem_of: Callable[[Any], str | None]) -> Callable[[Any], Any]:
    """A pydantic validator from a `..._problem` function (None: fine, else the message)."""

    def check(value: Any) -> Any:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value

    return check


def _url_problem(value: str) -> str | None:
    return (
        None
        if value.startswith(("http://", "https://"))
        else "url must start with http:// or https://"
    )


# The JSON Schemas say what path_problem and namespace_problem check (they keep their messages).
_SEGMENT = r"(?!\.\.?(/|$))[a-z0-9._-]+"
ConfigPath = Annotated[
    str,
    AfterValidator(_refuse(path_problem)),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": f"^{_SEGMENT}(/{_SEGMENT})*$",
        }
    ),
]
"""A config path (docs/contract.md: 1-255 chars of [a-z0-9._-] segments joined by /)."""
Namespace = Annotated[
    str,
    AfterValidator(_refuse(namespace_problem)),
    WithJsonSchema({"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,62}$"}),
]
HttpUrl = Annotated[
    str,
    Field(min_length=1),
    AfterValidator(_refuse(_url_problem)),
    WithJsonSchema({"type": "string", "pattern": "^https?://"}),
]


def positive_duration(value: timedelta | None, info: ValidationInfo) -> timedelta | None:
    """A field validator: a duration given must be greater than zero (the message names the field)."""
    if value is not None and value <= timedelta(0):
        raise ValueError(f"{info.field_name} must be greater than zero")
    return value


def one_of(*fields: str, exactly: bool = False) -> dict[str, Any]:
    """JSON Schema for a rule the model checks in a validator: at least (or exactly) one of
    `fields` is given and not null, so that the published schema refuses what the model refuses."""
    given = [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}} for name in fields
    ]
    return {"oneOf" if exactly else "anyOf": given}


class StrictSpec(BaseModel):
    # The base of every part of the rollout request (no docstring: a part's schema has its own).
    # Unknown fields are refused: a typo such as "cooldwon" must not silently fall back to a default.
    # Field docstrings become the descriptions of the JSON Schema editors show.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def unstorable_value_problems(
    holder: Mapping[str, Any], pointer: str, *, plain: bool = False
) -> list[Problem]:
    """The problem of `holder`'s "value" (the request's, or a change's) that no store could keep:
    nested too deep, or not plain JSON; at `pointer`. None given: none. `plain`: the whole request
    was serialized already, so the value is plain JSON and only its depth is checked."""
    if "value" not in holder:
        return []
    too_deep = json_depth_problem(holder["value"], pointer)
    if too_deep is not None:
        return [too_deep]
    if plain:
        return []
    try:
        canonical_json(holder["value"])
    except (TypeError, ValueError, RecursionError) as error:
        return [Problem(pointer, f"value is not plain JSON: {error}")]
    return []
