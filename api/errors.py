"""Every error the API answers is JSON: `{"error": "<what is wrong and where>"}`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["ApiError", "error_response", "EXCEPTION_HANDLERS"]


class ApiError(Exception):
    """An answer for the caller: `status` and a message that says what is wrong and where."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


def error_response(status: int, message: str) -> JSONResponse:
    # no-cache: a 404 for a config mid-creation must not stick in a cache in between.
    return JSONResponse(
        {"error": message}, status_code=status, headers={"Cache-Control": "no-cache"}
    )


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no such route: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    response = error_response(exc.status_code, message)
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {ApiError: _api_error, HTTPException: _http_error}
