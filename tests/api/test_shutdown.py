"""A stopping server answers everyone: SIGTERM of a real `tempoconf api` (one process, and
`--workers 2` through its supervisor) or `tempoconf edge` holding long-polls of every kind
answers each of them at once with what it would get now (200 or 304), with `Connection: close`,
never a 5xx or a reset, and the process exits without using its grace (docs/contract.md,
"Shutdown")."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tempoconf.store.store import Store
from tests.api.helpers import make_stable, sample
from tests.fixtures.edge import TEMPOCONF, running_edge
from tests.fixtures.services import free_port, serving_process
from tests.fixtures.waiting import eventually

PATHS = ("shop/checkout", "shop/search")
PER_KIND = 12
"""Long-polls held of each kind."""
ABORTED = "aborting them"
"""What api/server.py logs when its grace ran out with connections still open."""


@dataclass
class Answer:
    status: int | None
    """None: the connection was reset, or closed without an answer."""
    headers: dict[str, str]
    closed: bool
    """The server closed the connection after the answer."""


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def _env(sqlite_url: str, data_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPOCONF_", "TEMPORAL_", "OTEL_"))
    }
    env["TEMPOCONF_DATA_DIR"] = str(data_dir)
    env["TEMPOCONF_DATABASE_URL"] = sqlite_url
    env["PYTHONUNBUFFERED"] = "1"
    return env


@asynccontextmanager
async def running_api(
    sqlite_url: str, tmp_path: Path, *extra: str, name: str = "api"
) -> AsyncIterator[Server]:
    """`tempoconf api` (a real process) over the test's SQLite store, on a free port."""
    port = free_port()
    log = tmp_path / f"{name}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(TEMPOCONF), "api", "--port", str(port), *extra],
            env=_env(sqlite_url, tmp_path / name),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    async with serving_process(process, url, what=name, log=log):
        yield Server(url, process, log)


@pytest.fixture
def configs(sqlite_store: Store) -> Store:
    for path in PATHS:
        make_stable(sqlite_store, path, {"path": path, "limit": 10})
    return sqlite_store


async def _requests(url: str) -> dict[str, list[bytes]]:
    """Long-polls of every kind, each waiting (its If-None-Match is the current ETag)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        config = await http.get(f"/v1/configs/{PATHS[0]}", params={"client": "h"})
        bundle = await http.get(f"/v1/bundles/{PATHS[0]}")
        several = await http.get(
            "/v1/configs", params=[("path", PATHS[0]), ("path", PATHS[1]), ("client", "h")]
        )
        feed = await http.get("/v1/changes")
    for answer in (config, bundle, several, feed):
        assert answer.status_code == 200, answer.text
    revision = feed.json()["revision"]

    def get(target: str, etag: str | None, method: str = "GET") -> bytes:
        head = f"{method} {target} HTTP/1.1\r\nHost: t\r\n"
        if etag is not None:
            head += f"If-None-Match: {etag}\r\n"
        return (head + "\r\n").encode()

    config_target = f"/v1/configs/{PATHS[0]}?client=h{{i}}&wait=60"
    return {
        # Answered on the connection (api/lean_protocol.py's direct answers).
        "config": [get(config_target.format(i=i), config.headers["etag"]) for i in range(PER_KIND)],
        # The same long-poll through ASGI (a HEAD is not answered directly).
        "config (ASGI)": [
            get(config_target.format(i=i), config.headers["etag"], "HEAD") for i in range(PER_KIND)
        ],
        "configs": [
            get(
                f"/v1/configs?path={PATHS[0]}&path={PATHS[1]}&client=h{i}&wait=60",
                several.headers["etag"],
            )
            for i in range(PER_KIND)
        ],
        "bundle": [
            get(f"/v1/bundles/{PATHS[0]}?wait=60", bundle.headers["etag"]) for _ in range(PER_KIND)
        ],
        "changes": [get(f"/v1/changes?since={revision}&wait=60", None) for _ in range(PER_KIND)],
    }


async def _send(url: str, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """`request` sent on a new connection, once the server has answered a first request on it
    (so it was accepted: a connection still in the listener's queue when it closes is reset by
    the kernel, whatever the server does)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    writer.write(request)
    await writer.drain()
    return reader, writer


async def _answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, to_head: bool = False
) -> Answer:
    """The one answer on the connection, and whether the server closed it after (`to_head`: to a
    HEAD, whose answer has no body whatever its Content-Length)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        if not to_head:
            await reader.readexactly(int(headers.get("content-length", "0")))
        rest = await reader.read()  # until the server closes it
        return Answer(int(lines[0].split()[1]), headers, closed=rest == b"")
    except (ConnectionError, asyncio.IncompleteReadError):
        return Answer(None, {}, closed=True)
    finally:
        writer.close()


async def _held(url: str, held: int) -> None:
    """Until the server says `held` long-polls and the change feed's are waiting."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:

        async def waiting() -> bool:
            text = (await http.get("/metrics")).text
            polls = sample(text, "tempoconf_api_long_polls_waiting")
            feed = sample(text, "tempoconf_api_change_feed_waiting")
            assert (polls, feed) == (held, PER_KIND), f"waiting: {polls} long-polls, {feed} feed"
            return True

        await eventually(waiting, what=f"{held} long-polls and {PER_KIND} feed long-polls held")


async def _stop_holding_every_kind(server: Server, *, polls_per_process: int) -> None:
    requests = await _requests(server.url)
    connections = {
        kind: [await _send(server.url, request) for request in kind_requests]
        for kind, kind_requests in requests.items()
    }
    await _held(server.url, polls_per_process)
    server.process.send_signal(signal.SIGTERM)
    answers = {
        kind: await asyncio.gather(
            *(_answer(*connection, to_head=kind == "config (ASGI)") for connection in held)
        )
        for kind, held in connections.items()
    }
    code = await asyncio.to_thread(server.process.wait, 60)
    log = server.log.read_text(errors="replace")
    assert code == 0, f"the server exited {code}:\n{log}"
    for kind, kind_answers in answers.items():
        statuses = Counter(answer.status for answer in kind_answers)
        assert set(statuses) <= {200, 304}, f"{kind}: answered {dict(statuses)}\n{log}"
        assert all(answer.headers.get("connection") == "close" for answer in kind_answers), (
            f"{kind}: an answer without Connection: close: {kind_answers}"
        )
        assert all(answer.closed for answer in kind_answers), f"{kind}: a connection left open"
    # Every waiter was answered at once: nothing was left for the grace to end.
    assert ABORTED not in log, log


async def test_sigterm_answers_every_long_poll_of_every_kind_with_close(
    configs: Store, sqlite_url: str, tmp_path: Path
) -> None:
    async with running_api(sqlite_url, tmp_path) as server:
        # Counted by tempoconf_api_long_polls_waiting: all but the change feed's.
        await _stop_holding_every_kind(server, polls_per_process=4 * PER_KIND)


async def test_sigterm_of_the_supervisor_answers_every_workers_long_polls(
    configs: Store, sqlite_url: str, tmp_path: Path
) -> None:
    async with running_api(sqlite_url, tmp_path, "--workers", "2") as server:
        requests = await _requests(server.url)
        held = [
            (kind, await _send(server.url, request))
            for kind, kind_requests in requests.items()
            for request in kind_requests
        ]
        # Spread by the kernel over two processes, each with its own gauges: every connection was
        # accepted (`_send`); whether its long-poll already waits or not, it is answered.
        server.process.send_signal(signal.SIGTERM)
        answers = await asyncio.gather(
            *(_answer(*connection, to_head=kind == "config (ASGI)") for kind, connection in held)
        )
        code = await asyncio.to_thread(server.process.wait, 60)
    log = server.log.read_text(errors="replace")
    assert code == 0, f"the supervisor exited {code}:\n{log}"
    statuses = Counter(answer.status for answer in answers)
    assert set(statuses) <= {200, 304}, f"answered {dict(statuses)}\n{log}"
    assert all(answer.headers.get("connection") == "close" for answer in answers), answers
    assert ABORTED not in log and "killing it" not in log, log


async def test_a_request_sent_once_the_stop_began_is_answered_with_close(
    configs: Store, sqlite_url: str, tmp_path: Path
) -> None:
    async with running_api(sqlite_url, tmp_path) as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        # A connection the server accepted, whose request is not sent yet (a client that just
        # connected), and an idle keep-alive connection whose close tells us the stop began.
        late_reader, late_writer = await asyncio.open_connection(host, int(port))
        idle_reader, idle_writer = await _send(  # answered: both connections were accepted
            server.url, f"GET /v1/configs/{PATHS[0]}?client=h HTTP/1.1\r\nHost: t\r\n\r\n".encode()
        )
        await idle_reader.readuntil(b"\r\n\r\n")
        server.process.send_signal(signal.SIGTERM)
        await idle_reader.read()  # closed by the stop
        idle_writer.close()
        late_writer.write(
            f"GET /v1/configs/{PATHS[0]}?client=late HTTP/1.1\r\nHost: t\r\n\r\n".encode()
        )
        await late_writer.drain()
        answer = await _answer(late_reader, late_writer)
        code = await asyncio.to_thread(server.process.wait, 60)
    assert code == 0
    assert answer.status == 200, f"the late request got {answer}"
    assert answer.headers.get("connection") == "close" and answer.closed, answer


async def test_an_edge_answers_every_long_poll_of_every_kind_when_stopped(
    configs: Store, sqlite_url: str, tmp_path: Path
) -> None:
    async with (
        running_api(sqlite_url, tmp_path) as origin,
        running_edge(origin.url, tmp_path) as edge,
    ):
        server = Server(edge.url, edge.process, edge.output)
        await _stop_holding_every_kind(server, polls_per_process=4 * PER_KIND)


async def test_an_ofrep_evaluation_being_served_gets_the_grace_and_closes(
    configs: Store, sqlite_url: str, tmp_path: Path
) -> None:
    body = b'{"context": {"targetingKey": "h1"}}'
    async with running_api(sqlite_url, tmp_path) as server:
        # An evaluation whose body is still coming when the stop begins (a request being
        # served), and an idle keep-alive connection whose close tells us the stop began.
        reader, writer = await _send(
            server.url,
            b"POST /ofrep/v1/evaluate/flags HTTP/1.1\r\nHost: t\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:10],
        )
        idle_reader, idle_writer = await _send(
            server.url, f"GET /v1/configs/{PATHS[0]}?client=h HTTP/1.1\r\nHost: t\r\n\r\n".encode()
        )
        await idle_reader.readuntil(b"\r\n\r\n")
        server.process.send_signal(signal.SIGTERM)
        await idle_reader.read()  # closed by the stop
        idle_writer.close()
        writer.write(body[10:])
        await writer.drain()
        answer = await _answer(reader, writer)
        code = await asyncio.to_thread(server.process.wait, 60)
    assert code == 0
    assert answer.status == 200, f"the evaluation got {answer}"
    assert answer.headers.get("connection") == "close" and answer.closed, answer
    assert ABORTED not in server.log.read_text(errors="replace")
