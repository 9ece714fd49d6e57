"""Spans of the admin requests (`/v1/admin/...`) while tracing is on (`tempoconf.tracing`): one
SERVER span each, continuing the caller's trace when it sends `traceparent`, so a rollout started
through `POST /v1/admin/rollouts` is one trace from the request to its promotion. Every other
request (polls, reports, metrics, health) passes untraced: polls do not even reach this
middleware (DistributionApp answers them ahead of the stack)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tempoconf.api.routing import template_of
from tempoconf.tracing import admin_tracer

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["ADMIN_PREFIX", "AdminTracing", "admin_tracing"]

ADMIN_PREFIX = "/v1/admin/"


def admin_tracing() -> list[Middleware]:
    """The middleware for `create_app`: none while tracing is off."""
    tracer = admin_tracer()
    return [] if tracer is None else [Middleware(AdminTracing, tracer=tracer)]


class AdminTracing:
    """A span per admin request, named `METHOD /route/{template}` once routing found it."""

    def __init__(self, app: ASGIApp, *, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(ADMIN_PREFIX):
            await self.app(scope, receive, send)
            return
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind, Status, StatusCode

        carrier = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
        }
        method = scope["method"]
        with self.tracer.start_as_current_span(
            method,
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"]},
        ) as span:

            async def traced_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
                await send(message)

            try:
                await self.app(scope, receive, traced_send)
            finally:
                # The route's template, not the path: one span name per endpoint, not per config.
                path = getattr(scope.get("route"), "path", None)
                if isinstance(path, str):
                    route = template_of(path)
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
