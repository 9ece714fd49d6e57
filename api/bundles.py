"""`GET|HEAD /v1/bundles/{path}` as a raw ASGI callable, ahead of the framework, like config polls.

A bundle is the same for every client (tempoconf.bundles): one body and one ETag per config
snapshot, prepared once when the snapshot changes, so a request is a dict lookup and a header
write. Long-polls (`wait`) sleep on the config's change event only: a lease that ends changes no
byte of the bundle (clients evaluate leases by their own clock), so there is no lease timer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from starlette.datastructures import QueryParams
from starlette.types import Receive, Scope, Send

from tempoconf.api.auth import client_if_none_match
from tempoconf.api.distribution import ConfigQuery, parse_config_query
from tempoconf.api.errors import ApiError, error_body
from tempoconf.api.etag import if_none_match
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.snapshots import SnapshotsNotLoadedError
from tempoconf.bundles import BUNDLES_PREFIX, bundle_body, bundle_etag, bundle_from_snapshot
from tempoconf.resolution import ConfigSnapshot
from tempoconf.settings import Settings

__all__ = ["BUNDLE_ROUTE", "BUNDLES_PREFIX", "CACHE_CONTROL", "BundlePolls", "PreparedBundle"]

BUNDLE_ROUTE = "/v1/bundles/{path}"
CACHE_CONTROL = "public, max-age=0, must-revalidate"
"""Any cache may keep a bundle, and must revalidate it (ETag) before each use: the bundle holds
its leases, so a copy is right for as long as it is the current one (docs/contract.md)."""
QUERIES_KEPT = 65_536
"""Distinct (path, query string) pairs whose parsed query is remembered."""

logger = logging.getLogger(__name__)

_PARAMS = frozenset({"namespace", "wait"})
_JSON = (b"content-type", b"application/json")
_CACHE = (b"cache-control", CACHE_CONTROL.encode())


@dataclass(frozen=True, slots=True)
class PreparedBundle:
    """The 200 (and 304) of one config snapshot's bundle, ready to write."""

    snapshot: ConfigSnapshot
    etag: str
    etag_bytes: bytes
    body: bytes
    headers: list[tuple[bytes, bytes]]
    not_modified_headers: list[tuple[bytes, bytes]]


def prepare_bundle(snapshot: ConfigSnapshot) -> PreparedBundle:
    body = bundle_body(bundle_from_snapshot(snapshot))
    etag = bundle_etag(body)
    etag_header = (b"etag", etag.encode())
    return PreparedBundle(
        snapshot=snapshot,
        etag=etag,
        etag_bytes=etag_header[1],
        body=body,
        headers=[_JSON, (b"content-length", str(len(body)).encode()), etag_header, _CACHE],
        not_modified_headers=[etag_header, _CACHE],
    )


class BundlePolls:
    """The ASGI callable that answers `GET|HEAD /v1/bundles/{path}`."""

    def __init__(self, cache: SnapshotSource, settings: Settings, metrics: ApiMetrics) -> None:
        self._cache = cache
        self._settings = settings
        self._metrics = metrics
        self._prepared: dict[tuple[str, str], PreparedBundle] = {}
        self._queries: dict[tuple[str, bytes], ConfigQuery] = {}
        self._closing = False

    def close(self) -> None:
        """Shutting down: waiting long-polls answer now, and new ones at once (as ConfigPolls):
        a watcher that re-polls on the same keep-alive connection must not hold the shutdown up."""
        self._closing = True
        self._cache.release_waiters()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = perf_counter()
        head = scope["method"] == "HEAD"
        try:
            await self._serve(scope, receive, send, head, started)
        except ApiError as error:
            await _send_error(send, error, head)
            self._metrics.observe_request(scope["method"], BUNDLE_ROUTE, perf_counter() - started)
        except Exception:  # a bug: never let it take the connection down without an answer
            logger.exception("unexpected error answering %s", scope.get("path"))
            await _send_error(send, ApiError(500, "internal error"), head)

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, head: bool, started: float
    ) -> None:
        if_none = client_if_none_match(scope["headers"], self._settings.client_token)
        path: str = scope["path"]
        query_string: bytes = scope["query_string"]
        query = self._queries.get((path, query_string))
        if query is None:
            # The configs route's parsing: the same namespace and `wait` rules, the same 400s.
            # Only those two: an identity sent along is none of the bundle's business.
            params = QueryParams(
                [(k, v) for k, v in QueryParams(query_string).multi_items() if k in _PARAMS]
            )
            query = parse_config_query(path[len(BUNDLES_PREFIX) :], params, query_string)
            if len(self._queries) >= QUERIES_KEPT:
                self._queries.clear()
            self._queries[(path, query_string)] = query
        # The event before the snapshot (no await in between): a change after this read sets it.
        changed = self._cache.changed_for(query.namespace, query.path)
        bundle = self._prepared_bundle(query)
        header = if_none.decode("latin-1") if if_none is not None else None
        modified = if_none != bundle.etag_bytes and not if_none_match(header, bundle.etag)
        if not modified and query.wait > 0 and not self._closing:
            polled = await self._long_poll(query, bundle, header, changed, receive)
            if polled is None:
                return  # the client went away while it waited: nobody to answer
            bundle, modified = polled
        else:
            self._metrics.observe_request(scope["method"], BUNDLE_ROUTE, perf_counter() - started)
        if modified:
            await send({"type": "http.response.start", "status": 200, "headers": bundle.headers})
            await send({"type": "http.response.body", "body": b"" if head else bundle.body})
        else:
            await send(
                {
                    "type": "http.response.start",
                    "status": 304,
                    "headers": bundle.not_modified_headers,
                }
            )
            await send({"type": "http.response.body", "body": b""})

    async def _long_poll(
        self,
        query: ConfigQuery,
        bundle: PreparedBundle,
        if_none: str | None,
        changed: asyncio.Event,
        receive: Receive,
    ) -> tuple[PreparedBundle, bool] | None:
        """Wait until the bundle changes (True) or `wait` runs out (False); None when the client
        disconnected first, so its waiter does not linger."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        metrics = self._metrics
        metrics.long_polls_waiting += 1
        gone = loop.create_task(_disconnected(receive))
        try:
            waiter = loop.create_task(changed.wait())
            await asyncio.wait(
                (waiter, gone), timeout=query.wait, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            if gone.done():
                metrics.long_polls_abandoned += 1
                return None
            # Woken by a change of the snapshot (every change is one of the bundle), by a
            # shutdown (the cache releases every waiter), or at the deadline: answer now.
            bundle = self._prepared_bundle(query)
            return bundle, not if_none_match(if_none, bundle.etag)
        finally:
            gone.cancel()
            metrics.long_polls_waiting -= 1
            metrics.long_poll_waits.observe(loop.time() - began)

    def _prepared_bundle(self, query: ConfigQuery) -> PreparedBundle:
        key = (query.namespace, query.path)
        where = f"config {query.path!r} in namespace {query.namespace!r}"
        try:
            snapshot = self._cache.get(*key)
        except SnapshotsNotLoadedError as exc:
            raise ApiError(503, f"cannot serve the bundle of {where}: {exc}") from exc
        if snapshot is None:
            self._prepared.pop(key, None)
            raise ApiError(404, f"unknown {where}")
        prepared = self._prepared.get(key)
        if prepared is None or prepared.snapshot is not snapshot:
            # Unchanged configs keep their snapshot object across refreshes (SnapshotCache), so
            # this runs once per change of this config.
            prepared = self._prepared[key] = prepare_bundle(snapshot)
        return prepared


async def _disconnected(receive: Receive) -> None:
    """Returns once the client has gone away (a GET's body is empty: the next message is that)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_error(send: Send, error: ApiError, head: bool) -> None:
    body = json.dumps(error_body(error.message, error.problems), ensure_ascii=False).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-cache"),
    ]
    headers.extend((name.lower().encode(), value.encode()) for name, value in error.headers.items())
    message: dict[str, Any] = {
        "type": "http.response.start",
        "status": error.status,
        "headers": headers,
    }
    await send(message)
    await send({"type": "http.response.body", "body": b"" if head else body})
