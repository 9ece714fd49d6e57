"""`GET /healthz`: the store answers and the snapshots held are current."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.api.answers import HealthAnswer
from tempoconf.api.deps import snapshot_cache, store_of
from tempoconf.api.routing import route

__all__ = ["routes", "STORE_CHECK_TIMEOUT"]

STORE_CHECK_TIMEOUT = 5.0
"""Seconds a health check waits for the store before calling it unreachable."""


async def healthz(request: Request) -> JSONResponse:
    try:
        revision = await asyncio.wait_for(
            asyncio.to_thread(store_of(request).revision), STORE_CHECK_TIMEOUT
        )
    except TimeoutError:
        return _unavailable(f"store did not answer within {STORE_CHECK_TIMEOUT:g}s")
    except Exception as exc:  # any store failure is the answer here, not a crash
        return _unavailable(f"store unreachable: {type(exc).__name__}: {exc}")
    cache = snapshot_cache(request)
    if not cache.loaded:
        return _unavailable(f"config snapshots not loaded yet: {cache.last_error}")
    if cache.last_error is not None:  # the store answers, yet polls are served stale snapshots
        return _unavailable(f"config snapshots cannot be refreshed: {cache.last_error}")
    return JSONResponse(_without_nulls(HealthAnswer(status="ok", revision=revision)))


def _unavailable(error: str) -> JSONResponse:
    return JSONResponse(
        _without_nulls(HealthAnswer(status="unavailable", error=error)), status_code=503
    )


def _without_nulls(answer: HealthAnswer) -> dict[str, object]:
    return answer.model_dump(mode="json", exclude_none=True)


routes = [route("/healthz", healthz, methods=["GET"])]
