"""Run the API on uvicorn inside the caller's event loop, until cancelled.

Stopping (a cancellation: SIGTERM or SIGINT of `tempoconf api` or `edge`, a worker's SIGTERM
from its supervisor) goes in this order, at once (not on uvicorn's next tick):
1. the listener closes: no new connection;
2. every answer from then on carries `Connection: close` (api/lean_protocol.py), on every
   connection, one accepted just before the listener closed included; idle connections close;
3. every waiter is answered with what it would get now (long-polls of configs, of several
   configs, of bundles; the change feed: 200 or 304, never a 5xx), and an edge stops following
   its upstream (the app's `stopping`);
4. the requests still being served get `GRACEFUL_SHUTDOWN_SECONDS` to finish; a connection still
   open after that is aborted, and its request cancelled;
5. the app's lifespan ends (the last writes of the clients seen, of the reports).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from typing import TypedDict, Unpack

import uvicorn

from tempoconf.api.app import DistributionApp, create_app
from tempoconf.api.lean_protocol import ServingState
from tempoconf.api.read_limits import bounded_protocol
from tempoconf.settings import Settings
from tempoconf.store.store import Store

__all__ = [
    "GRACEFUL_SHUTDOWN_SECONDS",
    "ApiServerError",
    "ServeOptions",
    "bind_listener",
    "serve_api",
    "serve_app",
    "settle_heap",
]

GRACEFUL_SHUTDOWN_SECONDS = 5  # uvicorn takes whole seconds
"""On cancellation, requests still being served (not the long-polls: those are answered at
once) get this long to finish before their connections are aborted."""

_STOP_CHECK = 0.01
"""While stopping, how often to look whether every connection has closed (seconds)."""
_TICK = 0.1
"""uvicorn's tick (its Date header, its request limit), as its own main loop has it."""

_BACKLOG = 2048
"""Connections the kernel queues before they are accepted (a fleet reconnects at once)."""

logger = logging.getLogger(__name__)


class ApiServerError(RuntimeError):
    """The API could not start (address in use, application start-up failed)."""


class _EmbeddedServer(uvicorn.Server):
    """uvicorn that leaves signals to its caller, reports start-up failures as exceptions, and
    stops in the order the module's docstring gives, as soon as `stop()` is called."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.server_state = ServingState()
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self.on_stopping: Callable[[], None] = lambda: None
        """Answers every waiting request (the app's `stopping`), once the listener is closed."""

    def stop(self) -> None:
        """Begin stopping now (uvicorn's `should_exit` alone waits for its next tick, and a
        connection accepted in between was never told to close)."""
        self.should_exit = True
        self._stop.set()

    async def main_loop(self) -> None:
        # uvicorn's loop (a tick every 0.1 s), woken at once by `stop()`.
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864_000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_TICK):
                    await self._stop.wait()
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state = self.server_state
        assert isinstance(state, ServingState)
        logger.info("Shutting down")
        state.stopping = True  # before anything is answered: every answer closes now
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(state.connections):
            connection.shutdown()  # idle: closed; busy: closed after its answer
        try:
            self.on_stopping()  # every waiter is answered (its answer is written soon after)
        except Exception:  # a bug there must not keep the rest from stopping
            logger.exception("releasing the waiting requests failed")
        loop = asyncio.get_running_loop()
        grace = self.config.timeout_graceful_shutdown or 0
        deadline = loop.time() + grace
        while (state.connections or state.tasks) and not self.force_exit:
            if loop.time() >= deadline:
                logger.error(
                    "%d connection(s) still open %gs after the stop began: aborting them",
                    len(state.connections),
                    grace,
                )
                break
            await asyncio.sleep(_STOP_CHECK)
        for connection in list(state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        for task in list(state.tasks):
            task.cancel(msg="the graceful shutdown's time ran out")
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The CLI runs the API next to the worker and the dev server; Ctrl-C is its to handle,
        # and it stops us by cancelling serve_api.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        except SystemExit as exc:  # uvicorn exits the process on start-up failure; we must not
            raise ApiServerError("the API failed to start; see the log above") from exc
        self.ready.set()


class ServeOptions(TypedDict, total=False):
    """`serve_app`'s options, which `serve_api` passes on."""

    host: str | None
    port: int | None
    access_log: bool
    reuse_port: bool
    on_started: Callable[[str], object] | None


async def serve_api(settings: Settings, store: Store, **options: Unpack[ServeOptions]) -> None:
    """`serve_app` of the API over `store` (`create_app`)."""
    await serve_app(create_app(store, settings), settings, **options)


async def serve_app(
    app: DistributionApp,
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    access_log: bool = False,
    reuse_port: bool = False,
    on_started: Callable[[str], object] | None = None,
) -> None:
    """Serve `app` (the API's, or an edge relay's) on `host:port` (default `settings.host`,
    127.0.0.1, and `settings.api_port`) until cancelled; cancelling shuts uvicorn down cleanly,
    then re-raises CancelledError.

    `port=0` picks a free port; `on_started(base_url)` is called once requests are accepted.
    `reuse_port` (`tempoconf api --workers N`) shares the port with the other processes that
    bind it so (SO_REUSEPORT): the kernel spreads new connections across them.
    Raises ApiServerError when the address cannot be bound or the app fails to start.
    """
    bind_host = host or settings.host
    bind_port = settings.api_port if port is None else port
    sock = bind_listener(bind_host, bind_port, reuse_port=reuse_port)
    bound_port = sock.getsockname()[1]
    display_host = f"[{bind_host}]" if ":" in bind_host else bind_host
    base_url = f"http://{display_host}:{bound_port}"

    config = uvicorn.Config(
        app,
        loop="auto",  # only used by uvicorn.run; here the caller's loop serves
        lifespan="on",
        log_config=None,  # the process (CLI, tests) configures logging, not uvicorn
        access_log=access_log,  # off by default: every client polls, the log would be all polls
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        # uvicorn's 5 s equals httpx's idle expiry: the two raced, and a client now and then sent
        # a request on a connection the server was closing (httpx.ReadError, no answer).
        timeout_keep_alive=max(1, round(settings.api_keep_alive_timeout)),
        # Slow clients cannot hold a connection, a task or buffers: the head and the body must
        # arrive within these bounds (api/read_limits.py; the body's 408 is the app's).
        # Config and bundle polls are answered on the connection, without ASGI
        # (api/lean_protocol.py).
        http=bounded_protocol(
            header_timeout=settings.api_header_timeout,
            body_timeout=settings.api_body_timeout,
            direct=app,
        ),
    )
    server = _EmbeddedServer(config)
    server.on_stopping = app.stopping
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="tempoconf-api")
    try:
        ready = asyncio.create_task(server.ready.wait())
        try:
            await asyncio.wait({serving, ready}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if server.ready.is_set():
            _reload_on_sighup(app)
            logger.info("tempoconf API listening on %s", base_url)
            if on_started is not None:
                on_started(base_url)
        # shield: a cancellation of ours must become a graceful shutdown, not a cancelled serve.
        await asyncio.shield(serving)
    finally:
        if not serving.done():
            server.stop()  # in the order of the module's docstring
            # A second cancellation while we wait here cancels `serving` too: a forced stop.
            await serving
        sock.close()


def _reload_on_sighup(app: DistributionApp) -> None:
    """SIGHUP reads the access policy file again (it is also reloaded when its mtime changes):
    where the process owns its signals (the main thread of `tempoconf api` or `edge`)."""
    access = app.state.access
    if access.source is None:
        return
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, access.reload)


def settle_heap() -> None:
    """For a server process, once it serves: what it has held since it started (its imports,
    the app, every config's snapshot) is moved out of the cyclic collector's reach. A full
    collection then scans only what came after, not every config's value: at 100,000 configs
    one took 0.6-0.7 s, with the event loop stopped. Frozen objects are still freed by reference
    counting when the snapshots change; only a reference cycle dropped later stays."""
    gc.freeze()


def bind_listener(
    host: str, port: int, *, reuse_port: bool = False, listen: bool = True
) -> socket.socket:
    """A TCP socket bound to `host:port`, listening unless `listen=False` (which only holds the
    port, e.g. for a supervisor: a bound socket that does not listen gets no connections).

    Made with proto IPPROTO_TCP, not socket.create_server's 0: asyncio's stdlib loop sets
    TCP_NODELAY only on accepted sockets whose proto says TCP, and without it uvicorn's separate
    head and body writes meet Nagle plus the client's delayed ACK (~40 ms per keep-alive
    answer). TCP_NODELAY is set on the listener as well: Linux copies it to accepted sockets,
    whatever the loop.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            if not hasattr(socket, "SO_REUSEPORT"):
                raise ApiServerError("sharing a port between processes needs SO_REUSEPORT (Linux)")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as create_server does
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        if listen:
            sock.listen(_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ApiServerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    except BaseException:
        sock.close()
        raise
    return sock
