"""The distribution API as an ASGI app (Starlette)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette

from api.errors import EXCEPTION_HANDLERS
from api.routes import configs, health
from api.snapshots import DEFAULT_POLL_INTERVAL, SnapshotCache
from tempoconf.settings import Settings
from tempoconf.store.store import Store

__all__ = ["create_app"]


def create_app(
    store: Store, settings: Settings, *, poll_interval: float = DEFAULT_POLL_INTERVAL
) -> Starlette:
    """The API over `store`. Its lifespan loads the snapshots and polls `store.revision()`
    every `poll_interval` seconds; `app.state.snapshot_cache` is the SnapshotCache."""
    cache = SnapshotCache(store, poll_interval=poll_interval)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with cache.running():
            yield

    app = Starlette(
        routes=[*configs.routes, *health.routes],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.settings = settings
    app.state.snapshot_cache = cache
    return app
