"""What routes need, read from the app's state (set once in `create_app`)."""

from __future__ import annotations

from starlette.requests import Request

from api.snapshots import SnapshotCache
from tempoconf.settings import Settings
from tempoconf.store.store import Store

__all__ = ["snapshot_cache", "store_of", "settings_of"]


def snapshot_cache(request: Request) -> SnapshotCache:
    cache: SnapshotCache = request.app.state.snapshot_cache
    return cache


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings
