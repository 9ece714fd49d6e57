"""`GET /v1/admin/clients/{path}`: the clients seen recently (polls or reports), for plans."""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.api.answers import ClientsAnswer, SeenClientAnswer
from tempoconf.api.auth import require_admin
from tempoconf.api.deps import config_name, store_of
from tempoconf.api.errors import ApiError
from tempoconf.api.routing import CONFIG_PATH, route
from tempoconf.api.seen import SEEN_CLIENT_RETENTION
from tempoconf.store.records import SeenClient

__all__ = ["DEFAULT_SINCE_SECONDS", "MAX_SINCE_SECONDS", "routes"]

DEFAULT_SINCE_SECONDS = 3600
MAX_SINCE_SECONDS = int(SEEN_CLIENT_RETENTION.total_seconds())
"""Further back than this, clients were forgotten already."""


async def recent_clients(request: Request) -> JSONResponse:
    require_admin(request)
    namespace, path = config_name(request)
    seconds = _since_seconds(request.query_params.get("since_seconds"))
    store = store_of(request)
    since = store.now() - timedelta(seconds=seconds)
    clients = await asyncio.to_thread(store.recent_clients, namespace, path, since=since)
    answer = ClientsAnswer(
        namespace=namespace,
        path=path,
        since=since.isoformat(),
        clients=[_client(seen) for seen in clients],
    )
    return JSONResponse(answer.body())


def _since_seconds(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_SINCE_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_SINCE_SECONDS:  # also refuses nan and inf
        raise ApiError(
            400,
            f"invalid query parameter since_seconds={raw!r}: expected seconds above 0 and up to "
            f"{MAX_SINCE_SECONDS}",
        )
    return seconds


def _client(seen: SeenClient) -> SeenClientAnswer:
    return SeenClientAnswer(
        client=seen.client,
        channel=seen.channel,
        labels=seen.labels,
        last_seen=seen.last_seen.isoformat(),
        last_version=seen.last_version,
    )


routes = [route(f"/v1/admin/clients/{CONFIG_PATH}", recent_clients, methods=["GET"])]
