"""`LiveApi`: the distribution API (real uvicorn on 127.0.0.1) in a thread, over a real store.

The API runs in a thread with its own event loop, so blocking clients can be tested from plain
test functions; it can be stopped and started again on the same port (an outage).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import httpx

from tempoconf.api.server import serve_api
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import sample
from tests.fixtures.waiting import eventually_sync

START_TIMEOUT = 15.0


class LiveApi:
    """`serve_api` in a background thread; `stop()` / `start()` simulate an outage."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.port = 0
        self.url = ""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._held: socket.socket | None = None
        """The port, bound but not listening (`_hold_port`), through an outage: connections to it are refused,
        and no other test's server (tests run in parallel) can take it and answer instead."""

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> str:
        """Serve (on the port of the previous run, if any); returns the base URL."""
        assert self._thread is None, "already running"
        started: Future[str] = Future()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            await serve_api(
                self.settings,
                self.store,
                host="127.0.0.1",
                port=self.port,
                access_log=True,
                # Shared with the socket that holds the port through an outage (`stop`): the
                # port is never free between two runs, for another test's server to take.
                reuse_port=True,
                on_started=started.set_result,
            )

        def run() -> None:
            try:
                asyncio.run(main())
            except asyncio.CancelledError:
                pass
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise

        self._thread = threading.Thread(target=run, name="live-api", daemon=True)
        self._thread.start()
        try:
            self.url = started.result(timeout=START_TIMEOUT)
        finally:
            self.release()  # serving (or failed): the held port is the server's again
        self.port = int(self.url.rsplit(":", 1)[1])
        return self.url

    def stop(self, *, hold: bool = True) -> None:
        """Stop serving; `hold`: keep the port (refusing connections) until `start()`."""
        thread, loop, task = self._thread, self._loop, self._task
        self._thread = self._loop = self._task = None
        if thread is None:
            return
        assert loop is not None and task is not None
        # Held before the server lets its listener go, until the thread has ended: no moment
        # in which the port is free (bound, not listening: connections to it are refused).
        held = _hold_port(self.port)
        try:
            loop.call_soon_threadsafe(task.cancel)
            thread.join(timeout=15)
            assert not thread.is_alive(), "the API did not stop"
        finally:
            if hold:
                self._held = held
            else:
                held.close()

    def release(self) -> None:
        """Give back the port held through an outage (a test that ended stopped)."""
        if self._held is not None:
            self._held.close()
            self._held = None

    def wait_served(self, path: str, version: str, *, timeout: float = 10.0, **params: str) -> None:
        """Wait until the API has loaded a store write and answers `version` (client "probe")."""
        params.setdefault("client", "probe")
        eventually_sync(
            lambda: self.serves(path, version, **params),
            what=f"the API to serve {version}",
            timeout=timeout,
        )

    def wait_long_polls(self, count: int) -> None:
        """Wait until the API's own gauge says `count` long-polls are held (so one is "in")."""

        def gauge() -> bool:
            text = httpx.get(f"{self.url}/metrics", timeout=5).text
            waiting = sample(text, "tempoconf_api_long_polls_waiting")
            assert waiting == count, f"tempoconf_api_long_polls_waiting is {waiting}"
            return True

        eventually_sync(gauge, what=f"{count} long-poll(s) held by the API")

    def serves(self, path: str, version: str, **params: str) -> bool:
        """True when the API answers `version` for this query now."""
        response = httpx.get(f"{self.url}/v1/configs/{path}", params=params, timeout=5)
        return response.status_code == 200 and response.json()["version"] == version


def _hold_port(port: int) -> socket.socket:
    """A socket bound to `port` that does not listen: connections to it are refused. SO_REUSEPORT
    only, as the server's (which also has SO_REUSEADDR): the two may be bound together. Not
    SO_REUSEADDR: a socket that only binds with it lets any other that has it (every server of
    ours) bind and listen on the port too."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


@contextmanager
def running_api(store: Store, settings: Settings) -> Iterator[LiveApi]:
    """A started `LiveApi`, stopped on exit."""
    api = LiveApi(store, settings)
    api.start()
    try:
        yield api
    finally:
        api.stop(hold=False)
        api.release()
