"""pydantic's validation errors as Problems: a JSON pointer each, and a plain message.

Used for the rollout request (tempoconf.rollout.request) and for any body the API validates with
pydantic (an operator command's, tempoconf.rollout.commands, included).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from tempoconf.problems import Problem, json_pointer
from tempoconf.rollout.health_specs import CHECK_KINDS

__all__ = ["problems_from_validation_error"]


def problems_from_validation_error(error: ValidationError, model: Any = None) -> list[Problem]:
    """Turn pydantic's errors into Problems with JSON pointers and plain messages; with `model`
    (the type validated), an unknown field names the nearest known one of its object."""
    problems = []
    for detail in error.errors(include_url=False):
        raw_location = list(detail["loc"])
        location = _strip_union_tags(raw_location)
        kind = detail["type"]
        # unexpected_keyword_argument: the same, said by a dataclass (tempoconf.rollout.commands)
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            message = f"unknown field {location[-1]!r}" if location else "unknown field"
            if location and isinstance(location[-1], str) and model is not None:
                known = _fields_at(model, raw_location[:-1])
                nearest = difflib.get_close_matches(location[-1], known, n=1, cutoff=0.6)
                if nearest:
                    message += f"; did you mean {nearest[0]!r}?"
        elif kind == "missing":
            message = "required field is missing"
        elif kind == "union_tag_invalid":
            message = (
                f"unknown check kind {detail['input'].get('kind')!r}; known: {sorted(CHECK_KINDS)}"
            )
        elif kind == "union_tag_not_found":
            message = f"a health check needs 'kind', one of {sorted(CHECK_KINDS)}"
        else:
            message = str(detail["msg"]).removeprefix("Value error, ")
        problems.append(Problem(json_pointer(location), message))
    return problems


def _strip_union_tags(location: list[Any]) -> list[Any]:
    # pydantic puts the discriminator's value into the location (health/0/reports/max_error_ratio);
    # the user's JSON has no such level, so drop it: only right after the index of a health check,
    # never elsewhere (an unknown stage field that happens to be called "http" stays in the pointer).
    return [
        part
        for position, part in enumerate(location)
        if not (
            part in CHECK_KINDS
            and position >= 2
            and isinstance(location[position - 1], int)
            and location[position - 2] == "health"
        )
    ]


def _fields_at(model: Any, location: list[Any]) -> list[str]:
    """The field names (as the JSON spells them) of the object at pydantic's `location` (union
    tags included) in a value of type `model`; [] when the path cannot be followed."""
    node: Any = model
    for part in location:
        node = _step(node, part)
        if node is None:
            return []
    return [name for option in _options(node) for name in _field_names(option)]


def _options(node: Any) -> list[Any]:
    """The types a hint stands for: Annotated and Optional unwrapped, a union's members."""
    origin = typing.get_origin(node)
    if origin is typing.Annotated:
        return _options(typing.get_args(node)[0])
    if origin in (typing.Union, types.UnionType):
        return [option for arg in typing.get_args(node) for option in _options(arg)]
    return [] if node is type(None) else [node]


def _field_hints(node: Any) -> dict[str, Any]:
    """A model's or dataclass's fields by the name the JSON uses (its alias when it has one)."""
    if isinstance(node, type) and issubclass(node, BaseModel):
        return {info.alias or name: info.annotation for name, info in node.model_fields.items()}
    if isinstance(node, type) and dataclasses.is_dataclass(node):
        hints = typing.get_type_hints(node, include_extras=True)
        return {field.name: hints.get(field.name) for field in dataclasses.fields(node)}
    return {}


def _field_names(node: Any) -> list[str]:
    return list(_field_hints(node))


def _step(node: Any, part: Any) -> Any:
    """What `part` of pydantic's location leads to from `node`: a field, an item, or the union
    member a tag names."""
    for option in _options(node):
        origin = typing.get_origin(option)
        if isinstance(part, int) and origin in (list, tuple, typing.Sequence):
            args = typing.get_args(option)
            return args[0] if args else None
        if isinstance(part, str) and origin is dict:
            return typing.get_args(option)[1]
        fields = _field_hints(option)
        if isinstance(part, str) and part in fields:
            return fields[part]
    if isinstance(part, str):  # a discriminated union's tag: the member it names
        for option in _options(node):
            kind = _field_hints(option).get("kind")
            if kind is not None and part in typing.get_args(kind):
                return option
    return None
