"""serve_api: real HTTP on 127.0.0.1, and a clean stop on cancellation."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import replace
from urllib.parse import urlsplit

import httpx
import pytest

from tempoconf.api import server
from tempoconf.api.server import ApiServerError, serve_api
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import long_polls_waiting, make_stable, publish, sample, start_rollout
from tests.fixtures.waiting import eventually

PATH = "myproject/server_config"


async def start(settings: Settings, api_store: Store) -> tuple[asyncio.Task[None], str]:
    """Serve on a free port; its base URL once it serves (or the error it failed with)."""
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = serve_api(settings, api_store, port=0, on_started=started.set_result)
    task = asyncio.create_task(serving)
    await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    if not started.done():
        task.result()  # raises what serving failed with
        pytest.fail("serve_api returned without serving")
    return task, started.result()


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel the server and wait for it to end (a shutdown that hangs meets the test's timeout)."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def refuses_connections(base_url: str) -> bool:
    parts = urlsplit(base_url)
    assert parts.hostname is not None and parts.port is not None
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=1).close()
    except OSError:
        return True
    return False


async def test_serves_over_http_and_stops_cleanly_when_cancelled(
    api_store: Store, settings: Settings
) -> None:
    stable = make_stable(api_store, PATH, {"v": 1})
    task, base_url = await start(settings, api_store)
    try:
        assert urlsplit(base_url).hostname == "127.0.0.1"
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
            health = await http.get("/healthz")
            first = await http.get(f"/v1/configs/{PATH}", params={"client": "host-1"})
            cached = await http.get(
                f"/v1/configs/{PATH}",
                params={"client": "host-1"},
                headers={"If-None-Match": first.headers["etag"]},
            )

            # A rollout written to the store reaches this client through the background poller.
            staged = start_rollout(api_store, PATH, {"v": 2})
            publish(api_store, PATH, index=0, name="all", percentile=100)

            async def sees_stage() -> bool:
                response = await http.get(f"/v1/configs/{PATH}", params={"client": "host-1"})
                return response.json()["version"] == staged.version

            await eventually(sees_stage, what="the poller to bring the published stage to host-1")

        assert health.json() == {"status": "ok", "revision": health.json()["revision"]}
        assert first.status_code == 200 and first.json()["version"] == stable.version
        assert cached.status_code == 304
    finally:
        await stop(task)

    assert refuses_connections(base_url)


async def test_a_kept_alive_connection_does_not_hold_up_shutdown(
    api_store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A grace no slow machine comes near: a shutdown that waited for the idle connection would
    # wait all of it; one that closes it takes a fraction of a second.
    monkeypatch.setattr(server, "GRACEFUL_SHUTDOWN_SECONDS", 120)
    make_stable(api_store, PATH, {"v": 1})
    task, base_url = await start(settings, api_store)
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        assert (await http.get("/healthz")).status_code == 200
        began = time.monotonic()
        await stop(task)
        took = time.monotonic() - began
    assert took < server.GRACEFUL_SHUTDOWN_SECONDS  # idle connections closed, not waited for
    assert refuses_connections(base_url)


async def test_an_idle_connection_outlives_the_clients_idle_expiry_and_ends_at_the_setting(
    api_store: Store, settings: Settings
) -> None:
    # httpx drops an idle connection after 5 s; a server that also closes at 5 s races it, and a
    # request sent on the connection as the server closes it gets no answer (httpx.ReadError).
    make_stable(api_store, PATH, {"v": 1})
    request = b"GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n"

    def answered(sock: socket.socket) -> bool:
        """Send a request and read its whole answer (head and body); False when none came."""
        sock.sendall(request)
        received = b""
        try:
            while b"\r\n\r\n" not in received:
                chunk = sock.recv(4096)
                if not chunk:
                    return False
                received += chunk
            head, _, body = received.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += sock.recv(4096)
        except OSError:
            return False
        return head.startswith(b"HTTP/1.1 200")

    keep_alive = 10.0  # margin over the 6 s below for a slow machine
    task, base_url = await start(replace(settings, api_keep_alive_timeout=keep_alive), api_store)
    try:
        parts = urlsplit(base_url)
        with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
            assert await asyncio.to_thread(answered, sock)
            await asyncio.sleep(6)  # past httpx's expiry and uvicorn's default
            assert await asyncio.to_thread(answered, sock)
            # The server closes it at the setting: waited for (its end read), not slept past.
            idle_since = time.monotonic()
            sock.settimeout(60)
            assert await asyncio.to_thread(sock.recv, 4096) == b""
            assert time.monotonic() - idle_since >= keep_alive - 1  # not before the setting
    finally:
        await stop(task)


async def test_a_port_in_use_is_an_error_not_an_exit(api_store: Store, settings: Settings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(ApiServerError, match=f"cannot listen on 127.0.0.1:{port}"):
            await serve_api(settings, api_store, port=port)


async def test_long_polls_over_http_wake_on_a_change_and_do_not_hold_up_shutdown(
    api_store: Store, settings: Settings
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    task, base_url = await start(settings, api_store)
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        first = await http.get(f"/v1/configs/{PATH}", params={"client": "host-1"})
        etag = first.headers["etag"]

        def long_poll() -> asyncio.Task[httpx.Response]:
            return asyncio.create_task(
                http.get(
                    f"/v1/configs/{PATH}",
                    params={"client": "host-1", "wait": "60"},
                    headers={"If-None-Match": etag},
                )
            )

        woken = long_poll()
        await long_polls_waiting(http, 1)
        staged = start_rollout(api_store, PATH, {"v": 2})
        publish(api_store, PATH, index=0, name="all", percentile=100)
        changed = await woken
        assert changed.status_code == 200 and changed.json()["version"] == staged.version
        wakeups = sample((await http.get("/metrics")).text, "tempoconf_api_long_poll_wakeups_total")
        assert wakeups == 1  # woken by the change, not answered at its deadline

        etag = changed.headers["etag"]
        held = long_poll()
        await long_polls_waiting(http, 1)
        assert not held.done()
        await stop(task)
        released = await held

    # Answered at shutdown: its wait (60 s) outlasts the grace, after which a request still
    # being served is cut off, not answered.
    assert released.status_code == 304


async def test_a_long_poll_whose_client_disconnects_is_dropped_at_once(
    api_store: Store, settings: Settings
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    task, base_url = await start(settings, api_store)
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
            etag = (await http.get(f"/v1/configs/{PATH}", params={"client": "h"})).headers["etag"]
            parts = urlsplit(base_url)
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
            writer.write(
                f"GET /v1/configs/{PATH}?client=h&wait=60 HTTP/1.1\r\nHost: x\r\n"
                f"If-None-Match: {etag}\r\n\r\n".encode()
            )
            await writer.drain()

            await long_polls_waiting(http, 1)
            writer.close()  # the client goes away without waiting for its answer
            await long_polls_waiting(http, 0)
            text = (await http.get("/metrics")).text
            assert sample(text, "tempoconf_api_long_polls_abandoned_total") == 1
    finally:
        await stop(task)


async def test_a_500_is_logged_once_one_line_and_its_traceback_at_error(
    api_store: Store, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # A real store failure the API does not expect: the audit log's table is gone.
    with api_store._engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE audit_log")
    task, base_url = await start(settings, api_store)
    try:
        with caplog.at_level(logging.INFO):
            async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
                response = await http.get(f"/v1/admin/history/{PATH}")
                after = await http.get("/healthz")  # the server serves on
    finally:
        await stop(task)

    assert response.status_code == 500
    assert response.json() == {"error": "internal error: OperationalError"}
    assert after.status_code == 200
    errors = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert [record.getMessage() for record in errors] == [
        f"unexpected error on GET /v1/admin/history/{PATH}"
    ]
    assert errors[0].levelno == logging.ERROR and errors[0].exc_info is not None


async def test_keep_alive_answers_go_out_without_nagle_on_the_stdlib_loop(
    api_store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tempoconf dev` served on the stdlib loop with TCP_NODELAY unset (a socket of proto 0):
    uvicorn's separate head and body writes then waited for the client's delayed ACK, ~40 ms a
    keep-alive answer. Every accepted connection must have TCP_NODELAY, whatever the loop."""
    import uvicorn

    import tempoconf.api.server as server_module

    assert type(asyncio.get_running_loop()).__module__.startswith("asyncio")  # not uvloop
    servers: list[uvicorn.Server] = []

    class Recorded(server_module._EmbeddedServer):
        def __init__(self, config: uvicorn.Config) -> None:
            super().__init__(config)
            servers.append(self)

    monkeypatch.setattr(server_module, "_EmbeddedServer", Recorded)
    make_stable(api_store, PATH, {"v": 1})
    task, base_url = await start(settings, api_store)
    try:
        parts = urlsplit(base_url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        request = f"GET /v1/configs/{PATH}?client=host-1 HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        codes = []
        for _ in range(5):  # one keep-alive connection, answers one after the other
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            codes.append(int(head.split(b" ")[1]))
        (server,) = servers
        sockets = [
            connection.transport.get_extra_info("socket")  # type: ignore[attr-defined]
            for connection in server.server_state.connections
        ]
        writer.close()
        await writer.wait_closed()
        assert codes == [200] * 5
        assert len(sockets) == 1
        assert sockets[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        await stop(task)
