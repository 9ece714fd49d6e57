"""`AsyncConfigClient`, and the watch loop both flavours run (the sync one in its own thread)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable

import httpx

from tempoconf.client._common import ClientBase, get_options, subscriber_failed
from tempoconf.client._core import (
    ReportRequest,
    WatchState,
    check_report_answer,
    report_resend_after,
    report_unreachable,
)
from tempoconf.client._lifecycle import AsyncWatching
from tempoconf.client._model import ConfigClientError, ConfigValue
from tempoconf.client._options import ClientOptions

__all__ = ["AsyncConfigClient", "fetch_async", "watch_loop"]

logger = logging.getLogger("tempoconf.client")

AsyncCallback = Callable[[ConfigValue], Awaitable[None] | None]


async def fetch_async(
    state: WatchState, http: httpx.AsyncClient, *, long_poll: bool
) -> ConfigValue | None:
    """One GET; returns the new value in use when it changed. Raises ConfigClientError."""
    request = state.config_request(long_poll=long_poll)
    started = state.monotonic()
    try:
        response = await http.get(request.url, **get_options(state, request))
    except httpx.HTTPError as exc:
        raise state.on_transport_error(exc) from exc
    return state.on_response(
        request, response.status_code, response.headers, response.content, started=started
    )


async def watch_loop(
    state: WatchState,
    http: httpx.AsyncClient,
    deliver: Callable[[ConfigValue], Awaitable[None]],
    *,
    attempted: Callable[[], None] = lambda: None,
    exclusive: asyncio.Lock | None = None,
) -> None:
    """Poll until cancelled: deliver the value in use first (if any), then every change.

    One request at a time: each poll holds `exclusive` (the lock a `get()` in flight holds).
    Failures are logged by `state` and retried after its backoff; only cancellation ends it.
    """
    exclusive = exclusive or asyncio.Lock()
    initial = state.current()
    if initial is not None:
        await deliver(initial)
    while True:
        changed = state.tick()
        if changed is not None:
            await deliver(changed)
        delay = state.delay()
        if delay > 0:
            await asyncio.sleep(delay)
            continue
        try:
            async with exclusive:
                changed = await fetch_async(state, http, long_poll=True)
        except ConfigClientError:
            changed = None  # recorded and logged by `state`; the next try waits out its backoff
        finally:
            attempted()
        if changed is not None:
            await deliver(changed)


class AsyncConfigClient(ClientBase, AsyncWatching):
    """One config for one client identity, for asyncio programs.

    `await get()` reads once; `async with client:` (or `start()` / `aclose()`) runs a watch task
    that long-polls and calls every subscriber on change. Same arguments as `ConfigClient`.
    """

    def _open(self, options: ClientOptions) -> None:
        self._http = httpx.AsyncClient(timeout=options.timeout)
        self._callbacks: list[AsyncCallback] = []
        self._task: asyncio.Task[None] | None = None
        self._request_lock = asyncio.Lock()
        self._attempted = asyncio.Event()

    # -- reading -------------------------------------------------------------------------------
    async def get(self) -> ConfigValue:
        """The value to use: from the API, else the last good value (`source == "cache"`).

        While watching, the watch task keeps it current, so this makes no request of its own.
        Raises ConfigRequestError (4xx), ConfigUnavailableError (unreachable) or
        ConfigResponseError only when there is no last good value to fall back on.
        """
        if self.watching:
            return await self._watched_value()
        async with self._request_lock:
            if self.watching:  # started while this waited for the lock
                return await self._watched_value()
            changed = self._state.tick()
            try:
                changed = await fetch_async(self._state, self._http, long_poll=False) or changed
            except ConfigClientError:
                pass  # recorded by the state; fallback() serves the cache or raises the error
        if changed is not None:
            await self._deliver(changed)
        return self._state.fallback()

    async def _watched_value(self) -> ConfigValue:
        if self._state.current() is None:  # just started: give the first poll its chance
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._attempted.wait(), self._state.options.timeout)
        return self._state.fallback()

    # -- watching ------------------------------------------------------------------------------
    def subscribe(self, callback: AsyncCallback) -> Callable[[], None]:
        """Call `callback(value)` (a function or a coroutine function) with the value in use when
        watching starts and on every version change; returns a function that unsubscribes."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback)

    @property
    def watching(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the watch task (idempotent); needs a running event loop."""
        if self.watching:
            return
        self._task = asyncio.get_running_loop().create_task(
            watch_loop(
                self._state,
                self._http,
                self._deliver,
                attempted=self._attempted.set,
                exclusive=self._request_lock,
            ),
            name=f"tempoconf-watch:{self._state.path}",
        )

    async def stop(self) -> None:
        """Stop the watch task (idempotent); an in-flight long-poll is abandoned."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def aclose(self) -> None:
        """Stop watching, close the HTTP connections, remove this client's gauge series."""
        await self.stop()
        await self._http.aclose()
        self._state.close()

    # -- reporting -----------------------------------------------------------------------------
    async def report(
        self,
        ok: int,
        failed: int,
        error: str | None = None,
        *,
        latency_count: int | None = None,
        latency_sum_ms: float | None = None,
    ) -> None:
        """POST a health report for the version in use: counts of ok and failed operations
        since the last report, with this client's id, channel and labels (so a stage's health
        check counts it for the cohort the client is in). `latency_count` and `latency_sum_ms`,
        both or neither: how many of those operations were timed, and their durations added up
        in milliseconds. A 503 with `Retry-After` (the API's store is down and too many reports
        wait for it) is sent again after it, up to REPORT_ATTEMPTS in all. Raises ValueError on a
        bad figure, ConfigRequestError / ConfigUnavailableError on failure."""
        request = self._state.report_request(
            ok, failed, error, latency_count=latency_count, latency_sum_ms=latency_sum_ms
        )
        await self._send(request)

    async def report_applied(self, version: str, error: str | None = None) -> None:
        """Tell the API this client applied `version` (error None) or failed to (`error`): what
        a stage's `min_applied` gate counts. After each change the subscribers handled, the
        client does this itself unless `report_applied=False` (as `tempoconf agent`, which
        reports once its --exec command succeeded). Raises as `report` does."""
        await self._send(self._state.applied_request(version, error))

    async def _send(self, request: ReportRequest) -> None:
        attempt = 0
        while True:  # a 503 with Retry-After is sent again, a few times (REPORT_ATTEMPTS)
            attempt += 1
            try:
                response = await self._http.post(
                    request.url, json=request.json, headers=request.headers
                )
            except httpx.HTTPError as exc:
                raise report_unreachable(request.url, exc) from exc
            delay = report_resend_after(response.status_code, response.headers, attempt)
            if delay is None:
                break
            await asyncio.sleep(delay)
        check_report_answer(request.url, response.status_code, response.content)

    async def _deliver(self, value: ConfigValue) -> None:
        callbacks = list(self._callbacks)
        failure: str | None = None
        for callback in callbacks:
            try:
                result = callback(value)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # one bad subscriber must not stop the watcher or the others
                error = subscriber_failed(callback, value, exc)
                failure = failure or error
        if callbacks and self._report_applied and value.source != "cache":
            try:
                await self.report_applied(value.version, failure)
            except ConfigClientError as exc:  # the next change reports again; never fatal
                logger.warning("cannot report version %s applied: %s", value.version, exc)
