"""`GET /v1/changes?since=REV&wait=SECONDS[&namespace=NS]`: the configs changed after a revision
(api/change_feed.py), long-polled; what an edge relay follows upstream instead of one long-poll
per config. A caller sees only the namespaces its client token reads."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.api.auth import access_of, require_client, route_of
from tempoconf.api.change_feed import CHANGES_ROUTE, ChangeFeed
from tempoconf.api.distribution import parse_wait
from tempoconf.api.errors import ApiError
from tempoconf.api.routing import route
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.snapshots import SnapshotsNotLoadedError
from tempoconf.paths import namespace_problem

__all__ = ["routes"]


def _since(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        since = int(raw)
    except ValueError:
        since = -1
    if since < 0:
        raise ApiError(
            400,
            f"invalid query parameter since={raw!r}: expected a revision (an integer, 0 or more) "
            "from an earlier answer's `revision`; leave it out on a first call",
        )
    return since


async def get_changes(request: Request) -> JSONResponse:
    """The configs changed after `since`, as soon as there are any, else (after `wait`) none."""
    client = require_client(request)
    params = request.query_params
    since = _since(params.get("since"))
    wait = parse_wait(params.get("wait"))
    namespace = params.get("namespace")
    if namespace is not None:
        problem = namespace_problem(namespace)
        if problem is not None:
            raise ApiError(400, f"invalid query parameter namespace: {problem}")
        access_of(request).client_reads(client, namespace, route_of(request))
    source: SnapshotSource = request.app.state.snapshot_cache
    try:
        source.snapshots()
    except SnapshotsNotLoadedError as exc:
        raise ApiError(503, f"cannot serve the change feed: {exc}") from exc
    feed: ChangeFeed = request.app.state.change_feed
    answer = await feed.wait(
        since, (lambda ns: ns == namespace) if namespace is not None else client.reads, wait
    )
    return JSONResponse(answer.body(), headers={"Cache-Control": "no-cache"})


routes = [route(CHANGES_ROUTE, get_changes, methods=["GET"])]
