"""`ConfigClient`: the blocking flavour. Its watcher is the asyncio watch loop in a thread of its
own, so `stop()` ends an in-flight long-poll at once instead of waiting up to its `wait`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

import httpx

from tempoconf.client._async import watch_loop
from tempoconf.client._common import ClientBase, get_options, subscriber_failed
from tempoconf.client._core import (
    ReportRequest,
    WatchState,
    check_report_answer,
    report_resend_after,
    report_unreachable,
)
from tempoconf.client._lifecycle import Watching
from tempoconf.client._model import ConfigClientError, ConfigValue
from tempoconf.client._options import ClientOptions

__all__ = ["ConfigClient"]

logger = logging.getLogger("tempoconf.client")

Callback = Callable[[ConfigValue], None]


def fetch_sync(state: WatchState, http: httpx.Client) -> ConfigValue | None:
    """One GET answered at once; returns the new value in use when it changed."""
    request = state.config_request(long_poll=False)
    started = state.monotonic()
    try:
        response = http.get(request.url, **get_options(state, request))
    except httpx.HTTPError as exc:
        raise state.on_transport_error(exc) from exc
    return state.on_response(
        request, response.status_code, response.headers, response.content, started=started
    )


class ConfigClient(ClientBase, Watching):
    """One config for one client identity (docs/how-to/clients.md).

    - `get()`: the value to use, from the API, else the last good value (`source == "cache"`,
      `age_seconds` telling how stale). While watching, it makes no request of its own.
    - `subscribe(callback)` then `start()` (or `with client:`): a background thread long-polls
      and calls `callback(value)` with the value in use, then on every version change.
    - `report(ok, failed, error=None, latency_count=None, latency_sum_ms=None)`: a health report
      for the version in use (the latency of its operations too, when given).

    Settings: `options`, a ClientOptions, and (over it) any of its fields as keyword arguments:
    `namespace`, `client_id` (default the hostname: it decides the percentile bucket),
    `channel`, `labels`, `token`, `cache_dir`, `long_poll_seconds`, `poll_interval`,
    `min_interval`, `timeout`, `backoff_base`, `backoff_cap`, `registry`, `report_applied`
    (ClientOptions says what each does).
    """

    def _open(self, options: ClientOptions) -> None:
        self._http = httpx.Client(timeout=options.timeout)
        self._callbacks: list[Callback] = []
        self._request_lock = threading.Lock()
        self._lifecycle = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._attempted = threading.Event()

    # -- reading -------------------------------------------------------------------------------
    def get(self) -> ConfigValue:
        """The value to use: from the API, else the last good value (`source == "cache"`).

        Raises ConfigRequestError (4xx), ConfigUnavailableError (unreachable) or
        ConfigResponseError only when there is no last good value to fall back on.
        """
        changed: ConfigValue | None = None
        with self._request_lock:  # one request in flight per config, whatever the threads
            watching = self.watching
            if not watching:
                changed = self._state.tick()
                try:
                    changed = fetch_sync(self._state, self._http) or changed
                except ConfigClientError:
                    pass  # recorded by the state; fallback() serves the cache or raises it
        if watching:
            if self._state.current() is None:  # just started: give the first poll its chance
                self._attempted.wait(self._state.options.timeout)
        elif changed is not None:
            self._deliver(changed)
        return self._state.fallback()

    # -- watching ------------------------------------------------------------------------------
    def subscribe(self, callback: Callback) -> Callable[[], None]:
        """Call `callback(value)` with the value in use when watching starts and on every version
        change (from the watcher's thread); returns a function that unsubscribes."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback)

    @property
    def watching(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Start the watcher thread (idempotent)."""
        # The request lock too: a get() in flight ends before the watcher polls, and any get()
        # after this sees `watching` and makes no request of its own.
        with self._lifecycle, self._request_lock:
            if self.watching:
                return
            ready = threading.Event()
            self._thread = threading.Thread(
                target=self._run,
                args=(ready,),
                name=f"tempoconf-watch:{self._state.path}",
                daemon=True,  # never keeps the process alive on its own
            )
            self._thread.start()
            ready.wait()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the watcher and wait for its thread (idempotent)."""
        with self._lifecycle:
            thread, loop, task = self._thread, self._loop, self._task
            self._thread = self._loop = self._task = None
        if thread is None:
            return
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                loop.call_soon_threadsafe(task.cancel)
        thread.join(timeout)
        if thread.is_alive():
            logger.warning("the config watcher thread did not stop within %ss", timeout)

    def close(self) -> None:
        """Stop watching, close the HTTP connections, remove this client's gauge series."""
        self.stop()
        self._http.close()
        self._state.close()

    # -- reporting -----------------------------------------------------------------------------
    def report(
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
        self._send(request)

    def report_applied(self, version: str, error: str | None = None) -> None:
        """Tell the API this client applied `version` (error None) or failed to (`error`): what
        a stage's `min_applied` gate counts. After each change the subscribers handled, the
        client does this itself unless `report_applied=False` (as `tempoconf agent`, which
        reports once its --exec command succeeded). Raises as `report` does."""
        self._send(self._state.applied_request(version, error))

    # -- internals -----------------------------------------------------------------------------
    def _send(self, request: ReportRequest) -> None:
        attempt = 0
        while True:  # a 503 with Retry-After is sent again, a few times (REPORT_ATTEMPTS)
            attempt += 1
            try:
                response = self._http.post(request.url, json=request.json, headers=request.headers)
            except httpx.HTTPError as exc:
                raise report_unreachable(request.url, exc) from exc
            delay = report_resend_after(response.status_code, response.headers, attempt)
            if delay is None:
                break
            time.sleep(delay)
        check_report_answer(request.url, response.status_code, response.content)

    def _run(self, ready: threading.Event) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            ready.set()
            async with httpx.AsyncClient(timeout=self._state.options.timeout) as http:
                await watch_loop(
                    self._state, http, self._deliver_async, attempted=self._attempted.set
                )

        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            pass  # stop()
        except Exception:  # a bug, not a failed poll (those are retried): say so, end the thread
            logger.exception("the config watcher of %s died", self._state.path)
        finally:
            ready.set()

    async def _deliver_async(self, value: ConfigValue) -> None:
        self._deliver(value)

    def _deliver(self, value: ConfigValue) -> None:
        callbacks = list(self._callbacks)
        failure: str | None = None
        for callback in callbacks:
            try:
                callback(value)
            except Exception as exc:  # one bad subscriber must not stop the watcher or the others
                error = subscriber_failed(callback, value, exc)
                failure = failure or error
        if callbacks and self._report_applied and value.source != "cache":
            try:
                self.report_applied(value.version, failure)
            except ConfigClientError as exc:  # the next change reports again; never fatal
                logger.warning("cannot report version %s applied: %s", value.version, exc)
