"""`GET|HEAD /v1/bundles/{path}` as a raw ASGI callable, ahead of the framework, like config polls,
and answered on the connection for plain GETs (api/lean_protocol.py), as config polls are.

A bundle is the same for every client (tempoconf.resolution.bundles): one body and one ETag per config
snapshot, prepared once when the snapshot changes, so a request is a dict lookup and a header
write. Long-polls (`wait`) sleep until the config's snapshot changes: a lease that ends changes no
byte of the bundle (clients evaluate leases by their own clock), so there is no lease timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter

from starlette.datastructures import QueryParams
from starlette.types import Receive, Scope, Send

from tempoconf.api.access import AccessControl
from tempoconf.api.auth import client_if_none_match, poll_head
from tempoconf.api.distribution import ConfigQuery, PreparedResponse, header_lines, json_headers
from tempoconf.api.errors import ApiError, send_error
from tempoconf.api.etag import if_none_match, revalidate
from tempoconf.api.lean_protocol import (
    Headers,
    LeanHttpToolsProtocol,
    disconnected,
    target_parts,
)
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.snapshot_polls import SnapshotPolls, failed_answer
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.waiters import DEADLINE, RECHECK
from tempoconf.resolution import ConfigSnapshot
from tempoconf.resolution.bundles import (
    BUNDLES_PREFIX,
    bundle_body,
    bundle_etag,
    bundle_from_snapshot,
)
from tempoconf.settings import Settings

__all__ = [
    "BUNDLE_ROUTE",
    "BUNDLES_PREFIX",
    "CACHE_CONTROL",
    "BundlePolls",
    "PreparedBundle",
    "prepare_bundle",
]

BUNDLE_ROUTE = "/v1/bundles/{path}"
CACHE_CONTROL = "public, max-age=0, must-revalidate"
"""Any cache may keep a bundle, and must revalidate it (ETag) before each use: the bundle holds
its leases, so a copy is right for as long as it is the current one (docs/contract.md)."""

logger = logging.getLogger(__name__)

_PARAMS = frozenset({"namespace", "wait"})
_CACHE = (b"cache-control", CACHE_CONTROL.encode())


@dataclass(frozen=True, slots=True)
class PreparedBundle(PreparedResponse):
    """The 200 (and 304) of one config snapshot's bundle, ready to write."""

    snapshot: ConfigSnapshot


def prepare_bundle(snapshot: ConfigSnapshot) -> PreparedBundle:
    body = bundle_body(bundle_from_snapshot(snapshot))
    etag = bundle_etag(body)
    headers, not_modified_headers = json_headers(body, etag, _CACHE)
    return PreparedBundle(
        snapshot=snapshot,
        etag=etag,
        etag_bytes=not_modified_headers[0][1],
        body=body,
        headers=headers,
        not_modified_headers=not_modified_headers,
        wire=header_lines(headers) + body,
        not_modified_wire=header_lines(not_modified_headers),
    )


class BundlePolls(SnapshotPolls[PreparedBundle]):
    """The ASGI callable that answers `GET|HEAD /v1/bundles/{path}`, and the protocol's
    `DirectAnswers` for its plain GETs (api/lean_protocol.py)."""

    prefix = BUNDLES_PREFIX.encode()

    def __init__(
        self,
        cache: SnapshotSource,
        settings: Settings,
        metrics: ApiMetrics,
        access: AccessControl | None = None,
    ) -> None:
        super().__init__(
            cache, settings, metrics, prepare_bundle, serving="the bundle of ", access=access
        )
        self._waiting: dict[tuple[str, str], dict[_BundleWaiter, None]] = {}
        """Long-polls answered on their connection, per config (the ASGI path's wait on the
        config's change event instead)."""

    def close(self) -> None:
        """Shutting down: waiting long-polls answer now, and new ones at once (as ConfigPolls):
        a watcher that re-polls on the same keep-alive connection must not hold the shutdown up."""
        self._closing = True
        self._cache.release_waiters()
        for waiters in list(self._waiting.values()):
            for waiter in list(waiters):
                waiter.wake(RECHECK)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = perf_counter()
        head = scope["method"] == "HEAD"
        try:
            await self._serve(scope, receive, send, head, started)
        except ApiError as error:
            await send_error(send, error, head)
            self._metrics.observe_request(scope["method"], BUNDLE_ROUTE, perf_counter() - started)
        except Exception:  # a bug: never let it take the connection down without an answer
            logger.exception("unexpected error answering %s", scope.get("path"))
            await send_error(send, ApiError(500, "internal error"), head)

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, head: bool, started: float
    ) -> None:
        if_none, client = client_if_none_match(scope["headers"], self.access, BUNDLE_ROUTE)
        query = self._query(scope["path"], scope["query_string"])
        if client.namespaces is not None:
            self.access.client_reads(client, query.namespace, BUNDLE_ROUTE)
        # The event before the snapshot (no await in between): a change after this read sets it.
        changed = self._cache.changed_for(query.namespace, query.path)
        bundle = self._prepared_for(query)
        header, modified = revalidate(if_none, bundle.etag, bundle.etag_bytes)
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
        gone = loop.create_task(disconnected(receive))
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
            bundle = self._prepared_for(query)
            return bundle, not if_none_match(if_none, bundle.etag)
        finally:
            gone.cancel()
            metrics.long_polls_waiting -= 1
            metrics.long_poll_waits.observe(loop.time() - began)

    def answer_directly(
        self, connection: LeanHttpToolsProtocol, target: bytes, headers: Headers
    ) -> bool:
        """A GET of a bundle, answered on its connection: at once, or when its long-poll ends.
        Declined (False) when the answer is an error (also a target to percent-decode, or a
        client the API does not know): `__call__` answers those, and finds the same."""
        started = perf_counter()
        if_none, authorization = poll_head(headers)
        client = self.access.known_client(authorization)
        if client is None:
            return False
        path, query_string = target_parts(target)
        if path.find(b"%") != -1:  # find: bytes' `in` raises and clears a TypeError first
            return False
        try:
            query = self._query(path.decode("ascii"), query_string)
            if client.namespaces is not None and not client.reads(query.namespace):
                return False  # refused (and counted) once, by `__call__`
            bundle = self._prepared_for(query)
        except (ApiError, UnicodeDecodeError):
            return False
        header, modified = revalidate(if_none, bundle.etag, bundle.etag_bytes)
        if not modified and query.wait > 0 and not self._closing:
            self._wait(_BundleWaiter(self, connection, query, header))
            connection.begin_wait()
            return True
        self._metrics.observe_request("GET", BUNDLE_ROUTE, perf_counter() - started)
        if modified:
            connection.answer(200, bundle.wire)
        else:
            connection.answer(304, bundle.not_modified_wire)
        return True

    def _wait(self, waiter: _BundleWaiter) -> None:
        loop = asyncio.get_running_loop()
        waiter.began = loop.time()
        waiter.tick = self._deadlines.add(waiter, waiter.began + waiter.query.wait)
        waiter.connection.watch_disconnect(waiter.disconnected)
        self._waiting.setdefault(waiter.config, {})[waiter] = None
        self._metrics.long_polls_waiting += 1

    def _woke(self, waiter: _BundleWaiter, result: object) -> None:
        """A long-poll answered on its connection woke: at its deadline (DEADLINE), on a change
        of its config or at shutdown (RECHECK), or because its client went away (`gone`)."""
        waiters = self._waiting.get(waiter.config)
        if waiters is None or waiter not in waiters:
            return  # woken twice in one loop pass (a change, then the deadline): answered once
        answer: tuple[int, bytes] | None = None
        if not waiter.gone:
            try:
                bundle = self._prepared_for(waiter.query)
            except Exception as exc:  # deleted meanwhile (404), the snapshots lost (503), a bug
                answer = failed_answer(exc, logger, "a bundle long-poll")
            else:
                if not if_none_match(waiter.if_none, bundle.etag):
                    answer = (200, bundle.wire)
                elif result is DEADLINE or self._closing:
                    answer = (304, bundle.not_modified_wire)
                else:
                    return  # a change that left this bundle as it was: wait on
        del waiters[waiter]
        if not waiters:
            del self._waiting[waiter.config]
        self._deadlines.discard(waiter, waiter.tick)
        connection = waiter.connection
        connection.watch_disconnect(None)
        metrics = self._metrics
        metrics.long_polls_waiting -= 1
        metrics.long_poll_waits.observe(asyncio.get_running_loop().time() - waiter.began)
        if answer is None:
            metrics.long_polls_abandoned += 1
        else:
            connection.answer(*answer)

    def _snapshots_changed(self, keys: Sequence[tuple[str, str]]) -> None:
        """(Snapshot source listener, right after a refresh.) Every change of a config's
        snapshot is one of its bundle: wake its waiting long-polls."""
        for key in keys:
            waiters = self._waiting.get(key)
            if waiters:
                for waiter in list(waiters):
                    waiter.wake(RECHECK)

    def _params(self, query_string: bytes) -> QueryParams:
        # The configs route's parsing: the same namespace and `wait` rules, the same 400s.
        # Only those two: an identity sent along is none of the bundle's business.
        return QueryParams(
            [(k, v) for k, v in QueryParams(query_string).multi_items() if k in _PARAMS]
        )


class _BundleWaiter:
    """A bundle long-poll answered on its connection: no future, task or coroutine; `wake`
    answers it (or lets it wait on)."""

    __slots__ = ("polls", "connection", "query", "config", "if_none", "began", "tick", "gone")

    def __init__(
        self,
        polls: BundlePolls,
        connection: LeanHttpToolsProtocol,
        query: ConfigQuery,
        if_none: str | None,
    ) -> None:
        self.polls = polls
        self.connection = connection
        self.query = query
        self.config = (query.namespace, query.path)
        self.if_none = if_none
        self.began = 0.0
        """Loop time its long-poll began: its deadline is `query.wait` later."""
        self.tick = 0
        self.gone = False

    def wake(self, result: object) -> None:
        self.polls._woke(self, result)

    def disconnected(self) -> None:
        self.gone = True
        self.wake(RECHECK)
