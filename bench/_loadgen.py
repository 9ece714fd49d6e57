"""Child process of the benchmarks: a lean long-polling fleet (asyncio protocols on uvloop).

    python bench/_loadgen.py '{"port": 8080, "path": "bench/config", "first": 0, "count": 1000,
                               "wait": 30, "canary_every": 100, "spread": true}'

Optional: `"paths": [...], "path_index": [...]` (client first+k polls paths[path_index[k]]
instead of `path`), and `"source": "127.0.0.2"` (the loopback address every connection binds
before it connects: one address has about 28,000 ephemeral ports towards one server, so a fleet
of 100,000 spreads over several; 127.0.0.0/8 is all loopback on Linux).

Each client `host-NNNNN` keeps one keep-alive HTTP/1.1 connection: a first GET without
If-None-Match, then long-polls (`wait`) with the ETag it holds, like the SDK does. With `spread`
(the default) each client's first long-poll waits a random part of `wait`, so deadlines are
spread as in a fleet whose clients started at different times. Client i is on
channel `canary` when i % canary_every == 0. Lines on stdout, for the parent to read:

    v <i> <version> <unix time ns>   client i now holds this version (its first one included)
    ready <count>                    every client holds a version
    done <json>                      counters, printed on SIGTERM or SIGINT, then the process exits

A load generator, not a client library: it parses just enough HTTP for the API's own answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import resource
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import uvloop

CONNECT_CONCURRENCY = 200
"""Connections opened at once: a burst of thousands would overflow the accept backlog and turn
into SYN retries (whole seconds) that measure the kernel, not the API."""
RETRY_DELAY = 0.2


@dataclass
class Counters:
    requests: int = 0
    status: dict[int, int] = field(default_factory=dict)
    connection_errors: int = 0
    last_error: str = ""


class Fleet:
    """`count` clients from index `first`, long-polling one config."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.host: str = spec.get("host", "127.0.0.1")
        self.port: int = spec["port"]
        self.path: str = spec["path"]
        self.first: int = spec.get("first", 0)
        self.count: int = spec["count"]
        self.wait: float = spec.get("wait", 30)
        self.canary_every: int = spec.get("canary_every", 0)
        self.spread: bool = spec.get("spread", True)
        self.paths: list[str] = spec.get("paths") or [self.path]
        self.path_index: list[int] = spec.get("path_index") or [0] * self.count
        source: str | None = spec.get("source")
        self.local_addr = (source, 0) if source else None
        self.counters = Counters()
        self.holding = 0
        self._ready_sent = False
        self._connect = asyncio.Semaphore(CONNECT_CONCURRENCY)
        self._out = sys.stdout
        self._lines: list[str] = []
        self._connecting: set[asyncio.Task[None]] = set()

    def _emit(self, line: str) -> None:
        # One write and flush per loop pass, not per line: a wave of thousands of answers must
        # not cost a syscall each here (the time of each was taken when it arrived).
        if not self._lines:
            asyncio.get_running_loop().call_soon(self.flush)
        self._lines.append(line)

    def flush(self) -> None:
        lines, self._lines = self._lines, []
        self._out.write("".join(lines))
        self._out.flush()

    async def run(self) -> None:
        for i in range(self.first, self.first + self.count):
            self.connect(_Client(self, i))
        await asyncio.Future()  # until cancelled

    def connect(self, client: _Client, delay: float = 0.0) -> None:
        task = asyncio.get_running_loop().create_task(self._open(client, delay))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _open(self, client: _Client, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with self._connect:
                    await loop.create_connection(
                        lambda: client, self.host, self.port, local_addr=self.local_addr
                    )
                return
            except OSError as exc:
                self.error(exc)
                await asyncio.sleep(RETRY_DELAY)

    def error(self, exc: BaseException) -> None:
        counters = self.counters
        counters.connection_errors += 1
        counters.last_error = f"{type(exc).__name__}: {exc}"

    def answered(self, client: _Client, status: int, version: str | None, received: int) -> None:
        counters = self.counters
        counters.requests += 1
        counters.status[status] = counters.status.get(status, 0) + 1
        if version is not None and version != client.version:
            if client.version is None:
                self.holding += 1
            client.version = version
            self._emit(f"v {client.index} {version} {received}\n")
            if self.holding == self.count and not self._ready_sent:
                self._ready_sent = True
                self._emit(f"ready {self.count}\n")


class _Client(asyncio.Protocol):
    """One client: one keep-alive connection at a time, one request on it at a time. A protocol,
    not a coroutine over streams: an answer costs a callback and a parse, so the generator's
    own cost, which shares the cores with the API measured, stays small."""

    def __init__(self, fleet: Fleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        path = fleet.paths[fleet.path_index[index - fleet.first]]
        query = f"/v1/configs/{path}?client=host-{index:05d}"
        if fleet.canary_every and index % fleet.canary_every == 0:
            query += "&channel=canary"
        host = fleet.host
        self.first = f"GET {query} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        self.poll = f"GET {query}&wait={fleet.wait:g} HTTP/1.1\r\nHost: {host}\r\n".encode()
        if fleet.spread:
            # A fleet whose clients started at different times has its long-poll deadlines
            # spread over the wait; started together, they would all expire in one wave.
            phase = random.uniform(1.0, fleet.wait)
            self.next_poll = f"GET {query}&wait={phase:.2f} HTTP/1.1\r\nHost: {host}\r\n".encode()
        else:
            self.next_poll = self.poll
        self.etag: bytes | None = None
        self.version: str | None = None
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.closing = False
        """The last answer said `connection: close`: its end is expected."""
        self.retry: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        self.buffer = b""
        self.closing = False
        self.send()

    def send(self) -> None:
        self.retry = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.etag is None:
            transport.write(self.first)
        else:
            transport.write(self.next_poll + b"If-None-Match: " + self.etag + b"\r\n\r\n")
            self.next_poll = self.poll

    def data_received(self, data: bytes) -> None:
        received = time.time_ns()
        buffer = self.buffer + data
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            self.buffer = buffer
            return
        lines = buffer[:end].split(b"\r\n")
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get(b"content-length", b"0"))
        if len(buffer) < end + 4 + length:
            self.buffer = buffer
            return
        body = buffer[end + 4 : end + 4 + length]
        self.buffer = buffer[end + 4 + length :]
        status = int(lines[0][9:12])
        version = None
        if status == 200:
            self.etag = headers.get(b"etag")
            version = json.loads(body)["version"]
        self.fleet.answered(self, status, version, received)
        if headers.get(b"connection") == b"close":
            self.closing = True
            assert self.transport is not None
            self.transport.close()
        elif status == 200 or status == 304:
            self.send()
        else:
            self.retry = asyncio.get_running_loop().call_later(RETRY_DELAY, self.send)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None
        if self.closing:
            self.fleet.connect(self)
            return
        self.fleet.error(exc or ConnectionResetError("the server closed the connection"))
        self.fleet.connect(self, RETRY_DELAY)


async def main(spec: dict[str, Any]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fleet = Fleet(spec)
    runner = asyncio.create_task(fleet.run())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    counters = fleet.counters
    summary = {
        "requests": counters.requests,
        "status": {str(code): n for code, n in sorted(counters.status.items())},
        "connection_errors": counters.connection_errors,
        "last_error": counters.last_error,
    }
    fleet.flush()
    fleet._emit(f"done {json.dumps(summary)}\n")
    fleet.flush()
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await runner


if __name__ == "__main__":
    uvloop.run(main(json.loads(sys.argv[1])))
