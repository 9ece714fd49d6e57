"""Bounds on how long (and how much) a client may take to send its request.

uvicorn bounds neither: a connection that sends half a request line, headers a byte at a time, or
a body shorter than its Content-Length is held as long as the client likes, and each such request
holds an application task and its buffers. So:

- `bounded_protocol`: uvicorn's httptools protocol (api/lean_protocol.py's lighter one) with a
  deadline on the request head (from the connection's accept or the request's first byte to the
  end of its headers: 408, or a plain close for a connection that never started a request) and a
  cap on its size (431, whether the head came in one read or trickled); both answered as JSON
  (api/lean_protocol.py's `refuse`, as a malformed request's 400 is); and a backstop on the
  body (the connection is closed `BODY_BACKSTOP_SLACK` after the body deadline, for a request
  whose handler never reads its body).
- `bounded_body`: the application's `receive`, with a deadline on the body from the handler's
  first read of it: 408 as JSON, like every error of the API, and the connection closed.

A long-poll is a GET without a body: its head arrives at once and its wait is not a read, so
neither bound touches it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Message, Receive

from tempoconf.api.errors import ApiError
from tempoconf.api.lean_protocol import DirectAnswers, LeanHttpToolsProtocol

__all__ = [
    "BODY_BACKSTOP_SLACK",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "MAX_HEAD_BYTES",
    "STOPPING_HEAD_TIMEOUT",
    "bounded_body",
    "bounded_protocol",
]

DEFAULT_HEADER_TIMEOUT = 10.0
"""Seconds a client may take to send a request's head (request line and headers)."""
DEFAULT_BODY_TIMEOUT = 10.0
"""Seconds a client may take to send a request's body, once its handler reads it."""
MAX_HEAD_BYTES = 64 * 1024
"""Largest request head (request line and headers) read; larger is refused with 431."""
STOPPING_HEAD_TIMEOUT = 0.5
"""Seconds a connection accepted while the server stops has to send its request's head: it was
sent with the connect, if at all; the server waits for nothing else idle."""
BODY_BACKSTOP_SLACK = 1.0
"""The protocol closes a connection whose body is still incomplete this long after the body
deadline: after the handler's own 408 had its chance to go out."""


class _BoundedHttpToolsProtocol(LeanHttpToolsProtocol):
    __slots__ = (
        "_head_timer",
        "_body_timer",
        "_read_size",
        "_head_first",
        "_head_bytes",
        "_in_head",
        "_headers_done",
    )
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_head_bytes: int = MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._read_size = 0
        """The size of the read being parsed."""
        self._head_first = 0
        """The size of the read the current request began in (it may hold more than the head:
        the end of a request before it)."""
        self._head_bytes = 0
        """The bytes of the reads since the current request began, that one included: a bound
        on its head's size, exact only if it is larger (`_head_size`)."""
        self._in_head = False
        """A request's first bytes were parsed, its headers not all yet."""
        self._headers_done = False
        """A head completed during the current data_received."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A connection that never sends a request is closed too (silently: nothing to answer).
        timeout = self.header_timeout
        if self.stopping:
            timeout = min(timeout, STOPPING_HEAD_TIMEOUT)
        self._head_timer = self.loop.call_later(timeout, self._head_too_slow)

    def await_request_at_stop(self) -> None:
        # The request on its way has STOPPING_HEAD_TIMEOUT to arrive: then 408 (a head begun)
        # or a plain close, as for a head too slow.
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(STOPPING_HEAD_TIMEOUT, self._head_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Timers are armed only after the parser had the data: a request that arrives whole (a
        # poll: head and no body in one read) costs no timer at all.
        self._read_size = len(data)
        if self._in_head:
            self._head_bytes += len(data)
        self._headers_done = False
        super().data_received(data)  # a head over the limit that ends in this read: 431 there
        if self.transport.is_closing():
            return
        if self._in_head:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)
            # Still incomplete: the reads after the first hold nothing but the head (httptools
            # keeps a header line that has not ended: they bound the memory a request holds).
            if self._head_bytes - self._head_first > self.max_head_bytes or (
                self._head_bytes > self.max_head_bytes and self._head_size() > self.max_head_bytes
            ):
                self._cancel_timers()
                self.refuse(self._head_too_large())
        if self._headers_done and self.cycle is not None and self.cycle.more_body:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(
                    self.body_timeout + BODY_BACKSTOP_SLACK, self._body_too_slow
                )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_first = self._head_bytes = self._read_size

    def on_headers_complete(self) -> None:
        # A head that arrived in few reads: measured only when the reads were large enough.
        if self._head_bytes > self.max_head_bytes and self._head_size() > self.max_head_bytes:
            raise self._head_too_large()  # httptools stops; data_received answers it (refuse)
        self._in_head = False
        self._headers_done = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    def _head_size(self) -> int:
        """The size of the current head as parsed so far (its request line and header lines;
        not a header line that has not ended)."""
        size = len(self.url) + len(b"GET  HTTP/1.1\r\n\r\n")
        for name, value in self.headers:
            size += len(name) + len(value) + len(b": \r\n")
        return size

    def _head_too_large(self) -> ApiError:
        return ApiError(431, f"the request head is larger than {self.max_head_bytes} bytes")

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._in_head:  # answered on an idle connection only (refuse)
            message = f"the request head was not received within {self.header_timeout:g}s"
            self.refuse(ApiError(408, message))
        else:
            self.transport.close()

    def _body_too_slow(self) -> None:
        # The handler answered 408 already if it read the body; this is for one that did not.
        self._body_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def bounded_protocol(
    *,
    header_timeout: float,
    body_timeout: float,
    max_head_bytes: int = MAX_HEAD_BYTES,
    direct: DirectAnswers | None = None,
) -> type[asyncio.Protocol]:
    """uvicorn's `http` protocol class with these bounds (see the module's docstring), answering
    the GETs `direct` takes on the connection itself (api/lean_protocol.py)."""
    return type(
        "BoundedHttpToolsProtocol",
        (_BoundedHttpToolsProtocol,),
        {
            "__slots__": (),
            "header_timeout": header_timeout,
            "body_timeout": body_timeout,
            "max_head_bytes": max_head_bytes,
            "direct_routes": tuple(direct.direct_routes) if direct is not None else (),
        },
    )


def bounded_body(receive: Receive, timeout: float) -> Receive:
    """`receive` whose request body must arrive within `timeout` seconds of the first read of
    it; past that, ApiError(408) (the handler's error answer, with `Connection: close`).
    Reads after the body (waiting for a disconnect) are not bounded."""
    deadline: float | None = None
    complete = False

    async def bounded() -> Message:
        nonlocal deadline, complete
        if complete:
            return await receive()
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            raise ApiError(
                408,
                f"the request body was not received within {timeout:g}s: it came too slowly, "
                "or was shorter than its Content-Length",
                headers={"Connection": "close"},
            ) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            complete = True
        return message

    return bounded
