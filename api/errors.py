"""Every error the API answers is JSON: `{"error": "<what is wrong and where>"}`, plus `problems`
(each with a JSON pointer) when an input was refused for several reasons."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tempoconf.api.answers import ErrorAnswer, ProblemAnswer
from tempoconf.operations.errors import (
    Conflict,
    Invalid,
    NotFound,
    OperationError,
    Refused,
    Unavailable,
    Undelivered,
)
from tempoconf.problems import Problem

__all__ = [
    "ApiError",
    "UnexpectedErrors",
    "error_body",
    "error_parts",
    "error_response",
    "operation_error",
    "send_error",
    "EXCEPTION_HANDLERS",
]

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """An answer for the caller: `status` and a message that says what is wrong and where;
    `problems` lists every reason an input was refused; `headers` go into the response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        problems: Sequence[Problem] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.message = message
        self.problems = list(problems)
        self.headers = dict(headers or {})
        super().__init__(message)


def error_body(message: str, problems: Sequence[Problem] = ()) -> dict[str, Any]:
    answer = ErrorAnswer(
        error=message,
        problems=[
            ProblemAnswer(pointer=problem.pointer, message=problem.message) for problem in problems
        ],
    )
    # `problems` only when there are some, as the API always answered
    return answer.model_dump(mode="json", exclude_defaults=True)


def error_parts(error: ApiError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The status, headers and JSON body that answer `error` on the raw answering paths (polls,
    bundles), the same as `error_response` writes."""
    body = json.dumps(error_body(error.message, error.problems), ensure_ascii=False).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-cache"),
    ]
    headers.extend((name.lower().encode(), value.encode()) for name, value in error.headers.items())
    return error.status, headers, body


async def send_error(send: Send, error: ApiError, head: bool) -> None:
    """Answer `error` through ASGI `send` (no body for a HEAD)."""
    status, headers, body = error_parts(error)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


def error_response(
    status: int,
    message: str,
    *,
    problems: Sequence[Problem] = (),
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    # no-cache: a 404 for a config mid-creation must not stick in a cache in between.
    return JSONResponse(
        error_body(message, problems),
        status_code=status,
        headers={"Cache-Control": "no-cache", **(headers or {})},
    )


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, problems=exc.problems, headers=exc.headers)


OPERATION_STATUSES: dict[type[OperationError], int] = {
    Invalid: 400,
    NotFound: 404,
    Conflict: 409,
    Refused: 409,
    Undelivered: 502,
    Unavailable: 503,
}
"""The status that answers each kind of tempoconf.operations error."""


TEMPORAL_RETRY_AFTER_SECONDS = 5
"""`Retry-After` of a 503 because Temporal did not answer: a restart or a broken link is back
within seconds, and each try waits up to 15 s for Temporal anyway."""


def operation_error(error: OperationError) -> ApiError:
    """The answer to an operation's error: its kind's status and its message (a command Temporal
    did not answer: 503, saying so, with `Retry-After`)."""
    retry_after = {"Retry-After": str(TEMPORAL_RETRY_AFTER_SECONDS)}
    if isinstance(error, Undelivered) and error.unavailable:
        return ApiError(503, error.unavailable, headers=retry_after)
    status = next(
        (code for kind, code in OPERATION_STATUSES.items() if isinstance(error, kind)), 500
    )
    return ApiError(status, error.message, headers=retry_after if status == 503 else None)


async def _operation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OperationError)
    return await _api_error(request, operation_error(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no such route: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, message, headers=exc.headers)


class UnexpectedErrors:
    """ASGI middleware: a bug (any exception no handler answers) is logged once, one line and its
    traceback at ERROR, and answered as JSON like the rest.

    Not Starlette's `Exception` handler: its ServerErrorMiddleware re-raises after answering,
    so uvicorn logged every 500 a second time ("Exception in ASGI application")."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:
                raise  # too late for an answer of ours: the server logs it and drops the connection
            logger.exception("unexpected error on %s %s", scope["method"], scope["path"])
            response = error_response(500, f"internal error: {type(exc).__name__}")
            await response(scope, receive, send)


EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    ApiError: _api_error,
    OperationError: _operation_error,
    HTTPException: _http_error,
}
"""The errors answered as the caller's (bugs: UnexpectedErrors)."""
