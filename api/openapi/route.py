"""`GET /openapi.json`: the document is built on the first request, from the routes the app
serves (the document's modules import them)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.api.routing import route

__all__ = ["routes"]


async def openapi(request: Request) -> JSONResponse:
    from tempoconf.api.openapi import openapi_document

    return JSONResponse(openapi_document())


routes = [route("/openapi.json", openapi, methods=["GET"])]
