"""Config and bundle polls answered on the connection (api/lean_protocol.py,
ConfigPolls.answer_directly, BundlePolls.answer_directly), over real HTTP: the same bytes as the
ASGI path, in order behind a pipelined request, and every request the direct path declines still
answered the ASGI way."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tempoconf.api.bundles import BundlePolls
from tempoconf.api.polls import ConfigPolls
from tempoconf.api.server import serve_api
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import long_polls_waiting, make_stable, publish, start_rollout
from tests.fixtures.waiting import eventually

PATH = "myproject/direct"
# The same config through a target the direct path declines, as it leaves percent-decoding to
# the ASGI path (`%69` is `i`).
DECLINED_PATH = "myproject/d%69rect"


class Server:
    def __init__(self, base_url: str, decisions: list[bool], bundle_decisions: list[bool]) -> None:
        self.base_url = base_url
        parts = urlsplit(base_url)
        assert parts.hostname is not None and parts.port is not None
        self.host, self.port = parts.hostname, parts.port
        self.decisions = decisions
        """What ConfigPolls.answer_directly returned for each GET it was offered (True:
        answered it)."""
        self.bundle_decisions = bundle_decisions
        """The same for BundlePolls.answer_directly."""

    async def serves(self, path: str = PATH) -> None:
        """Wait until the API serves `path` (its snapshot cache saw the write), then forget
        the decisions the wait caused."""

        async def served() -> bool:
            async with httpx.AsyncClient(base_url=self.base_url, timeout=10) as http:
                response = await http.get(
                    f"/v1/configs/{path}", headers={"Authorization": "Bearer client-secret"}
                )
                return response.status_code == 200

        await eventually(served, what=f"the API to serve {path}")
        self.decisions.clear()
        self.bundle_decisions.clear()

    async def exchange(self, raw: bytes, answers: int, timeout: float = 10) -> list[bytes]:
        """Send `raw` on one new connection and read `answers` whole responses."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(raw)
            await writer.drain()
            return [await asyncio.wait_for(read_response(reader), timeout) for _ in range(answers)]
        finally:
            writer.close()

    async def long_poll(self, target: str, etag: str) -> bytes:
        """One conditional GET of `target` (a long-poll when it asks to wait), and its answer."""
        (answer,) = await self.exchange(get(target, AUTH, f"If-None-Match: {etag}"), answers=1)
        return answer


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    match = re.search(rb"content-length: (\d+)", head)
    body = await reader.readexactly(int(match.group(1))) if match else b""
    return head + body


def etag_of(response: bytes) -> str:
    match = re.search(rb"etag: ([^\r]*)", response)
    assert match is not None, response
    return match.group(1).decode()


def without_date(response: bytes) -> bytes:
    return re.sub(rb"date: [^\r]*\r\n", b"", response)


def get(target: str, *headers: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", "Host: x", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.fixture
async def server(
    api_store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Server]:
    decisions: list[bool] = []
    bundle_decisions: list[bool] = []

    def record(kind: Any, into: list[bool]) -> None:
        answer_directly: Callable[..., bool] = kind.answer_directly

        def recording(self: Any, *args: Any) -> bool:
            decided = answer_directly(self, *args)
            into.append(decided)
            return decided

        monkeypatch.setattr(kind, "answer_directly", recording)

    record(ConfigPolls, decisions)
    record(BundlePolls, bundle_decisions)
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    settings = replace(settings, client_token="client-secret")
    task = asyncio.create_task(
        serve_api(settings, api_store, port=0, on_started=started.set_result)
    )
    try:
        base_url = await asyncio.wait_for(asyncio.shield(started), timeout=10)
        yield Server(base_url, decisions, bundle_decisions)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=10)


AUTH = "Authorization: Bearer client-secret"


async def test_a_poll_answered_on_the_connection_is_what_the_asgi_path_answers(
    server: Server, api_store: Store
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await server.serves()
    direct, declined = await server.exchange(
        get(f"/v1/configs/{PATH}?client=host-1", AUTH)
        + get(f"/v1/configs/{DECLINED_PATH}?client=host-1", AUTH),
        answers=2,
    )
    assert server.decisions == [True, False]
    assert direct.startswith(b"HTTP/1.1 200 OK\r\n") and b'"v":1' in direct
    assert without_date(direct) == without_date(declined)

    etag = etag_of(direct)
    cached, declined_cached = await server.exchange(
        get(f"/v1/configs/{PATH}?client=host-1", AUTH, f"If-None-Match: {etag}")
        + get(f"/v1/configs/{DECLINED_PATH}?client=host-1", AUTH, f"If-None-Match: {etag}"),
        answers=2,
    )
    assert cached.startswith(b"HTTP/1.1 304 Not Modified\r\n")
    assert without_date(cached) == without_date(declined_cached)
    assert server.decisions[2:] == [True, False]


async def test_long_polls_on_the_connection_and_over_asgi_wake_with_the_same_answer(
    server: Server, api_store: Store
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await server.serves()
    (first,) = await server.exchange(get(f"/v1/configs/{PATH}?client=host-1", AUTH), answers=1)
    etag = etag_of(first)

    def long_poll(path: str) -> Coroutine[Any, Any, bytes]:
        return server.long_poll(f"/v1/configs/{path}?client=host-1&wait=30", etag)

    direct = asyncio.create_task(long_poll(PATH))
    declined = asyncio.create_task(long_poll(DECLINED_PATH))
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
        await long_polls_waiting(http, 2)
    start_rollout(api_store, PATH, {"v": 2})
    publish(api_store, PATH, index=0, name="all", percentile=100)
    direct_answer, declined_answer = await asyncio.gather(direct, declined)

    assert b'"v":2' in direct_answer
    assert without_date(direct_answer) == without_date(declined_answer)
    assert server.decisions.count(True) == 2  # the first GET, and one of the long-polls


async def test_a_direct_poll_is_answered_anew_after_a_change_and_after_its_lease_ends(
    server: Server, api_store: Store
) -> None:
    # A repeated direct GET is answered from what it resolved to before (ConfigPolls
    # `_resolve_direct`): a write must move it, and so must the end of its stage's lease, which
    # no write announces.
    make_stable(api_store, PATH, {"v": 1})
    await server.serves()
    target = f"/v1/configs/{PATH}?client=host-1"

    async def poll(etag: str) -> bytes:
        (answer,) = await server.exchange(get(target, AUTH, f"If-None-Match: {etag}"), answers=1)
        return answer

    stable = await poll('"none"')
    assert b'"v":1' in stable
    assert (await poll(etag_of(stable))).startswith(b"HTTP/1.1 304 Not Modified\r\n")

    start_rollout(api_store, PATH, {"v": 2})
    publish(api_store, PATH, index=0, name="all", percentile=100, expires_in=timedelta(seconds=4))

    async def staged() -> bytes | None:
        answer = await poll(etag_of(stable))
        return answer if b'"v":2' in answer else None

    staged_answer = await eventually(staged, what="the stage to be served")
    assert (await poll(etag_of(staged_answer))).startswith(b"HTTP/1.1 304 Not Modified\r\n")

    async def back_on_stable() -> bool:
        return b'"v":1' in await poll(etag_of(staged_answer))

    await eventually(back_on_stable, what="the lease's end to put the client back on stable")
    assert server.decisions and all(server.decisions)  # every poll answered on the connection


async def test_a_request_pipelined_behind_a_waiting_long_poll_is_answered_after_it(
    server: Server, api_store: Store
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await server.serves()
    (first,) = await server.exchange(get(f"/v1/configs/{PATH}?client=host-1", AUTH), answers=1)
    etag = etag_of(first)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        # Both requests in one write: the second arrives while the first waits.
        writer.write(
            get(f"/v1/configs/{PATH}?client=host-1&wait=30", AUTH, f"If-None-Match: {etag}")
            + get("/healthz")
        )
        await writer.drain()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
            await long_polls_waiting(http, 1)
        # Nothing is answered while the long-poll waits: not even the health check behind it.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 0.5)

        start_rollout(api_store, PATH, {"v": 2})
        publish(api_store, PATH, index=0, name="all", percentile=100)
        changed = await asyncio.wait_for(read_response(reader), 10)
        health = await asyncio.wait_for(read_response(reader), 10)
        # The connection serves on, directly again.
        writer.write(get(f"/v1/configs/{PATH}?client=host-1", AUTH))
        again = await asyncio.wait_for(read_response(reader), 10)
    finally:
        writer.close()

    assert changed.startswith(b"HTTP/1.1 200 OK") and b'"v":2' in changed
    assert health.startswith(b"HTTP/1.1 200 OK") and b'"status":"ok"' in health
    assert again.startswith(b"HTTP/1.1 200 OK") and b'"v":2' in again
    assert server.decisions == [True, True, True]


async def test_what_the_direct_path_declines_is_answered_the_asgi_way(
    server: Server, api_store: Store
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await server.serves()
    (unknown,) = await server.exchange(
        get("/v1/configs/myproject/nothing-here?client=h", AUTH), answers=1
    )
    (no_token,) = await server.exchange(get(f"/v1/configs/{PATH}?client=h"), answers=1)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(
            f"HEAD /v1/configs/{PATH}?client=h HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()

    assert unknown.startswith(b"HTTP/1.1 404 Not Found")
    assert b"unknown config 'myproject/nothing-here' in namespace 'default'" in unknown
    assert no_token.startswith(b"HTTP/1.1 401 Unauthorized")
    assert b"www-authenticate: Bearer" in no_token
    assert head.startswith(b"HTTP/1.1 200 OK") and b"etag: " in head
    assert server.decisions == [False, False]  # HEAD is not offered at all


async def test_a_bundle_poll_answered_on_the_connection_is_what_the_asgi_path_answers(
    server: Server, api_store: Store
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await server.serves()
    direct, declined = await server.exchange(
        get(f"/v1/bundles/{PATH}", AUTH) + get(f"/v1/bundles/{DECLINED_PATH}", AUTH), answers=2
    )
    assert direct.startswith(b"HTTP/1.1 200 OK\r\n") and b'"v":1' in direct
    assert without_date(direct) == without_date(declined)
    etag = etag_of(direct)
    cached, declined_cached = await server.exchange(
        get(f"/v1/bundles/{PATH}", AUTH, f"If-None-Match: {etag}")
        + get(f"/v1/bundles/{DECLINED_PATH}", AUTH, f"If-None-Match: {etag}"),
        answers=2,
    )
    (unknown,) = await server.exchange(get("/v1/bundles/myproject/nothing-here", AUTH), answers=1)

    assert cached.startswith(b"HTTP/1.1 304 Not Modified\r\n")
    assert without_date(cached) == without_date(declined_cached)
    assert unknown.startswith(b"HTTP/1.1 404 Not Found")
    assert server.bundle_decisions == [True, False, True, False, False]
    assert server.decisions == []


async def test_bundle_long_polls_on_the_connection_wake_on_a_change_or_at_their_deadline(
    server: Server, api_store: Store
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await server.serves()
    (first,) = await server.exchange(get(f"/v1/bundles/{PATH}", AUTH), answers=1)
    etag = etag_of(first)

    def long_poll(path: str, wait: int) -> Coroutine[Any, Any, bytes]:
        return server.long_poll(f"/v1/bundles/{path}?wait={wait}", etag)

    # Nothing changes: the long-poll answers 304 at its deadline, and holds nothing after.
    loop = asyncio.get_running_loop()
    began = loop.time()
    unchanged = await long_poll(PATH, 1)
    assert unchanged.startswith(b"HTTP/1.1 304 Not Modified") and etag.encode() in unchanged
    assert loop.time() - began >= 0.9

    direct = asyncio.create_task(long_poll(PATH, 30))
    declined = asyncio.create_task(long_poll(DECLINED_PATH, 30))
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
        await long_polls_waiting(http, 2)
        start_rollout(api_store, PATH, {"v": 2})
        publish(api_store, PATH, index=0, name="all", percentile=100)
        direct_answer, declined_answer = await asyncio.gather(direct, declined)
        await long_polls_waiting(http, 0)

    assert direct_answer.startswith(b"HTTP/1.1 200 OK") and b'"v":2' in direct_answer
    assert without_date(direct_answer) == without_date(declined_answer)
    assert server.bundle_decisions == [True, True, True, False]
