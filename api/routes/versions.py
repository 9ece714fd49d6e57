"""`GET /v1/admin/versions/{path}` (every version, stable marked), `GET /v1/admin/stable/{path}`
(the stable version with its value) and `GET /v1/admin/history/{path}` (the audit log)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.access.roles import Role
from tempoconf.api.answers import AuditEntryAnswer, HistoryAnswer, VersionAnswer, VersionsAnswer
from tempoconf.api.deps import authorized_config, limit_param, state_of
from tempoconf.api.errors import ApiError
from tempoconf.api.routes.rollouts import stable_answer
from tempoconf.api.routing import CONFIG_PATH, route
from tempoconf.store.records import AuditEntry, VersionInfo

__all__ = ["DEFAULT_HISTORY_LIMIT", "MAX_HISTORY_LIMIT", "routes"]

DEFAULT_HISTORY_LIMIT = 100
MAX_HISTORY_LIMIT = 1000


async def list_versions(request: Request) -> JSONResponse:
    _, namespace, path = await authorized_config(request, Role.VIEWER)
    versions = await asyncio.to_thread(state_of(request).store.list_versions, namespace, path)
    if not versions:
        raise ApiError(404, f"unknown config {path!r} in namespace {namespace!r}")
    stable = next((info.version for info in versions if info.is_stable), None)
    answer = VersionsAnswer(
        namespace=namespace,
        path=path,
        stable=stable,
        versions=[_version(info) for info in versions],
    )
    return JSONResponse(answer.body())


async def stable(request: Request) -> JSONResponse:
    _, namespace, path = await authorized_config(request, Role.VIEWER)
    record = await asyncio.to_thread(state_of(request).store.get_stable, namespace, path)
    answer = stable_answer(namespace, path, record)
    if answer is None:
        raise ApiError(404, f"config {path!r} in namespace {namespace!r} has no stable version")
    return JSONResponse(answer.body())


async def history(request: Request) -> JSONResponse:
    principal, namespace, path = await authorized_config(request, Role.VIEWER)
    limit = limit_param(request, default=DEFAULT_HISTORY_LIMIT, maximum=MAX_HISTORY_LIMIT)
    entries = await asyncio.to_thread(state_of(request).store.history, namespace, path, limit=limit)
    answer = HistoryAnswer(
        namespace=namespace,
        path=path,
        entries=[_entry(entry, lambda ns: principal.may(Role.VIEWER, ns)) for entry in entries],
    )
    return JSONResponse(answer.body())


def _when(at: datetime) -> str:
    return at.isoformat()


def _version(info: VersionInfo) -> VersionAnswer:
    return VersionAnswer(
        version=info.version,
        author=info.author,
        commit=info.commit,
        message=info.message,
        created_at=_when(info.created_at),
        is_stable=info.is_stable,
        stable_since=[_when(at) for at in info.stable_since],
    )


def _entry(entry: AuditEntry, viewable: Callable[[str], bool]) -> AuditEntryAnswer:
    """An audit row as a viewer may see it: a cross-namespace changeset's `rollout.started`
    names only the configs in namespaces the caller may view (`changeset_hidden`: how many
    others)."""
    details = entry.details
    listed = details.get("changeset")
    if isinstance(listed, list):
        shown = [name for name in listed if viewable(str(name).partition("/")[0])]
        if len(shown) < len(listed):
            details = {**details, "changeset": shown, "changeset_hidden": len(listed) - len(shown)}
    return AuditEntryAnswer(
        id=entry.id,
        at=_when(entry.at),
        actor=entry.actor,
        action=entry.action,
        reason=entry.reason,
        version=entry.version,
        workflow_id=entry.workflow_id,
        details=details,
    )


routes = [
    route(f"/v1/admin/versions/{CONFIG_PATH}", list_versions, methods=["GET"]),
    route(f"/v1/admin/stable/{CONFIG_PATH}", stable, methods=["GET"]),
    route(f"/v1/admin/history/{CONFIG_PATH}", history, methods=["GET"]),
]
