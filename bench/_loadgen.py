"""Child process of the benchmarks: a lean long-polling fleet (raw asyncio streams on uvloop).

    python bench/_loadgen.py '{"port": 8080, "path": "bench/config", "first": 0, "count": 1000,
                               "wait": 30, "canary_every": 100, "spread": true}'

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
        self.counters = Counters()
        self.holding = 0
        self._ready_sent = False
        self._connect = asyncio.Semaphore(CONNECT_CONCURRENCY)
        self._out = sys.stdout

    def _emit(self, line: str) -> None:
        self._out.write(line)
        self._out.flush()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for i in range(self.first, self.first + self.count):
                group.create_task(self._client(i))

    async def _client(self, i: int) -> None:
        query = f"/v1/configs/{self.path}?client=host-{i:05d}"
        if self.canary_every and i % self.canary_every == 0:
            query += "&channel=canary"
        first = f"GET {query} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
        poll = f"GET {query}&wait={self.wait:g} HTTP/1.1\r\nHost: {self.host}\r\n".encode()
        if self.spread:
            # A fleet whose clients started at different times has its long-poll deadlines
            # spread over the wait; started together, they would all expire in one wave.
            phase = random.uniform(1.0, self.wait)
            next_poll = f"GET {query}&wait={phase:.2f} HTTP/1.1\r\nHost: {self.host}\r\n".encode()
        else:
            next_poll = poll
        etag: bytes | None = None
        version: str | None = None
        counters = self.counters
        while True:
            try:
                async with self._connect:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                try:
                    while True:
                        if etag is None:
                            writer.write(first)
                        else:
                            writer.write(next_poll + b"If-None-Match: " + etag + b"\r\n\r\n")
                            next_poll = poll
                        status, headers, body = await _read_response(reader)
                        received = time.time_ns()
                        counters.requests += 1
                        counters.status[status] = counters.status.get(status, 0) + 1
                        if status == 200:
                            etag = headers.get(b"etag")
                            new = json.loads(body)["version"]
                            if new != version:
                                if version is None:
                                    self.holding += 1
                                version = new
                                self._emit(f"v {i} {new} {received}\n")
                                if self.holding == self.count and not self._ready_sent:
                                    self._ready_sent = True
                                    self._emit(f"ready {self.count}\n")
                        elif status != 304:
                            await asyncio.sleep(RETRY_DELAY)
                        if headers.get(b"connection") == b"close":
                            break
                finally:
                    writer.close()
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                counters.connection_errors += 1
                counters.last_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(RETRY_DELAY)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0][9:12])
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get(b"content-length", b"0"))
    body = await reader.readexactly(length) if length else b""
    return status, headers, body


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
    fleet._emit(f"done {json.dumps(summary)}\n")
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError, BaseExceptionGroup):
        await runner


if __name__ == "__main__":
    uvloop.run(main(json.loads(sys.argv[1])))
