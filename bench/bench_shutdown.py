"""SIGTERM of `tempoconf api` holding long-polls of every kind: every one answered, and how fast
the process is gone.

The real command (one process, as an operator starts it) over an SQLite store with two configs.
The benchmark holds `--per-kind` long-polls (default 1,000) of each kind, every one waiting on
its own keep-alive connection with the current ETag: a config (answered on the connection,
api/lean_protocol.py), the same config with HEAD (the ASGI path), two configs at once
(`/v1/configs?path=..&path=..`), a bundle, and the change feed (`/v1/changes?since=..`). Once
the API's own gauges say all of them wait, it sends SIGTERM and reads every answer to its end.

Printed per kind: the answers by status, how many were 5xx, reset (or closed without an answer),
and how many lacked `Connection: close` or left the connection open; then the seconds from
SIGTERM to the last answer and to the process's exit, and the exit time of the same command
holding nothing (`exit_seconds_idle`, measured in the same run: what stopping costs by itself,
the store's last writes included), and the CPU seconds the API spent from SIGTERM to its exit
(`stop_cpu_seconds`: on a loaded machine, the wall-clock figures wait for a core, this does
not). Goal (issue 42): every long-poll answered 200 or 304 with
`Connection: close`, none 5xx or reset, and the process gone within 1 s (no request was being
served, so no grace is owed).

Its own long-polls hold two sockets each (the benchmark's and the API's), both bounded by the
open-files limit: `--per-kind` is capped to fit it. `--tiny` holds 20 of each kind; its figures
mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from _common import (
    CONFIG_PATH,
    NAMESPACE,
    PYTHON,
    bounded,
    cpu_seconds,
    database,
    emit,
    free_port,
    log,
    raise_fd_limit,
    seed_config,
    waited_children_cpu_seconds,
)

from tempoconf.canonical import version_id
from tempoconf.resolution import VersionRecord
from tempoconf.store.store import Store

SECOND_PATH = "bench/feature_flags"
KINDS = ("config", "config_head", "configs", "bundle", "changes")
DEFAULT_PER_KIND = 1000
TINY_PER_KIND = 20
EXIT_GOAL_SECONDS = 1.0
OPEN_BATCH = 200
"""Connections opened at once (the API's listen backlog is 2048)."""
FDS_SPARE = 200


@dataclass
class KindFigures:
    statuses: Counter[str] = field(default_factory=Counter)
    server_errors: int = 0
    reset: int = 0
    without_close: int = 0
    left_open: int = 0
    answered_at: list[float] = field(default_factory=list)

    def figures(self, began: float) -> dict[str, Any]:
        last = max(self.answered_at) - began if self.answered_at else None
        return {
            "last_answer_seconds": round(last, 3) if last is not None else None,
            "answered": dict(sorted(self.statuses.items())),
            "5xx": self.server_errors,
            "reset": self.reset,
            "without_connection_close": self.without_close,
            "left_open": self.left_open,
        }


class Api:
    """`tempoconf api` over `url` on a free port, started as an operator starts it."""

    def __init__(self, url: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.database_url = url
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("TEMPOCONF_", "TEMPORAL_", "OTEL_"))
        }
        self.process = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "tempoconf.cli.main", "api", "--host", "127.0.0.1",
            "--port", str(self.port), "--database-url", self.database_url,
            stdin=asyncio.subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr, env=env,
        )  # fmt: skip
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as http:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        return
                if self.process.returncode is not None:
                    raise SystemExit("`tempoconf api` exited before it was ready (its log above)")
                await asyncio.sleep(0.2)

    async def stop(self) -> float:
        """SIGTERM; seconds until the process is gone."""
        assert self.process is not None
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        await self.process.wait()
        return time.monotonic() - began

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()

    async def gauges(self) -> tuple[float, float]:
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(self.base_url + "/metrics")).text
        values = {"tempoconf_api_long_polls_waiting": 0.0, "tempoconf_api_change_feed_waiting": 0.0}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in values:
                values[name] = float(value)
        return values["tempoconf_api_long_polls_waiting"], values[
            "tempoconf_api_change_feed_waiting"
        ]


def seed(url: str) -> None:
    store = Store(url, migrate=True)
    try:
        seed_config(store)
        value = {"dark_mode": False}
        version = version_id(value)
        store.put_version(NAMESPACE, SECOND_PATH, VersionRecord(version, value, author="bench"))
        store.set_stable(
            NAMESPACE, SECOND_PATH, version, actor="bench", reason="seed", event_key="bench:flags"
        )
    finally:
        store.close()


async def requests(base_url: str, per_kind: int) -> dict[str, list[bytes]]:
    """`per_kind` long-polls of each kind, each holding the current ETag (so each waits)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        config = await http.get(f"/v1/configs/{CONFIG_PATH}", params={"client": "host-0"})
        bundle = await http.get(f"/v1/bundles/{CONFIG_PATH}")
        several = await http.get(
            "/v1/configs",
            params=[("path", CONFIG_PATH), ("path", SECOND_PATH), ("client", "host-0")],
        )
        feed = await http.get("/v1/changes")
    revision = feed.json()["revision"]

    def request(target: str, etag: str | None, method: str = "GET") -> bytes:
        head = f"{method} {target} HTTP/1.1\r\nHost: bench\r\n"
        if etag is not None:
            head += f"If-None-Match: {etag}\r\n"
        return (head + "\r\n").encode()

    one = f"/v1/configs/{CONFIG_PATH}?client=host-{{i:05d}}&wait=60"
    two = f"/v1/configs?path={CONFIG_PATH}&path={SECOND_PATH}&client=host-{{i:05d}}&wait=60"
    return {
        "config": [request(one.format(i=i), config.headers["etag"]) for i in range(per_kind)],
        "config_head": [
            request(one.format(i=i), config.headers["etag"], "HEAD") for i in range(per_kind)
        ],
        "configs": [request(two.format(i=i), several.headers["etag"]) for i in range(per_kind)],
        "bundle": [
            request(f"/v1/bundles/{CONFIG_PATH}?wait=60", bundle.headers["etag"])
            for _ in range(per_kind)
        ],
        "changes": [
            request(f"/v1/changes?since={revision}&wait=60", None) for _ in range(per_kind)
        ],
    }


Held = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def send(port: int, request: bytes) -> Held:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    return reader, writer


async def read_answer(held: Held, figures: KindFigures, *, to_head: bool) -> None:
    """The one answer on the connection, to the connection's end, into `figures` (`to_head`: to
    a HEAD, whose answer has no body whatever its Content-Length)."""
    reader, writer = held
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        if not to_head:
            await reader.readexactly(int(headers.get("content-length", "0")))
        figures.answered_at.append(time.monotonic())
        status = int(lines[0].split()[1])
        figures.statuses[str(status)] += 1
        if status >= 500:
            figures.server_errors += 1
        if headers.get("connection") != "close":
            figures.without_close += 1
        try:
            async with asyncio.timeout(10):
                if await reader.read():
                    figures.left_open += 1  # more than one answer: it was not closed
        except TimeoutError:
            figures.left_open += 1
    except (ConnectionError, asyncio.IncompleteReadError):
        figures.reset += 1
    finally:
        writer.close()


async def wait_held(api: Api, long_polls: int, feed: int) -> None:
    while True:
        waiting = await api.gauges()
        if waiting == (long_polls, feed):
            return
        await asyncio.sleep(0.1)


async def main(per_kind: int) -> None:
    limit = raise_fd_limit()
    fitting = max(1, (limit - FDS_SPARE) // len(KINDS))
    if per_kind > fitting:
        log(f"open-files limit {limit}: {fitting} long-polls of each kind, not {per_kind}")
        per_kind = fitting
    with database("sqlite") as url:
        seed(url)
        idle = Api(url)
        api = Api(url)
        try:
            async with bounded(600, "the shutdown benchmark"):
                await idle.start()
                exit_idle = await idle.stop()
                log(f"holding nothing: exited {exit_idle:.3f} s after SIGTERM")
                await api.start()
                kinds = await requests(api.base_url, per_kind)
                held: dict[str, list[Held]] = {}
                for kind, kind_requests in kinds.items():
                    connections: list[Held] = []
                    for start in range(0, len(kind_requests), OPEN_BATCH):
                        batch = kind_requests[start : start + OPEN_BATCH]
                        connections += await asyncio.gather(
                            *(send(api.port, request) for request in batch)
                        )
                    held[kind] = connections
                log(f"sent {per_kind} long-polls of each kind: waiting until the API holds them")
                await wait_held(api, 4 * per_kind, per_kind)
                log("all held: SIGTERM")
                figures = {kind: KindFigures() for kind in held}
                assert api.process is not None
                cpu_before = waited_children_cpu_seconds() + (cpu_seconds(api.process.pid) or 0.0)
                began = time.monotonic()
                stopped = asyncio.ensure_future(api.stop())
                await asyncio.gather(
                    *(
                        read_answer(connection, figures[kind], to_head=kind == "config_head")
                        for kind, connections in held.items()
                        for connection in connections
                    )
                )
                exit_seconds = await stopped
                stop_cpu = waited_children_cpu_seconds() - cpu_before
        finally:
            await idle.kill()
            await api.kill()
    answered_at = [at for f in figures.values() for at in f.answered_at]
    last_answer = max(answered_at) - began if answered_at else None
    failures = sum(
        f.server_errors + f.reset + f.without_close + f.left_open for f in figures.values()
    )
    wrong_status = sum(
        count
        for f in figures.values()
        for status, count in f.statuses.items()
        if status not in ("200", "304")
    )
    emit(
        {
            "bench": "shutdown",
            "per_kind": per_kind,
            "kinds": {kind: figures[kind].figures(began) for kind in held},
            "long_polls": per_kind * len(KINDS),
            "last_answer_seconds": round(last_answer, 3) if last_answer is not None else None,
            "exit_seconds": round(exit_seconds, 3),
            "exit_seconds_idle": round(exit_idle, 3),
            "stop_cpu_seconds": round(stop_cpu, 3),
            "goal": "every long-poll answered 200/304 with Connection: close and closed, none "
            f"5xx or reset; exit_seconds <= {EXIT_GOAL_SECONDS}",
            "goal_met": failures == 0 and wrong_status == 0 and exit_seconds <= EXIT_GOAL_SECONDS,
        }
    )


def per_kind_from_arguments() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="20 of each kind, in seconds")
    parser.add_argument("--per-kind", type=int, default=DEFAULT_PER_KIND, metavar="N")
    args = parser.parse_args()
    return TINY_PER_KIND if args.tiny else args.per_kind


if __name__ == "__main__":
    asyncio.run(main(per_kind_from_arguments()))
