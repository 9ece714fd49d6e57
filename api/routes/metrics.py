"""`GET /metrics`: Prometheus text exposition of this app's registry. Under an access policy, for
a scraper token only (api/access.py): the metrics name every namespace's configs and versions."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from tempoconf.api.access import AccessControl
from tempoconf.api.deps import state_of
from tempoconf.api.routing import route

__all__ = ["routes"]


async def metrics(request: Request) -> Response:
    access: AccessControl = request.app.state.access
    access.scraper(request.headers.get("authorization"), "/metrics")
    body = generate_latest(state_of(request).metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


routes = [route("/metrics", metrics, methods=["GET"])]
