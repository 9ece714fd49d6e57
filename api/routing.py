"""`route(...)`: a Starlette Route whose latency is recorded under its template."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from time import perf_counter

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["Endpoint", "route", "template_of"]

Endpoint = Callable[[Request], Awaitable[Response]]
_CONVERTOR = re.compile(r"\{(\w+):\w+\}")


def template_of(path: str) -> str:
    """`/v1/admin/schemas/{path:path}` → `/v1/admin/schemas/{path}` (as OpenAPI writes it)."""
    return _CONVERTOR.sub(r"{\1}", path)


def route(path: str, endpoint: Endpoint, *, methods: list[str], name: str | None = None) -> Route:
    template = template_of(path)

    async def timed(request: Request) -> Response:
        started = perf_counter()
        try:
            return await endpoint(request)
        finally:
            request.app.state.metrics.observe_request(
                request.method, template, perf_counter() - started
            )

    timed.__name__ = timed.__qualname__ = endpoint.__name__
    timed.__doc__ = endpoint.__doc__
    return Route(path, timed, methods=methods, name=name or endpoint.__name__)
