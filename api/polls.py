"""`GET /v1/configs/{path}` as a raw ASGI callable, ahead of the framework.

Every client polls, so this path pays no framework cost per request: the query is parsed once,
the answer comes from `PreparedConfig` (body and ETag built once per snapshot), and a 304 is a
dict lookup plus a header write. Long-polls (`wait`) sleep on the config's change event and on
its next lease expiry, grouped by the answer they hold (api/waiters.py): a change wakes only the
waiters whose answer it changed, never a store query.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter, time

from starlette.datastructures import QueryParams
from starlette.types import Receive, Scope, Send

from tempoconf.api.access import AccessControl
from tempoconf.api.auth import client_if_none_match, poll_head
from tempoconf.api.distribution import (
    ConfigQuery,
    KeptPerQuery,
    PreparedAnswer,
    PreparedConfig,
    parse_config_query,
    prepare_config,
)
from tempoconf.api.errors import ApiError, send_error
from tempoconf.api.etag import if_none_match, revalidate
from tempoconf.api.lean_protocol import (
    Headers,
    LeanHttpToolsProtocol,
    disconnect_watch,
    disconnected,
    target_parts,
)
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.snapshot_polls import SnapshotPolls, config_where, failed_answer
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.waiters import DEADLINE, ConfigWaiters, Waiter
from tempoconf.resolution import ConfigSnapshot
from tempoconf.settings import Settings

__all__ = ["CONFIGS_PREFIX", "CONFIG_ROUTE", "SEEN_PENDING_MAX", "ConfigPolls", "PendingSeen"]

CONFIGS_PREFIX = "/v1/configs/"
CONFIG_ROUTE = "/v1/configs/{path}"
SEEN_PENDING_MAX = 100_000
"""Named clients' distinct queries remembered between two flushes to the store (one per client
unless it varies its query); more are dropped until the next flush, and counted."""

logger = logging.getLogger(__name__)

_EMPTY_BODY = {"type": "http.response.body", "body": b""}
"""Sent as is by every 304 (uvicorn reads ASGI messages, never changes them)."""

PendingSeen = dict[ConfigQuery, PreparedAnswer]
"""Named clients seen polling: the parsed query (config and identity) → the answer it got."""


class ConfigPolls(SnapshotPolls[PreparedConfig]):
    """The ASGI callable that answers `GET|HEAD /v1/configs/{path}`, and the protocol's
    `DirectAnswers` for its plain GETs (api/lean_protocol.py)."""

    prefix = CONFIGS_PREFIX.encode()

    def __init__(
        self,
        cache: SnapshotSource,
        settings: Settings,
        metrics: ApiMetrics,
        access: AccessControl | None = None,
    ) -> None:
        super().__init__(cache, settings, metrics, prepare_config, access=access)
        self._seen: PendingSeen = {}
        self._waiters: dict[tuple[str, str], ConfigWaiters] = {}
        self._direct: KeptPerQuery[bytes, _DirectPoll] = KeptPerQuery()
        """Direct GETs by request target: what each resolved to (`_resolve_direct`)."""
        self._generation = 0
        """Moves with every change of the snapshots: what `_direct` holds from before is stale."""
        self._seen_round = 0
        """Moves with every `take_seen`: a direct poll noted seen in this round is not again."""
        self._direct_latency = metrics.request_latency("GET", CONFIG_ROUTE)

    def take_seen(self) -> PendingSeen:
        """The clients seen polling since the last call (api/seen.py writes them to the store)."""
        seen, self._seen = self._seen, {}
        self._seen_round += 1
        return seen

    def config_query(self, path: str, params: QueryParams, query_string: bytes) -> ConfigQuery:
        """The parsed query of one config of a multi-path GET, kept like a poll's: the same object
        for the same request, so the clients seen stay one entry per client, not per request."""
        key = ("*" + path, query_string)
        query = self._queries.get(key)
        if query is None:
            query = self._queries.keep(key, parse_config_query(path, params, query_string))
        return query

    def note_seen(self, query: ConfigQuery, answer: PreparedAnswer) -> bool:
        """A named client polled (here, or for several configs at once): for rollout plans and
        the gates (api/seen.py flushes it). Keyed by the cached query object, which hashes by
        identity: a poll pays one dict assignment and builds nothing. False: not noted (too
        many clients are pending), and counted."""
        seen = self._seen
        if len(seen) < SEEN_PENDING_MAX or query in seen:
            seen[query] = answer
            return True
        self._metrics.seen_clients_dropped += 1
        return False

    def prepared(self, snapshot: ConfigSnapshot) -> PreparedConfig:
        """What `snapshot` prepares (its answers' bodies and ETags), built once per snapshot."""
        return self._prepared.of(snapshot)

    def close(self) -> None:
        """Shutting down: answer every waiting long-poll now (304 unless it changed), and let new
        ones answer at once, so they do not hold up a graceful shutdown."""
        self._closing = True
        self._cache.release_waiters()
        for waiters in self._waiters.values():
            waiters.wake_all()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # One coroutine for the answer (and one more for a long-poll's wait): each frame is
        # memory a waiting long-poll holds, and time a 304 pays. (A plain GET that our protocol
        # serves is answered by `answer_directly` instead; this answers HEAD, the GETs that
        # declines, and every request on another server.)
        started = perf_counter()
        head = scope["method"] == "HEAD"
        try:
            if_none, client = client_if_none_match(scope["headers"], self.access, CONFIG_ROUTE)
            query_string: bytes = scope["query_string"]
            query = self._query(scope["path"], query_string)
            if client.namespaces is not None:
                self.access.client_reads(client, query.namespace, CONFIG_ROUTE)
            prepared = self._prepared_for(query)
            answer = _answer(prepared.answer_for(query_string, query), query)
            header, modified = revalidate(if_none, answer.etag, answer.etag_bytes)
            if not modified and query.wait > 0 and not self._closing:
                loop = asyncio.get_running_loop()
                waiter = Waiter(
                    query,
                    query_string,
                    header,
                    answer,
                    loop.create_future(),
                    loop.time() + query.wait,
                )
                watch = disconnect_watch(receive)
                if watch is None:  # not served by our protocol (tests over ASGI)
                    gone = loop.create_task(disconnected(receive))
                    gone.add_done_callback(lambda _: waiter.disconnected())
                    waiter.unwatch = gone
                self._wait_begin(waiter, prepared, watch)
                # Awaited here, not in a helper coroutine: a frame less per waiting long-poll.
                try:
                    outcome = None
                    while outcome is None:
                        assert waiter.future is not None  # a Waiter made with one, rearmed so
                        outcome = self._wait_step(waiter, await waiter.future)
                finally:
                    self._wait_end(waiter)
                polled, modified = outcome
                if polled is None:
                    return  # the client went away while it waited: nobody to answer
                answer = polled
            else:
                self._metrics.observe_request(
                    scope["method"], CONFIG_ROUTE, perf_counter() - started
                )
            self._answered(query, answer, modified)
            if modified:
                await send(answer.start)
                await send(
                    _EMPTY_BODY if head else {"type": "http.response.body", "body": answer.body}
                )
            else:
                await send(answer.not_modified_start)
                await send(_EMPTY_BODY)
        except ApiError as error:
            self._metrics.polls[("", "", "", error.status)] += 1
            await send_error(send, error, head)
            self._metrics.observe_request(scope["method"], CONFIG_ROUTE, perf_counter() - started)
        except Exception:  # a bug: never let it take the connection down without an answer
            logger.exception("unexpected error answering %s", scope.get("path"))
            self._metrics.polls[("", "", "", 500)] += 1
            await send_error(send, ApiError(500, "internal error"), head)

    def answer_directly(
        self, connection: LeanHttpToolsProtocol, target: bytes, headers: Headers
    ) -> bool:
        """A GET of a config, answered on its connection (api/lean_protocol.py): at once, or
        when its long-poll ends. Declined (False) when the answer is not a 200 or a 304 (an
        error; also a target to percent-decode, or a client the API does not know): `__call__`
        answers those, and finds the same."""
        started = perf_counter()
        if_none, authorization = poll_head(headers)
        client = self.access.known_client(authorization)
        if client is None:
            return False
        direct = self._direct.get(target)
        try:
            if direct is None or direct.generation != self._generation or time() >= direct.until:
                direct = self._resolve_direct(target, direct)
                if direct is None:
                    return False
            query = direct.query
            if client.namespaces is not None and not client.reads(query.namespace):
                return False  # refused (and counted) once, by `__call__`
        except (ApiError, UnicodeDecodeError):
            return False
        answer = direct.answer
        header, modified = revalidate(if_none, answer.etag, answer.etag_bytes)
        if not modified and query.wait > 0 and not self._closing:
            loop = asyncio.get_running_loop()
            waiter = _ConnectionWaiter(
                query, direct.query_string, header, answer, None, loop.time() + query.wait
            )
            waiter.polls = self
            waiter.connection = connection
            waiter.woke = False
            self._wait_begin(waiter, direct.prepared, connection.watch_disconnect)
            connection.begin_wait()
            return True
        self._direct_latency.observe(perf_counter() - started)
        self._metrics.polls[answer.poll_keys[modified]] += 1
        # Its answer stays what it was noted with until the entry is resolved anew: noted again
        # then, or in the next round of the clients seen, not on every poll.
        if direct.noted != self._seen_round and not query.anonymous:
            if self.note_seen(query, answer):
                direct.noted = self._seen_round
        if modified:
            connection.answer(200, answer.wire)
        else:
            connection.answer(304, answer.not_modified_wire)
        return True

    def _resolve_direct(self, target: bytes, kept: _DirectPoll | None) -> _DirectPoll | None:
        """What a direct GET of `target` resolves to now (ApiError: declined; None too, for a
        target to percent-decode), kept for its next polls until a snapshot changes or the next
        lease ends. `kept`: what it resolved to before (its query is parsed already). The parsed
        query is kept with the answer, so a client polling directly costs one entry here, not
        one in the parsed queries as well."""
        if kept is None:
            path, query_string = target_parts(target)
            # find, not `in`: bytes' `in` tries the operand as an int first, and raises and
            # clears a TypeError on every call.
            if path.find(b"%") != -1:
                return None
            query = parse_config_query(
                path[len(self.prefix) :].decode("ascii"), self._params(query_string), query_string
            )
        else:
            query, query_string = kept.query, kept.query_string
        prepared = self._prepared_for(query)
        answer, until = prepared.answer_until(query)
        direct = _DirectPoll(
            query, query_string, prepared, _answer(answer, query), self._generation, until
        )
        return self._direct.keep(target, direct)

    def _connection_woke(self, waiter: _ConnectionWaiter, result: object) -> None:
        """A long-poll answered on its connection woke (called soon after the wake-up, never
        inside it): answer it, or let it wait on."""
        connection = waiter.connection
        try:
            outcome = self._wait_step(waiter, result)
            if outcome is None:
                return
        except Exception as exc:
            self._wait_end(waiter)
            status, wire = failed_answer(
                exc, logger, "a long-poll of %s", config_where(waiter.query)
            )
            self._metrics.polls[("", "", "", status)] += 1
            connection.answer(status, wire)
            return
        self._wait_end(waiter)
        polled, modified = outcome
        if polled is None:
            return  # the client went away while it waited: nobody to answer
        self._answered(waiter.query, polled, modified)
        if modified:
            connection.answer(200, polled.wire)
        else:
            connection.answer(304, polled.not_modified_wire)

    def _answered(self, query: ConfigQuery, answer: PreparedAnswer, modified: bool) -> None:
        self._metrics.polls[answer.poll_keys[modified]] += 1
        if not query.anonymous:
            self.note_seen(query, answer)

    def _wait_begin(
        self,
        waiter: Waiter,
        prepared: PreparedConfig,
        watch: Callable[[Callable[[], None] | None], None] | None,
    ) -> None:
        """`waiter`, made as its long-poll starts, waits for what its client resolves to to
        change, for up to `query.wait` seconds. It joins its config's group for the answer it
        holds (api/waiters.py) before the first await: a refresh after the snapshot was read
        finds it there. `watch` (the protocol's, when there is one) tells it of a disconnect."""
        waiter.tick = self._deadlines.add(waiter, waiter.deadline)
        if watch is not None:
            watch(waiter.disconnected)
            waiter.unwatch = watch
        self._metrics.long_polls_waiting += 1
        self._waiters_of(waiter.query, prepared).add(waiter)

    def _wait_step(
        self, waiter: Waiter, result: object
    ) -> tuple[PreparedAnswer | None, bool] | None:
        """`waiter` woke with `result`: its answer and whether it changed (True) or `wait` ran
        out (False); (None, False) when the client disconnected; None: wait on."""
        self._discard(waiter)
        if waiter.gone:
            self._metrics.long_polls_abandoned += 1
            return None, False
        if isinstance(result, PreparedAnswer):
            return result, True  # prepared by the wake-up: nothing to resolve here
        # The deadline, shutdown, or a change that left nothing to serve: resolve again.
        query = waiter.query
        prepared = self._prepared_for(query)
        answer = _answer(prepared.answer_for(waiter.key, query), query)
        if not if_none_match(waiter.if_none, answer.etag):
            return answer, True
        loop = asyncio.get_running_loop()
        if result is DEADLINE or loop.time() >= waiter.deadline or self._closing:
            return answer, False
        waiter.held = answer
        waiter.rearm(loop)
        self._waiters_of(query, prepared).add(waiter)
        return None

    def _wait_end(self, waiter: Waiter) -> None:
        """The long-poll is answered, failed or cancelled: nothing of it stays behind."""
        self._discard(waiter)
        self._deadlines.discard(waiter, waiter.tick)
        unwatch = waiter.unwatch
        if isinstance(unwatch, asyncio.Task):
            unwatch.cancel()
        elif unwatch is not None:
            unwatch(None)
        metrics = self._metrics
        metrics.long_polls_waiting -= 1
        waited = asyncio.get_running_loop().time() - (waiter.deadline - waiter.query.wait)
        metrics.long_poll_waits.observe(waited)

    def _discard(self, waiter: Waiter) -> None:
        query = waiter.query
        waiters = self._waiters.get((query.namespace, query.path))
        if waiters is not None:
            waiters.discard(waiter)

    def _waiters_of(self, query: ConfigQuery, prepared: PreparedConfig) -> ConfigWaiters:
        key = (query.namespace, query.path)
        waiters = self._waiters.get(key)
        if waiters is None:
            waiters = self._waiters[key] = ConfigWaiters(prepared, self._woken)
        elif waiters.prepared is not prepared:
            waiters.update(prepared)  # not seen yet (defensive: the change listener does this)
        return waiters

    def _woken(self, count: int) -> None:
        self._metrics.long_poll_wakeups += count

    def _snapshots_changed(self, keys: Sequence[tuple[str, str]]) -> None:
        """(SnapshotCache listener, right after a refresh.) Answer the waiters whose answer the
        change moved; the others sleep on. What direct GETs resolved to is resolved again."""
        if keys:
            self._generation += 1
        for key in keys:
            waiters = self._waiters.get(key)
            if waiters is None:
                continue
            if not len(waiters):
                del self._waiters[key]
                continue
            snapshot = self._cache.get(*key)
            if snapshot is None:
                self._prepared.forget(key)
                del self._waiters[key]
                waiters.wake_all()  # deleted: each poll answers its 404
                continue
            waiters.update(self._prepared.of(snapshot))


def _answer(answer: PreparedAnswer | None, query: ConfigQuery) -> PreparedAnswer:
    """The answer, or the 404 that says why there is none."""
    if answer is not None:
        return answer
    where = config_where(query)
    if query.stable_only:
        raise ApiError(404, f"{where} has no stable version yet")
    raise ApiError(
        404,
        f"{where} has no stable version yet, and no stage of its rollout applies to this client",
    )


@dataclass(slots=True, eq=False)
class _DirectPoll:
    """A direct GET's parsed query (and its query string, which a long-poll resolves with),
    and what it resolved to while `generation` was the polls' and until `until` (time()): the
    prepared config (which a long-poll waits on) and the answer. One per client: it is what a
    repeated poll costs in memory."""

    query: ConfigQuery
    query_string: bytes
    prepared: PreparedConfig
    answer: PreparedAnswer
    generation: int
    until: float
    noted: int = -1
    """The round of the clients seen (`ConfigPolls._seen_round`) this answer was noted in."""


class _ConnectionWaiter(Waiter):
    """A long-poll answered on its connection: no future (nothing awaits it); a wake-up
    schedules its answer on the loop, as a future's callback would be, so that it is never
    answered inside the loop over the waiters that woke it."""

    __slots__ = ("polls", "connection", "woke")

    polls: ConfigPolls
    connection: LeanHttpToolsProtocol
    woke: bool

    def wake(self, result: object) -> None:
        if not self.woke:  # once: a later wake-up in the same loop pass is dropped
            self.woke = True
            asyncio.get_running_loop().call_soon(self.polls._connection_woke, self, result)

    def woken(self) -> bool:
        return self.woke

    def rearm(self, loop: asyncio.AbstractEventLoop) -> None:
        self.woke = False
