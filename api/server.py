"""Run the API on uvicorn inside the caller's event loop, until cancelled."""

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
"""On cancellation, in-flight requests get this long to finish before they are cancelled."""

_BACKLOG = 2048
"""Connections the kernel queues before they are accepted (a fleet reconnects at once)."""

logger = logging.getLogger(__name__)


class ApiServerError(RuntimeError):
    """The API could not start (address in use, application start-up failed)."""


class _EmbeddedServer(uvicorn.Server):
    """uvicorn that leaves signals to its caller and reports start-up failures as exceptions."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

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
            app.state.config_polls.close()  # waiting long-polls answer now, not in up to 60 s
            app.state.bundle_polls.close()
            app.state.change_feed.close()
            server.should_exit = True
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
