"""The test helper `LiveApi` holds its port through an outage: from before the server lets its
listener go until `start()` serves again, no other server can bind it (tests run in parallel,
and one that took the port would answer a client that expects the outage)."""

from __future__ import annotations

import threading

from tempoconf.api.server import ApiServerError, bind_listener
from tests.client.live_api import LiveApi


def test_the_port_is_never_free_while_the_api_stops_and_starts_again(live_api: LiveApi) -> None:
    port = live_api.port
    taken: list[str] = []
    done = threading.Event()

    def take_it() -> None:
        # Another test's server, trying the port all along (as fast as it can, no sleep).
        while not done.is_set():
            try:
                sock = bind_listener("127.0.0.1", port)
            except ApiServerError:
                continue
            sock.close()
            taken.append("bound")

    thief = threading.Thread(target=take_it, name="port-thief")
    thief.start()
    try:
        live_api.stop()
        live_api.start()
    finally:
        done.set()
        thief.join()
    assert live_api.port == port
    assert not taken, f"another server bound port {port} {len(taken)} time(s) in the outage"
