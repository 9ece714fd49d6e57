"""`GET /v1/configs/{path}`: answered by `api.polls.ConfigPolls` ahead of the router (see
`api.app`). The route here only lists it with the others: for 405s and the OpenAPI check."""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

__all__ = ["routes"]


class _ToConfigPolls:
    """An ASGI app that hands the request to the app's ConfigPolls."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope["app"].state.config_polls(scope, receive, send)


routes = [Route("/v1/configs/{path:path}", _ToConfigPolls(), methods=["GET", "HEAD"])]
