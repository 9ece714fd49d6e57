"""`GET /v1/configs/{path}`: answered by `api.polls.ConfigPolls` ahead of the router (see
`api.app`). The route here only lists it with the others: for 405s and the OpenAPI check."""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

__all__ = ["HandOver", "routes"]


class HandOver:
    """An ASGI app that hands the request to the one the app's state holds under `attribute`
    (its ConfigPolls, its BundlePolls)."""

    __slots__ = ("_attribute",)

    def __init__(self, attribute: str) -> None:
        self._attribute = attribute

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await getattr(scope["app"].state, self._attribute)(scope, receive, send)


routes = [Route("/v1/configs/{path:path}", HandOver("config_polls"), methods=["GET", "HEAD"])]
