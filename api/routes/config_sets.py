"""`GET /v1/configs?path=a/x&path=a/y&client=...`: several configs from ONE snapshot.

Every config is resolved against the same in-memory snapshot (the SnapshotCache swaps its whole
mapping at once, from one consistent read of the store), and a changeset's steps are written in
one store transaction: so an answer never mixes a config before a publish (or revert) with
another after it. One ETag covers the whole answer; a long-poll (`wait`) returns as soon as what
this client resolves to changes for any of the configs.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from tempoconf.api.auth import access_of, require_client, route_of
from tempoconf.api.distribution import (
    ConfigQuery,
    PreparedAnswer,
    PreparedConfig,
    prepare_config,
)
from tempoconf.api.errors import ApiError
from tempoconf.api.etag import if_none_match
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.polls import ConfigPolls
from tempoconf.api.routing import route
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.snapshots import SnapshotsNotLoadedError
from tempoconf.resolution import ConfigSnapshot
from tempoconf.rollout.change_specs import MAX_CHANGES

__all__ = ["MAX_PATHS", "configs_etag", "routes"]

MAX_PATHS = MAX_CHANGES
"""At most this many `path` parameters (a changeset's configs)."""
_LEASE_SLACK = 0.002


def configs_etag(etags: list[str]) -> str:
    """`W/"set.<hash>"` over the configs' own ETags, in the order asked: it changes when any
    config's version or stage for this client does."""
    digest = hashlib.sha256("\0".join(etags).encode()).hexdigest()
    return f'W/"set.{digest[:24]}"'


def _queries(request: Request) -> list[ConfigQuery]:
    params = request.query_params
    paths = params.getlist("path")
    if not paths:
        raise ApiError(
            400, "query parameter path is required: repeat it, ?path=a/x&path=a/y (1 to 20)"
        )
    if len(paths) > MAX_PATHS:
        raise ApiError(400, f"query parameter path: {len(paths)} given, at most {MAX_PATHS}")
    if len(set(paths)) != len(paths):
        repeated = sorted({path for path in paths if paths.count(path) > 1})
        raise ApiError(400, f"query parameter path: {repeated} given more than once")
    raw = request.scope["query_string"]
    polls = request.app.state.config_polls
    return [polls.config_query(path, params, raw) for path in paths]


def _resolve(
    snapshots: Mapping[tuple[str, str], ConfigSnapshot],
    queries: list[ConfigQuery],
    now: datetime,
    prepare: Callable[[ConfigSnapshot], PreparedConfig] = prepare_config,
) -> tuple[list[PreparedConfig], list[PreparedAnswer]]:
    """Every config's answer, from the one mapping given (no await in here). `prepare`: the
    config polls' (built once per snapshot, not per request: a thousand long-polls woken at
    once, at a shutdown, each built its configs' bodies anew)."""
    prepared: list[PreparedConfig] = []
    answers: list[PreparedAnswer] = []
    for query in queries:
        snapshot = snapshots.get((query.namespace, query.path))
        where = f"config {query.path!r} in namespace {query.namespace!r}"
        if snapshot is None:
            raise ApiError(404, f"unknown {where}")
        config = prepare(snapshot)
        answer = config.answer(query, now)
        if answer is None:
            raise ApiError(
                404, f"{where} has no stable version yet, and no stage of it applies to this client"
            )
        prepared.append(config)
        answers.append(answer)
    return prepared, answers


async def get_configs(request: Request) -> Response:
    """Several configs for one client, from one snapshot, with one ETag (304 on If-None-Match)."""
    client = require_client(request)
    queries = _queries(request)
    access_of(request).client_reads(client, queries[0].namespace, route_of(request))
    cache: SnapshotSource = request.app.state.snapshot_cache
    polls: ConfigPolls = request.app.state.config_polls
    metrics: ApiMetrics = request.app.state.metrics
    if_none = request.headers.get("if-none-match")
    wait = queries[0].wait
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        try:
            snapshots = cache.snapshots()
        except SnapshotsNotLoadedError as exc:
            raise ApiError(503, f"cannot serve the configs: {exc}") from exc
        # Taken before any await, so the first change after this read sets one of them.
        events = [cache.changed_for(query.namespace, query.path) for query in queries]
        now = datetime.now(UTC)
        prepared, answers = _resolve(snapshots, queries, now, polls.prepared)
        etag = configs_etag([answer.etag for answer in answers])
        modified = not if_none_match(if_none, etag)
        # Stopping: answer what it is now (the server released every event handed out, and
        # would otherwise wait on fresh ones until its grace ran out: a 500).
        if modified or loop.time() >= deadline or polls.closing:
            break
        wake = deadline
        leases = [expiry for config in prepared if (expiry := config.next_expiry(now))]
        if leases:
            wake = min(wake, loop.time() + (min(leases) - now).total_seconds() + _LEASE_SLACK)
        waiters = [asyncio.ensure_future(event.wait()) for event in events]
        metrics.long_polls_waiting += 1
        try:
            await asyncio.wait(
                waiters, timeout=max(0.0, wake - loop.time()), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            metrics.long_polls_waiting -= 1
            for waiter in waiters:
                waiter.cancel()
    # Seen like a poll of each config: rollout plans and the gates on applied versions count it.
    for query, answer in zip(queries, answers, strict=True):
        if not query.anonymous:
            polls.note_seen(query, answer)
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if not modified:
        return Response(status_code=304, headers=headers)
    body = b'{"configs":[' + b",".join(answer.body for answer in answers) + b"]}"
    return Response(body, media_type="application/json", headers=headers)


routes = [route("/v1/configs", get_configs, methods=["GET", "HEAD"])]
