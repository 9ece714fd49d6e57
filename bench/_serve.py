"""Child process of the benchmarks: one uvicorn server (httptools, uvloop, one worker) serving
the tempoconf API over a store (on the protocol `tempoconf api` uses), or one of two floors that
answer every request with a fixed 304 and look nothing up:

- `lean_floor`: the API's own serving path (api/read_limits.py's bounds on api/lean_protocol.py's
  protocol, which answers on the connection) with a direct handler that writes a constant 304:
  what the API's protocol costs per poll before the API resolves anything.
- `floor`: a raw ASGI app on uvicorn's own httptools protocol (a scope, a cycle, a coroutine per
  request): the floor of an ASGI app, which the API's direct answers skip.

    python bench/_serve.py api DATABASE_URL   (BENCH_CLIENT_TOKEN, BENCH_ACCESS_FILE: its access)
    python bench/_serve.py edge UPSTREAM_URL
    python bench/_serve.py floor [PORT]
    python bench/_serve.py lean_floor [PORT]

It binds 127.0.0.1 on a free port (a floor given PORT: that port, with SO_REUSEPORT, so several
floor processes share it as `tempoconf api --workers N` does), prints that port as its first
stdout line, then serves until SIGTERM or SIGINT. Started by `_common.ApiProcess`; not meant to be run by hand.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn

# The floor answers with the same headers the API's 304 carries, so both put the same bytes
# on the wire and the difference is only what Python does per request.
FLOOR_HEADERS = [
    (b"etag", b'W/"0123456789abcdef.0123456789ab"'),
    (b"cache-control", b"no-cache"),
]
FLOOR_WIRE = b"".join(name + b": " + value + b"\r\n" for name, value in FLOOR_HEADERS) + b"\r\n"
"""The lean floor's 304 after its status line and default headers, as the API writes its own."""
FLOOR_KINDS = ("floor", "lean_floor")
LISTEN_BACKLOG = 4096
"""Large enough that 10,000 clients connecting at once are not dropped to SYN retries."""


async def floor_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least an ASGI app can do for a request: a fixed 304, nothing read, nothing parsed."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 304, "headers": FLOOR_HEADERS})
    await send({"type": "http.response.body", "body": b""})


class ConstantNotModified:
    """The lean floor's direct handler: every GET answered 304 on the connection, nothing
    parsed, nothing looked up (api/lean_protocol.py's DirectAnswers)."""

    def __init__(self) -> None:
        self.direct_routes = ((b"/", self.answer_directly),)

    def answer_directly(self, connection: Any, target: bytes, headers: Any) -> bool:
        connection.answer(304, FLOOR_WIRE)
        return True


def build_app(kind: str, database_url: str | None) -> tuple[Any, Any]:
    """The app and uvicorn's `http` protocol for it: the API and the lean floor get the protocol
    `tempoconf api` serves with (api/read_limits.py's, on api/lean_protocol.py's), the floor
    uvicorn's own."""
    if kind == "floor":
        return floor_app, "httptools"
    if kind == "lean_floor":
        from tempoconf.settings import Settings

        return floor_app, _api_protocol(Settings(), ConstantNotModified())
    if kind == "api" and database_url:
        from tempoconf.api.app import create_app
        from tempoconf.settings import Settings
        from tempoconf.store.store import Store

        # Settings() and not from_env: a token or URL in the caller's environment must not
        # change what is measured. A bench that measures access says so with BENCH_* variables.
        access_file = os.environ.get("BENCH_ACCESS_FILE")
        settings = Settings(
            database_url=database_url,
            client_token=os.environ.get("BENCH_CLIENT_TOKEN") or None,
            access_file=Path(access_file) if access_file else None,
        )
        app = create_app(Store(database_url, migrate=True), settings)
        return app, _api_protocol(settings, app)
    if kind == "edge" and database_url:
        from tempoconf.api.edge_app import create_edge_app
        from tempoconf.settings import Settings

        settings = Settings()
        # here the argument is the upstream
        app = create_edge_app(database_url, settings)
        return app, _api_protocol(settings, app)
    raise SystemExit(
        "usage: _serve.py api DATABASE_URL | _serve.py edge URL | _serve.py floor|lean_floor [PORT]"
    )


def _api_protocol(settings: Any, app: Any) -> Any:
    """The protocol `serve_app` gives `app` (config and bundle polls answered on the connection;
    for the lean floor, every GET)."""
    from tempoconf.api.read_limits import bounded_protocol

    return bounded_protocol(
        header_timeout=settings.api_header_timeout,
        body_timeout=settings.api_body_timeout,
        direct=app,
    )


class _Server(uvicorn.Server):
    """uvicorn that, once it serves, settles its heap (as `tempoconf api` and `edge` do), and on
    SIGTERM first answers the API's waiting long-polls (as `serve_api` does), so a stop neither
    waits for them nor cancels them mid-wait."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        from tempoconf.api.server import settle_heap

        settle_heap()

    def handle_exit(self, sig: int, frame: Any) -> None:
        state = getattr(self.config.app, "state", None)
        for name in ("config_polls", "bundle_polls"):
            polls = getattr(state, name, None)
            if polls is not None and self.started:
                # In a signal handler: hand the call to the loop rather than touch its events.
                asyncio.get_event_loop().call_soon_threadsafe(polls.close)
        super().handle_exit(sig, frame)


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    argument = sys.argv[2] if len(sys.argv) > 2 else None
    if kind in FLOOR_KINDS and argument is not None:
        app, http = build_app(kind, None)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", int(argument)))
        sock.listen(LISTEN_BACKLOG)
    else:
        app, http = build_app(kind, argument)
        sock = socket.create_server(("127.0.0.1", 0), backlog=LISTEN_BACKLOG)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(
        app,
        http=http,
        loop="uvloop",
        workers=1,
        lifespan="on",
        access_log=False,
        log_level="warning",
        # Long-polls would hold a graceful shutdown for up to their wait; the bench is done
        # with them by the time it stops the server.
        timeout_graceful_shutdown=1,
    )
    _Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
