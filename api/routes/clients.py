"""`GET /v1/admin/clients/{path}`: the clients seen recently (polls or reports), for plans;
with `version` (and `not_applied`), those on a version (that have not applied it)."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.access.roles import Role
from tempoconf.api.answers import ClientsAnswer, SeenClientAnswer
from tempoconf.api.deps import authorized_config, state_of
from tempoconf.api.errors import ApiError
from tempoconf.api.routing import CONFIG_PATH, route
from tempoconf.api.seen import SEEN_CLIENT_RETENTION
from tempoconf.gates.applied_gate import ClientApplied
from tempoconf.operations.clients import ClientsQuery, seen_clients

__all__ = ["DEFAULT_SINCE_SECONDS", "MAX_SINCE_SECONDS", "routes"]

DEFAULT_SINCE_SECONDS = 3600
MAX_SINCE_SECONDS = int(SEEN_CLIENT_RETENTION.total_seconds())
"""Further back than this, clients were forgotten already."""
_VERSION = re.compile(r"[0-9a-f]{16}")


async def recent_clients(request: Request) -> JSONResponse:
    _, namespace, path = await authorized_config(request, Role.VIEWER)
    seconds = _since_seconds(request.query_params.get("since_seconds"))
    version = _version(request.query_params.get("version"))
    not_applied = _flag(request.query_params.get("not_applied"), "not_applied")
    if not_applied and version is None:
        raise ApiError(400, "invalid query parameter not_applied: needs version=V")
    query = ClientsQuery(namespace, path, timedelta(seconds=seconds), version, not_applied)
    seen = await seen_clients(state_of(request).store, query)
    answer = ClientsAnswer(
        namespace=namespace,
        path=path,
        since=seen.since.isoformat(),
        clients=[_client(row) for row in seen.clients],
    )
    return JSONResponse(answer.body())


def _version(raw: str | None) -> str | None:
    if raw is not None and not _VERSION.fullmatch(raw):
        raise ApiError(
            400, f"invalid query parameter version={raw[:40]!r}: expected a 16-hex version id"
        )
    return raw


def _flag(raw: str | None, name: str) -> bool:
    if raw is None or raw in ("false", "0"):
        return False
    if raw in ("true", "1"):
        return True  # an empty value is refused: the OpenAPI document says boolean
    raise ApiError(400, f"invalid query parameter {name}={raw[:40]!r}: expected true or false")


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


def _client(row: ClientApplied) -> SeenClientAnswer:
    return SeenClientAnswer(
        client=row.client,
        channel=row.channel,
        labels=row.labels,
        last_seen=row.last_seen.isoformat(),
        last_version=row.last_version,
        applied_version=row.applied_version,
        applied_at=row.applied_at.isoformat() if row.applied_at else None,
        apply_error=row.apply_error,
        apply_error_version=row.apply_error_version,
    )


routes = [route(f"/v1/admin/clients/{CONFIG_PATH}", recent_clients, methods=["GET"])]
