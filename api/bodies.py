"""Request bodies: size limits (413), JSON parsing (400 with the parser's position) and
validation into pydantic models (400 listing every field that is wrong)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request

from tempoconf.api.errors import ApiError
from tempoconf.problems import Problem
from tempoconf.rollout.validation_errors import problems_from_validation_error

__all__ = [
    "ADMIN_BODY_LIMIT",
    "REPORT_BODY_LIMIT",
    "ROLLOUT_BODY_LIMIT",
    "read_json",
    "validate_body",
]

REPORT_BODY_LIMIT = 64 * 1024
ADMIN_BODY_LIMIT = 1024 * 1024
ROLLOUT_BODY_LIMIT = 4 * 1024 * 1024
"""The body of a rollout request (`POST /v1/admin/rollouts`, `/v1/admin/plans`): above the
request's own size limit, which its validation answers first with the message the CLI and a
Temporal start get (400); this one only bounds the memory a request holds (413)."""

Model = TypeVar("Model")


async def read_json(request: Request, *, limit: int, empty: Any = ...) -> Any:
    """The request's JSON body. An empty body is `empty` when given, else a 400.

    Raises ApiError: 413 past `limit` bytes (by Content-Length, or while reading a chunked body),
    400 for a malformed document.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise ApiError(400, f"invalid Content-Length header {declared!r}") from None
        if length > limit:
            raise ApiError(413, _too_large(limit, f"{length} bytes"))
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, _too_large(limit, "more"))
            chunks.append(chunk)
    except ClientDisconnect:
        # The client went away mid-body (an agent stopping): nothing was read whole, nothing is
        # done, and there is nobody to answer. A 400 keeps it out of the error log.
        raise ApiError(400, "the client disconnected before it sent the whole body") from None
    raw = b"".join(chunks)
    if not raw.strip():
        if empty is not ...:
            return empty
        raise ApiError(400, "the request body is empty: expected a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"the request body is not UTF-8 (byte {error.start})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise ApiError(
            400,
            f"malformed JSON in the request body at line {error.lineno} column {error.colno} "
            f"(char {error.pos}): {error.msg}",
        ) from None
    except ValueError as error:
        raise ApiError(400, f"invalid JSON in the request body: {error}") from None
    except RecursionError:
        raise ApiError(400, "the JSON in the request body is nested too deeply") from None


def validate_body(model: type[Model], raw: Any, *, what: str) -> Model:
    """`raw` as a `model` (a pydantic model or a dataclass), or ApiError(400) listing every
    problem with its JSON pointer."""
    if not isinstance(raw, dict):
        problem = Problem("", f"{what} is a JSON object, not {_json_type(raw)}")
        raise ApiError(400, f"invalid {what}: {problem}", problems=[problem])
    try:
        return TypeAdapter(model).validate_python(raw)
    except ValidationError as error:
        raise invalid(what, problems_from_validation_error(error, model)) from None


def invalid(what: str, problems: list[Problem]) -> ApiError:
    """ApiError(400) whose message lists every problem."""
    listed = "; ".join(str(problem) for problem in problems)
    return ApiError(
        400, f"invalid {what} ({len(problems)} problem(s)): {listed}", problems=problems
    )


def _too_large(limit: int, got: str) -> str:
    return f"the request body is too large ({got}); the limit is {limit} bytes"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "an array",
    }.get(type(value), type(value).__name__)
