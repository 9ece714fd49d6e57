"""A live stack for the abuse tests: the real API (uvicorn on loopback) and a real rollout worker
on a store of either backend, on their own event loop in a thread.

The schemathesis and hostile tests talk to it over real HTTP with blocking clients (schemathesis
calls with `requests`), which must not run on the loop that serves them: so the stack gets a loop
of its own. The Temporal dev server is the session's (tests/fixtures/temporal.py).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.fixtures.database import _postgresql_server_url, fresh_postgresql_database
from tests.fixtures.services import live_api

T = TypeVar("T")

ADMIN_TOKEN = "abuse-admin-token"
CLIENT_TOKEN = "abuse-client-token"
BACKENDS = ["sqlite", "postgresql"]


@dataclass
class Stack:
    """The API's base URL, its store and settings, and a way to run coroutines on its loop."""

    url: str
    store: Store
    settings: Settings
    client: Client
    """A Temporal client on the stack's loop (use it through `run`)."""
    loop: asyncio.AbstractEventLoop

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run `coroutine` on the stack's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    @property
    def client_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {CLIENT_TOKEN}"}


@contextmanager
def database_for(backend: str, tmp_dir: Path) -> Iterator[str]:
    """A fresh database URL of `backend` (PostgreSQL: skipped without a server, failed under CI)."""
    if backend == "sqlite":
        yield f"sqlite:///{(tmp_dir / 'tempoconf.db').resolve()}"
    else:
        yield from fresh_postgresql_database(_postgresql_server_url())


def temporal_target(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


@contextmanager
def live_stack(database_url: str, temporal_address: str, tmp_dir: Path) -> Iterator[Stack]:
    """The API and a worker on `database_url`, tokens set, on their own loop until exit."""
    # Imported here: the worker's modules are only needed when a stack runs.
    from tempoconf.cli.worker import build_worker

    store = Store(database_url, migrate=True)
    settings = Settings(
        data_dir=tmp_dir,
        temporal_address=temporal_address,
        task_queue=f"tempoconf-abuse-{uuid.uuid4().hex[:8]}",
        admin_token=ADMIN_TOKEN,
        client_token=CLIENT_TOKEN,
    )
    loop = asyncio.new_event_loop()
    ready: Future[Stack] = Future()
    stop = asyncio.Event()

    async def serve() -> None:
        try:
            client = await Client.connect(temporal_address)
            async with build_worker(client, store, task_queue=settings.task_queue):
                async with live_api(store, settings) as url:
                    ready.set_result(Stack(url, store, settings, client, loop))
                    await stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error)
            raise

    thread = threading.Thread(
        target=lambda: loop.run_until_complete(serve()), name="abuse-stack", daemon=True
    )
    thread.start()
    try:
        yield ready.result(timeout=60)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        if not thread.is_alive():
            loop.close()
        store.close()
