"""`GET /v1/configs/{path}`: the version this client resolves to, from memory."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.deps import snapshot_cache
from api.distribution import parse_config_query, serve_config
from api.etag import if_none_match

__all__ = ["routes"]

_NO_CACHE = "no-cache"


async def get_config(request: Request) -> Response:
    query = parse_config_query(request.path_params["path"], request.query_params)
    served = serve_config(snapshot_cache(request), query, datetime.now(UTC))
    headers = {"ETag": served.etag, "Cache-Control": _NO_CACHE}
    if if_none_match(request.headers.get("if-none-match"), served.etag):
        return Response(status_code=304, headers=headers)
    return JSONResponse(served.body(), headers=headers)


routes = [Route("/v1/configs/{path:path}", get_config, methods=["GET"])]
