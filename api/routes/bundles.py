"""`GET /v1/bundles/{path}`: answered by `api.bundles.BundlePolls` ahead of the router (see
`api.app`). The route here only lists it with the others: for 405s and the OpenAPI check."""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

__all__ = ["routes"]


class _ToBundlePolls:
    """An ASGI app that hands the request to the app's BundlePolls."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope["app"].state.bundle_polls(scope, receive, send)


routes = [Route("/v1/bundles/{path:path}", _ToBundlePolls(), methods=["GET", "HEAD"])]
