"""uvicorn's httptools protocol, lighter per connection, and able to call back on a disconnect.

An API process holds one connection per client, most of them long-polls that sleep for up to a
minute: what a connection costs while it waits is what 10,000 clients cost (bench_memory.py).
uvicorn's protocol keeps ~30 attributes in an instance dict too large to share its keys (1.6 KB),
three deques (its pipeline and the waiters of two asyncio.Events, ~0.7 KB each) per connection.
Here the attributes are slots, and the pipeline and the events hold plain lists (empty: 56 bytes;
the request's event is replaced only for a long-poll, so a plain poll pays nothing for it).

`watch_disconnect` replaces a task awaiting `receive()` per long-poll: the protocol calls the
callback when the connection is lost (api/polls.py).

Direct answers: a protocol class given `direct` (`bounded_protocol(direct=...)`) hands every
plain `GET` whose target starts with one of `direct.direct_routes`' prefixes to that route's
handler, with the raw target, before any ASGI work is done (the target is not even split: a
handler that knows it from an earlier poll needs nothing of it but a dict lookup, and
`target_parts` splits it as uvicorn would). The handler may answer it on the connection itself
(`answer`), at once or later (a long-poll: `begin_wait`, then `answer`). A config poll then
costs no scope, no cycle, no task and no coroutine: what a 304 costs in Python, and what a
waiting long-poll holds, are the handler's own few objects. Anything the handler declines, and
every request that is not a plain keep-alive GET without a body, goes the ASGI way unchanged.

Stopping: once the server stops (`ServingState.stopping`, set by api/server.py), every answer,
direct or ASGI, carries `Connection: close` and the connection closes after it, whenever the
connection was accepted: one the listener accepted just before it closed, and that the server's
own round of `shutdown()` missed, is told too.

Refusals: a request the protocol itself refuses, before any handler sees it (malformed: 400; a
head too large: 431; too slow: 408, api/read_limits.py), is answered by `refuse` with the API's
JSON error (api/errors.py), not uvicorn's text/plain "Invalid HTTP request received.".
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import struct
import termios
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import httptools
from starlette.types import Receive
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from tempoconf.api.errors import ApiError, error_parts

__all__ = [
    "DirectAnswer",
    "DirectAnswers",
    "Headers",
    "LeanHttpToolsProtocol",
    "ServingState",
    "disconnect_watch",
    "disconnected",
    "parser_refusal",
    "target_parts",
]

logger = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]
"""A request's header lines as httptools and ASGI give them: (lowercased name, value)."""


DirectAnswer = Callable[["LeanHttpToolsProtocol", bytes, Headers], bool]
"""Answers one plain GET on its connection, given the connection, the request's raw target and
its header lines: `connection.answer` now, or after `connection.begin_wait`; or declines it
(False: it goes to the ASGI app, which must answer it alike, errors too)."""


class DirectAnswers(Protocol):
    """What answers some GETs on the connection itself (api/app.py's DistributionApp, with
    api/polls.py's ConfigPolls and api/bundles.py's BundlePolls)."""

    @property
    def direct_routes(self) -> Sequence[tuple[bytes, DirectAnswer]]:
        """(target prefix, handler): a target that starts with a prefix is offered to its
        handler only (the first that matches)."""
        ...


class ServingState(ServerState):
    """uvicorn's state shared by a server's connections, and whether the server is stopping."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = False
        """The server stopped accepting: every answer from now on closes its connection."""


def _stopping(state: ServerState) -> bool:
    return getattr(state, "stopping", False)  # a server of uvicorn's own has no such field


class _NoEvent:
    """The request event of a directly answered request: nobody waits on it."""

    __slots__ = ()

    def set(self) -> None:
        pass


class _DirectCycle:
    """Stands in for uvicorn's RequestResponseCycle while a request is answered directly: the
    protocol's own callbacks (the end of the request, a pipelined request, a shutdown, a
    disconnect) read and set these few fields on it."""

    __slots__ = ("response_complete", "keep_alive", "disconnected", "more_body", "target")
    message_event = _NoEvent()

    def __init__(self, response_complete: bool, target: bytes = b"") -> None:
        self.response_complete = response_complete
        self.keep_alive = True
        """False once the server shuts down: the answer then closes the connection."""
        self.disconnected = False
        self.more_body = False
        self.target = target
        """The request target, kept only for the access log."""


_ANSWERED = _DirectCycle(response_complete=True)
"""The cycle of a request answered at once (shared: nothing sets a field of a complete one)."""
_CLOSE = b"connection: close\r\n"


class _LeanEvent(asyncio.Event):
    """An asyncio.Event whose waiters are a list: it has at most one (the request's handler, or
    the writer waiting to drain), and an empty deque costs ten times an empty list."""

    def __init__(self) -> None:  # asyncio.Event's, with a list
        self._waiters: list[asyncio.Future[bool]] = []  # type: ignore[assignment]
        self._value = False


class _Pipeline(list[Any]):
    """The pipelined requests waiting for the current one (rare): a list with deque's two calls."""

    def appendleft(self, item: Any) -> None:
        self.insert(0, item)


class LeanHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with its attributes in slots (its base's dict goes unused), lighter
    events and pipeline, and `watch_disconnect`."""

    # Every attribute uvicorn 0.3x's protocol sets (an attribute a later one adds still works:
    # it lands in the instance dict).
    __slots__ = (
        "config",
        "app",
        "loop",
        "logger",
        "access_logger",
        "access_log",
        "parser",
        "ws_protocol_class",
        "root_path",
        "asgi_version",
        "limit_concurrency",
        "app_state",
        "timeout_keep_alive_task",
        "timeout_keep_alive",
        "server_state",
        "connections",
        "tasks",
        "transport",
        "flow",
        "server",
        "client",
        "scheme",
        "pipeline",
        "scope",
        "headers",
        "expect_100_continue",
        "cycle",
        "url",
        "_on_lost",
        "_waiting",
    )
    direct_routes: Sequence[tuple[bytes, DirectAnswer]] = ()
    """Who answers the GETs under which prefix on the connection (a subclass sets it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pipeline = _Pipeline()  # type: ignore[assignment]
        self._on_lost: Callable[[], None] | None = None
        self._waiting: _DirectCycle | None = None
        """The cycle of the request answered directly that waits (`begin_wait`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        writable = _LeanEvent()
        writable.set()
        self.flow._is_writable_event = writable

    def data_received(self, data: bytes) -> None:
        # uvicorn's, but what the parser refuses is answered by `refuse` (uvicorn: a text 400).
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as error:
            refusal = parser_refusal(error)
            if refusal.status == 400:  # as uvicorn logged it, now saying what was wrong
                client = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
                self.logger.warning("%sInvalid HTTP request received: %s", client, refusal.message)
            self.refuse(refusal)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's text 400, should a path of its own still send one: the JSON one instead."""
        self.refuse(ApiError(400, "malformed request"))

    def refuse(self, error: ApiError) -> None:
        """Answer `error` as every error of the API is answered (api/errors.py's `error_parts`:
        its JSON body, content type and headers), with `Connection: close`, then close the
        connection. Only an idle connection gets the answer: one with a response under way (a
        pipelined request behind a long-poll) is closed without it, as interleaving two
        answers would garble both."""
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            status, headers, body = error_parts(error)
            content = [STATUS_LINE[status]]
            for name, value in (*self.server_state.default_headers, *headers):
                content.extend((name, b": ", value, b"\r\n"))
            content.extend((_CLOSE, b"\r\n", body))
            self.transport.write(b"".join(content))
        self.transport.close()

    def shutdown(self) -> None:
        """The server stops (uvicorn calls this once, on the connections it holds then): a
        request being answered closes the connection after its answer; an idle connection
        closes now, unless a request is on its way (its first one, or bytes already received
        by the kernel): that one is answered, with `Connection: close`, not dropped."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False
        elif cycle is None or _unread_bytes(self.transport):
            self.await_request_at_stop()
        else:
            self.transport.close()

    def await_request_at_stop(self) -> None:
        """An idle connection may still send its request while the server stops: a subclass
        bounds how long it waits for it (api/read_limits.py)."""

    @property
    def stopping(self) -> bool:
        """The server is stopping: this connection closes after its answer."""
        return _stopping(self.server_state)

    def watch_disconnect(self, callback: Callable[[], None] | None) -> None:
        """Call `callback` once when the connection is lost (None: stop watching)."""
        self._on_lost = callback

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        callback, self._on_lost = self._on_lost, None
        if callback is not None:
            callback()

    def on_headers_complete(self) -> None:
        target = self.url
        for prefix, answer_directly in self.direct_routes:
            if target.startswith(prefix):
                if self._plain_get() and answer_directly(self, target, self.headers):
                    # Nothing of the request is kept while it waits or after it was answered.
                    self.scope = self.headers = None  # type: ignore[assignment]
                    return
                if self.transport.is_closing():
                    return
                break
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and _stopping(self.server_state):
            # uvicorn tells only the connections it knew when it began to stop: a request that
            # starts later (on a connection accepted meanwhile) is answered with close too.
            cycle.keep_alive = False

    def _plain_get(self) -> bool:
        """A GET that may be answered directly: HTTP/1.1, keep-alive, no body, no upgrade, and
        not behind a request still being answered."""
        parser = self.parser
        cycle = self.cycle
        if (
            parser.get_method() != b"GET"
            or parser.get_http_version() != "1.1"
            or not parser.should_keep_alive()
            or parser.should_upgrade()
            or self.expect_100_continue
            or not (cycle is None or cycle.response_complete)
            or self.pipeline
            or self.limit_concurrency is not None
        ):
            return False
        for name, _ in self.headers:
            if name == b"content-length" or name == b"transfer-encoding":
                return False
        return True

    def begin_wait(self) -> None:
        """The request being answered directly will be answered later: until then the
        connection is busy (a pipelined request queues, a shutdown waits for the answer)."""
        target = self.url if self.access_log else b""
        self._waiting = _DirectCycle(response_complete=False, target=target)
        self.cycle = self._waiting  # type: ignore[assignment]

    def answer(self, status: int, head_and_body: bytes) -> None:
        """Write a whole response to the request answered directly: the status line and the
        server's default headers (`date`, `server`), then `head_and_body` (the other header
        lines, the blank line, the body), as uvicorn would write them; then serve the next
        request on the connection, or close it after a shutdown."""
        own, self._waiting = self._waiting, None
        keep_alive = (own is None or own.keep_alive) and not _stopping(self.server_state)
        if self.transport.is_closing() or (own is not None and own.disconnected):
            return
        if self.access_log:  # as uvicorn logs it: when the logger has a handler, before the answer
            target = own.target if own is not None else self.url
            self.access_logger.info(
                '%s - "GET %s HTTP/1.1" %d',
                f"{self.client[0]}:{self.client[1]}" if self.client else "",
                target.decode("ascii"),
                status,
            )
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend((name, b": ", value, b"\r\n"))
        if not keep_alive:
            content.append(_CLOSE)
        content.append(head_and_body)
        self.transport.write(b"".join(content))
        if own is not None:
            own.response_complete = True
        # A request pipelined behind a waiting one is the current cycle now: it stays so.
        current: object = self.cycle
        if current is own or current is None or self.cycle.response_complete:
            self.cycle = _ANSWERED  # type: ignore[assignment]
        if not keep_alive:
            self.transport.close()
        self.on_response_complete()


def _unread_bytes(transport: asyncio.BaseTransport) -> int:
    """Bytes the kernel received on the connection that the loop has not read yet."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        unread = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):  # closed meanwhile
        return 0
    return int(struct.unpack("i", unread)[0])


def target_parts(target: bytes) -> tuple[bytes, bytes]:
    """A request target's path and query string (b"" without one), split as uvicorn splits it."""
    url = httptools.parse_url(target)
    return url.path, url.query or b""


def parser_refusal(error: httptools.HttpParserError) -> ApiError:
    """The answer to a request httptools could not parse: a callback's own refusal (an ApiError
    raised in one, e.g. the 431 of api/read_limits.py), or 400 naming what was wrong in llhttp's
    words (fixed texts: the request's bytes are never echoed). A bug in a callback is a 500,
    logged with its traceback (uvicorn answered it as a malformed request)."""
    cause = error.__context__
    if isinstance(cause, ApiError):
        return cause
    if isinstance(cause, UnicodeDecodeError):  # uvicorn decodes the path as ASCII
        return ApiError(400, "malformed request target: the path is not ASCII (percent-encode it)")
    if cause is not None:
        logger.error("unexpected error while parsing a request", exc_info=cause)
        return ApiError(500, f"internal error: {type(cause).__name__}")
    reason = str(error).encode("ascii", "backslashreplace").decode()[:200] or "unparsable"
    reason = reason[:1].lower() + reason[1:]
    if isinstance(error, httptools.HttpParserInvalidURLError):
        return ApiError(
            400,
            f"malformed request target ({reason}): a byte that is not printable ASCII, a space "
            "included, must be percent-encoded",
        )
    if isinstance(error, httptools.HttpParserInvalidMethodError):
        return ApiError(400, f"malformed request line ({reason})")
    return ApiError(400, f"malformed request ({reason})")


def disconnect_watch(receive: Receive) -> Callable[[Callable[[], None] | None], None] | None:
    """`watch_disconnect` of the connection `receive` reads from, when it is served by a
    LeanHttpToolsProtocol (None otherwise: then the caller awaits `receive()` for it)."""
    cycle = getattr(receive, "__self__", None)
    transport = getattr(cycle, "transport", None)
    get_protocol = getattr(transport, "get_protocol", None)
    protocol = get_protocol() if get_protocol is not None else None
    if not isinstance(protocol, LeanHttpToolsProtocol):
        return None
    # The request's event (nobody waits on it: a GET's body was read, and the disconnect is the
    # callback's) is held for the whole wait: a lighter one, made only for long-polls.
    event = cycle.message_event  # type: ignore[union-attr]
    if not event._waiters:
        lean = _LeanEvent()
        lean._value = event.is_set()
        cycle.message_event = lean  # type: ignore[union-attr]
    return protocol.watch_disconnect


async def disconnected(receive: Receive) -> None:
    """Returns once the client has gone away (a GET's body is empty: the next message is that)."""
    while (await receive())["type"] != "http.disconnect":
        pass
