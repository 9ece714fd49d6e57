"""Requests the server's protocol refuses before any handler sees them (a malformed request line,
a byte httptools will not take in the target, an invalid header line, a head over the limit) get
the API's JSON error with the documented status, from a real `tempoconf api` process and from a
real `tempoconf edge` in front of it, over raw sockets (httpx would not send these bytes)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httptools
import httpx
import pytest
import pytest_asyncio

from tempoconf.api.lean_protocol import parser_refusal
from tempoconf.api.read_limits import MAX_HEAD_BYTES
from tests.api.test_read_limits import connect, read_until_closed
from tests.fixtures.edge import TEMPOCONF, running_edge
from tests.fixtures.services import free_port, serving_process

BIG = b"x-big: " + b"a" * (MAX_HEAD_BYTES + 1000) + b"\r\n"
MANY = b"".join(b"x-filler-%d: %s\r\n" % (n, b"a" * 1000) for n in range(MAX_HEAD_BYTES // 1000))

CASES = {
    "a non-ASCII query": (
        b"GET /v1/configs/myproject/server_config?client=h\xc3\xa9\xff HTTP/1.1\r\nHost: t\r\n\r\n",
        400,
        "malformed request target (invalid char in url query)",
    ),
    "a non-ASCII path": (
        b"GET /v1/configs/myproject/caf\xc3\xa9 HTTP/1.1\r\nHost: t\r\n\r\n",
        400,
        "malformed request target (invalid char in url path)",
    ),
    "a malformed request line": (b"GARBAGE\r\n\r\n", 400, "malformed request line"),
    "a space in the target": (
        b"GET /healthz x HTTP/1.1\r\nHost: t\r\n\r\n",
        400,
        "malformed request (expected HTTP/",
    ),
    "an invalid header name": (
        b"GET /healthz HTTP/1.1\r\nHost: t\r\nBad Header: y\r\n\r\n",
        400,
        "malformed request (invalid header token)",
    ),
    "a control character in a header value": (
        b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Tag: a\x01b\r\n\r\n",
        400,
        "malformed request (invalid header value char)",
    ),
    "a head over the limit in one header, sent at once": (
        b"GET /healthz HTTP/1.1\r\nHost: t\r\n" + BIG + b"\r\n",
        431,
        f"the request head is larger than {MAX_HEAD_BYTES} bytes",
    ),
    "a head over the limit in many headers, sent at once": (
        b"GET /v1/configs/myproject/server_config HTTP/1.1\r\nHost: t\r\n" + MANY + b"\r\n",
        431,
        f"the request head is larger than {MAX_HEAD_BYTES} bytes",
    ),
}


@asynccontextmanager
async def running_api(data_dir: str) -> AsyncIterator[str]:
    """`tempoconf api` (a real process) over a new SQLite store, on a free port; its URL."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPOCONF_", "TEMPORAL_", "OTEL_"))
    }
    env["TEMPOCONF_DATA_DIR"] = data_dir
    upgrade = await asyncio.to_thread(
        subprocess.run, [str(TEMPOCONF), "db", "upgrade"], env=env, capture_output=True
    )
    assert upgrade.returncode == 0, upgrade.stderr
    port = free_port()
    process = subprocess.Popen(
        [str(TEMPOCONF), "api", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    async with serving_process(process, f"http://127.0.0.1:{port}", what="tempoconf api") as url:
        yield url


@pytest_asyncio.fixture(scope="module")
async def servers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("malformed")
    async with (
        running_api(str(tmp / "api")) as api,
        running_edge(api, tmp) as edge,
    ):
        yield {"api": api, "edge": edge.url}


def exchange(base_url: str, request: bytes) -> bytes:
    """Send `request`, return everything the server sends until it closes the connection."""
    with connect(base_url) as sock:
        try:
            sock.sendall(request)
        except OSError:
            pass  # closed while we still sent (a head over the limit): the answer is read below
        return read_until_closed(sock)


@pytest.mark.parametrize("server", ["api", "edge"])
@pytest.mark.parametrize("case", list(CASES))
async def test_a_request_the_protocol_refuses_is_answered_as_json(
    servers: dict[str, str], server: str, case: str
) -> None:
    request, status, fragment = CASES[case]

    answer = await asyncio.to_thread(exchange, servers[server], request)

    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("ascii").split("\r\n")
    assert status_line.startswith(f"HTTP/1.1 {status} "), answer[:300]
    headers = dict(line.lower().split(": ", 1) for line in lines)
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    body.decode("ascii")  # the request's bytes are not echoed
    error = json.loads(body)["error"]
    assert error.startswith(fragment), error
    # The server goes on serving (the refused connection alone was closed).
    async with httpx.AsyncClient(base_url=servers[server], timeout=10) as http:
        assert (await http.get("/healthz")).status_code == 200


def test_a_bug_in_a_parser_callback_is_a_500_not_a_malformed_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = httptools.HttpParserCallbackError("User callback error")
    error.__context__ = KeyError("oops")

    refusal = parser_refusal(error)

    assert (refusal.status, refusal.message) == (500, "internal error: KeyError")
    assert "unexpected error while parsing a request" in caplog.text
