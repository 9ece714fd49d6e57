"""`GET /openapi.json`."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.api.routing import route

__all__ = ["routes"]


async def openapi(request: Request) -> JSONResponse:
    from tempoconf.api.openapi import (
        openapi_document,  # it imports the routes: load it once they exist
    )

    return JSONResponse(openapi_document())


routes = [route("/openapi.json", openapi, methods=["GET"])]
