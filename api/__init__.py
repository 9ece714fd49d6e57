"""The distribution API: serves each polling client the version its identity resolves to.

`create_app(store, settings)` builds the ASGI app; `serve_api(settings, store)` runs it on uvicorn
until cancelled. Polls are answered from a `SnapshotCache`, never by a store query per poll, by a
raw ASGI path ahead of the framework (`api.polls`); the other routes (reports, admin, /metrics,
/healthz, /readyz, /openapi.json) are Starlette's. The document at /openapi.json lists them all.
"""

from __future__ import annotations

from tempoconf.api.app import create_app
from tempoconf.api.server import ApiServerError, serve_api
from tempoconf.api.snapshots import SnapshotCache, SnapshotsNotLoadedError

__all__ = ["ApiServerError", "SnapshotCache", "SnapshotsNotLoadedError", "create_app", "serve_api"]
