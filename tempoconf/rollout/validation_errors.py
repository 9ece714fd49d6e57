"""pydantic's validation errors as Problems: a JSON pointer each, and a plain message.

Used for the rollout request (tempoconf.rollout.request) and for any body the API validates with
pydantic (an operator command's, tempoconf.rollout.commands, included).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tempoconf.problems import Problem, json_pointer
from tempoconf.rollout.health_specs import CHECK_KINDS

__all__ = ["problems_from_validation_error"]


def problems_from_validation_error(error: ValidationError) -> list[Problem]:
    """Turn pydantic's errors into Problems with JSON pointers and plain messages."""
    problems = []
    for detail in error.errors(include_url=False):
        location = _strip_union_tags(list(detail["loc"]))
        kind = detail["type"]
        # unexpected_keyword_argument: the same, said by a dataclass (tempoconf.rollout.commands)
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            message = f"unknown field {location[-1]!r}" if location else "unknown field"
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
