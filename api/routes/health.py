"""`GET /healthz` (liveness) and `GET /readyz` (readiness).

Polls are served from snapshots in memory, so a store outage does not stop an instance from
serving: it serves the last snapshots it loaded, and says how old they are. So liveness never
depends on the store (a load balancer or an orchestrator acting on it during a database outage
would pull every instance at once), and readiness only needs snapshots to serve from. How old they
may get before someone is told is a monitor's call: `/readyz?max_age=SECONDS`, or an alert on
`tempoconf_api_snapshot_age_seconds`.

Under an access policy, `/readyz` also says which policy is in force: a file that no longer loads
leaves an older one in force, which is no reason to stop serving (still 200), but is said here,
since when and where the file is wrong, besides the log.
"""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.access.source import public_problems
from tempoconf.api.access import AccessControl
from tempoconf.api.answers import AccessPolicyAnswer, HealthAnswer, ReadinessAnswer
from tempoconf.api.deps import state_of
from tempoconf.api.errors import ApiError
from tempoconf.api.routing import route

__all__ = ["routes"]


async def healthz(request: Request) -> JSONResponse:
    """The process serves: 200 whenever it answers, whatever the store does."""
    revision = state_of(request).snapshot_cache.revision
    return JSONResponse(_without_nulls(HealthAnswer(status="ok", revision=revision)))


async def readyz(request: Request) -> JSONResponse:
    """200 once snapshots are loaded (also while the store is unreachable: polls are served from
    them); 503 before the first load, or when they are older than `max_age` seconds."""
    max_age = _max_age(request.query_params.get("max_age"))
    cache = state_of(request).snapshot_cache
    age = cache.age
    policy = _access_policy(request.app.state.access)
    if not cache.loaded or age is None:
        return _answer(
            ReadinessAnswer(
                status="unavailable",
                error=f"config snapshots not loaded from the store yet: {cache.last_error}",
                access_policy=policy,
            ),
            503,
        )
    failure = cache.last_error
    answer = ReadinessAnswer(
        status="ready",
        revision=cache.revision,
        snapshot_age_seconds=round(age, 3),
        store="ok" if failure is None else "unreachable",
        error=(
            None
            if failure is None
            else f"cannot refresh the config snapshots: {type(failure).__name__}: {failure}"
        ),
        access_policy=policy,
    )
    if max_age is not None and age > max_age:
        stale = f"the config snapshots are {age:.1f}s old, more than max_age={max_age:g}"
        error = stale if answer.error is None else f"{stale}; {answer.error}"
        return _answer(answer.model_copy(update={"status": "unavailable", "error": error}), 503)
    return _answer(answer, 200)


def _access_policy(access: AccessControl) -> AccessPolicyAnswer | None:
    """The policy in force, the file looked at first (as a request asking who calls would)."""
    if access.policy is None:
        return None
    source = access.source
    assert source is not None
    error = source.error
    return AccessPolicyAnswer(
        status="current" if error is None else "stale",
        loaded_at=source.loaded_at.isoformat(),
        failing_since=source.failing_since.isoformat() if source.failing_since else None,
        failed_reloads=source.failed_reloads,
        error=(
            None
            if error is None
            else f"the access policy file does not load ({len(error.problems)} problem(s): "
            f"{public_problems(error)}); the policy read at {source.loaded_at.isoformat()} "
            "stays in force"
        ),
    )


def _max_age(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:  # also refuses nan
        raise ApiError(400, f"invalid query parameter max_age={raw!r}: expected seconds, 0 or more")
    return seconds


def _answer(answer: HealthAnswer | ReadinessAnswer, status: int) -> JSONResponse:
    return JSONResponse(_without_nulls(answer), status_code=status)


def _without_nulls(answer: HealthAnswer | ReadinessAnswer) -> dict[str, object]:
    return answer.model_dump(mode="json", exclude_none=True)


routes = [
    route("/healthz", healthz, methods=["GET"]),
    route("/readyz", readyz, methods=["GET"]),
]
