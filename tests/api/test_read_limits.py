"""Slow senders over real sockets: a request whose head or body does not arrive within its bound
is answered 408 and its connection closed, other clients are served meanwhile, and a long-poll
(a GET that waits for its answer, not for its request) is not cut short."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from urllib.parse import urlsplit

import httpx
import pytest
import pytest_asyncio

from tempoconf.api.read_limits import MAX_HEAD_BYTES
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually

PATH = "myproject/server_config"
BOUND = 1.0
"""The head and body bounds the server under test runs with, in seconds."""
GIVE_UP = 15.0
"""A socket read that gets nothing for this long fails the test (no answer: the bug)."""


@pytest_asyncio.fixture
async def server(api_store: Store, settings: Settings) -> AsyncIterator[str]:
    make_stable(api_store, PATH, {"v": 1})
    bounded = replace(settings, api_header_timeout=BOUND, api_body_timeout=BOUND)
    async with live_api(api_store, bounded) as base_url:
        yield base_url


def connect(base_url: str) -> socket.socket:
    parts = urlsplit(base_url)
    assert parts.hostname is not None and parts.port is not None
    sock = socket.create_connection((parts.hostname, parts.port), timeout=GIVE_UP)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (socket.timeout after GIVE_UP: no answer)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass  # the server closed while we still sent: it resets after its answer was read
    return received


async def test_a_body_shorter_than_its_content_length_is_408_and_others_are_served(
    server: str,
) -> None:
    head = (
        "POST /v1/reports HTTP/1.1\r\nHost: test\r\ncontent-type: application/json\r\n"
        "content-length: 100\r\n\r\n"
    )
    with connect(server) as slow:
        slow.sendall(head.encode() + b'{"path": "')  # 10 of 100 bytes, then nothing
        # Meanwhile the server answers everyone else.
        async with httpx.AsyncClient(base_url=server, timeout=10) as http:
            poll = await http.get(f"/v1/configs/{PATH}", params={"client": "host-1"})
            ready = await http.get("/readyz")
        answer = await asyncio.to_thread(read_until_closed, slow)

    assert poll.status_code == 200 and ready.status_code == 200
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout", answer
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    error = json.loads(body)["error"]
    assert error.startswith(f"the request body was not received within {BOUND:g}s"), error


async def test_a_client_that_leaves_mid_body_is_no_error(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent stopping while it sends a report: the handler gives up quietly, no traceback in
    the log (it was `ERROR ... Exception in ASGI application` with ClientDisconnect)."""
    head = "POST /v1/reports HTTP/1.1\r\nHost: test\r\ncontent-length: 100\r\n\r\n"
    with connect(server) as leaving:
        leaving.sendall(head.encode() + b'{"path": "')
    async with httpx.AsyncClient(base_url=server, timeout=10) as http:

        async def report_handled() -> bool:
            metrics = (await http.get("/metrics")).text
            return any(
                'route="/v1/reports"' in line and line.split("{")[0].endswith("_count")
                for line in metrics.splitlines()
            )

        await eventually(report_handled, what="the server to finish the abandoned report")
        assert (await http.get(f"/v1/configs/{PATH}", params={"client": "host-1"})).is_success
    errors = [record for record in caplog.records if record.levelname in ("ERROR", "CRITICAL")]
    assert errors == [], [record.getMessage() for record in errors]


async def test_a_trickling_body_is_cut_at_the_bound(server: str) -> None:
    head = "POST /v1/reports HTTP/1.1\r\nHost: test\r\ncontent-length: 1000\r\n\r\n"
    with connect(server) as slow:
        slow.sendall(head.encode())

        async def trickle() -> None:
            # One byte every tenth of a second: each read is quick, the whole body is not.
            try:
                for _ in range(1000):
                    await asyncio.to_thread(slow.sendall, b" ")
                    await asyncio.sleep(0.1)
            except OSError:
                return  # the server closed the connection: what this test waits for

        sender = asyncio.create_task(trickle())
        answer = await asyncio.to_thread(read_until_closed, slow)
        sender.cancel()

    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer


async def test_a_head_that_does_not_arrive_is_408_and_an_idle_connection_is_closed(
    server: str,
) -> None:
    with connect(server) as partial, connect(server) as idle:
        partial.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: test\r\n")  # no end of headers
        async with httpx.AsyncClient(base_url=server, timeout=10) as http:
            assert (await http.get("/healthz")).status_code == 200
        partial_answer, idle_answer = await asyncio.gather(
            asyncio.to_thread(read_until_closed, partial),
            asyncio.to_thread(read_until_closed, idle),
        )

    assert partial_answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), partial_answer
    error = json.loads(partial_answer.partition(b"\r\n\r\n")[2])["error"]
    assert error == f"the request head was not received within {BOUND:g}s"
    assert idle_answer == b""  # never began a request: closed without an answer


async def test_a_head_larger_than_the_limit_is_431(server: str) -> None:
    with connect(server) as large:
        large.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
        filler = b"x-filler: " + b"a" * 1000 + b"\r\n"
        try:
            for _ in range(MAX_HEAD_BYTES // len(filler) + 100):
                large.sendall(filler)
        except OSError:
            pass  # closed while we were still sending: the answer is read below
        answer = await asyncio.to_thread(read_until_closed, large)

    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer[:200]
    headers, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in headers and b"connection: close" in headers
    assert json.loads(body) == {"error": f"the request head is larger than {MAX_HEAD_BYTES} bytes"}


async def test_a_long_poll_outlasts_the_read_bounds(server: str) -> None:
    async with httpx.AsyncClient(base_url=server, timeout=10) as http:
        first = await http.get(f"/v1/configs/{PATH}", params={"client": "host-1"})
        wait = 3 * BOUND
        polled = await http.get(
            f"/v1/configs/{PATH}",
            params={"client": "host-1", "wait": str(wait)},
            headers={"If-None-Match": first.headers["etag"]},
        )
        after = await http.get("/healthz")  # the same kept-alive connection still serves

    assert polled.status_code == 304  # its wait ran out (3 bounds long), not a read bound
    assert after.status_code == 200


def test_the_bounds_come_from_the_environment_and_bad_ones_are_named() -> None:
    settings = Settings.from_env(
        {"TEMPOCONF_API_HEADER_TIMEOUT": "2.5", "TEMPOCONF_API_BODY_TIMEOUT": "30"}
    )
    assert (settings.api_header_timeout, settings.api_body_timeout) == (2.5, 30.0)
    assert Settings.from_env({}).api_body_timeout == 10.0
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(ValueError, match=f"TEMPOCONF_API_BODY_TIMEOUT='{bad}'"):
            Settings.from_env({"TEMPOCONF_API_BODY_TIMEOUT": bad})
