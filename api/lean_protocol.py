"""uvicorn's httptools protocol, lighter per connection, and able to call back on a disconnect.

An API process holds one connection per client, most of them long-polls that sleep for up to a
minute: what a connection costs while it waits is what 10,000 clients cost (bench_memory.py).
uvicorn's protocol keeps ~30 attributes in an instance dict too large to share its keys (1.6 KB),
three deques (its pipeline and the waiters of two asyncio.Events, ~0.7 KB each) per connection.
Here the attributes are slots, and the pipeline and the events hold plain lists (empty: 56 bytes;
the request's event is replaced only for a long-poll, so a plain poll pays nothing for it).

`watch_disconnect` replaces a task awaiting `receive()` per long-poll: the protocol calls the
callback when the connection is lost (api/polls.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import Receive
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["LeanHttpToolsProtocol", "disconnect_watch"]


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
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pipeline = _Pipeline()  # type: ignore[assignment]
        self._on_lost: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        writable = _LeanEvent()
        writable.set()
        self.flow._is_writable_event = writable

    def watch_disconnect(self, callback: Callable[[], None] | None) -> None:
        """Call `callback` once when the connection is lost (None: stop watching)."""
        self._on_lost = callback

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        callback, self._on_lost = self._on_lost, None
        if callback is not None:
            callback()


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
