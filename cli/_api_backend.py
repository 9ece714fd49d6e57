"""The operator's backend in API mode: the admin API (`/v1/admin/...`) over HTTP with the API
token (cli/_api_token.py), whose routes run the same operations (tempoconf.operations) as the
direct mode; its answers are decoded into the same records, its refusals raised as the same
errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from tempoconf.cli._api_token import api_credential
from tempoconf.cli._common import die
from tempoconf.cli._operator_records import Ending, Prepared, ViewUnavailable
from tempoconf.gates.applied_gate import ClientApplied
from tempoconf.gates.freezes import Freeze
from tempoconf.operations.clients import ClientsQuery
from tempoconf.operations.errors import Conflict, Invalid, NotFound, Refused, Undelivered
from tempoconf.operations.freezes import EndedFreeze
from tempoconf.operations.preview import ChangePreview
from tempoconf.operations.served import ServedState
from tempoconf.operations.start import AlreadyRunning, LockBusy
from tempoconf.operations.steer import CommandSent, OperatorCommandInput
from tempoconf.operations.view import RolloutSnapshot, StoreContext
from tempoconf.problems import InvalidRequestError, Problem
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.commands import command_path
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.settings import Settings
from tempoconf.store.records import (
    AuditEntry,
    LockRecord,
    RolloutRecord,
    ServedConfig,
    VersionInfo,
)

if TYPE_CHECKING:
    import httpx  # imported where used: the direct mode never loads it

__all__ = ["ApiBackend"]

HTTP_TIMEOUT_SECONDS = 30.0
# How often a waiting command asks the API whether the rollout ended.
RESULT_POLL_SECONDS = 1.0

_Record = TypeVar("_Record")


class ApiBackend:
    """The admin API (`/v1/admin/...`) with the API token: nothing else is touched."""

    def __init__(self, settings: Settings, http: httpx.AsyncClient, token_variable: str) -> None:
        self._base = settings.resolved_api_url
        self._http = http
        self._token_variable = token_variable

    @classmethod
    @asynccontextmanager
    async def connect(cls, settings: Settings) -> AsyncIterator[ApiBackend]:
        import httpx

        credential = api_credential(settings)
        headers = {"Authorization": f"Bearer {credential.token}"}
        async with httpx.AsyncClient(
            base_url=settings.resolved_api_url, headers=headers, timeout=HTTP_TIMEOUT_SECONDS
        ) as http:
            yield cls(settings, http, credential.variable)

    # -- the exchange ------------------------------------------------------------------------
    async def _call(
        self,
        method: str,
        url: str,
        *,
        namespace: str | None = None,
        params: Mapping[str, str | list[str]] | None = None,
        body: Any = None,
        expected: tuple[int, ...] = (200,),
    ) -> httpx.Response:
        """The response when its status is one of `expected`; every other answer ends the
        command with a message naming the setting to fix."""
        import httpx

        query: dict[str, str | list[str]] = dict(params or {})
        if namespace is not None:
            query["namespace"] = namespace
        try:
            response = await self._http.request(method, url, params=query or None, json=body)
        except httpx.HTTPError as error:
            die(
                f"cannot reach the admin API at {self._base}: {error or type(error).__name__}. "
                "Set TEMPOCONF_API_URL (or --api-url) to the address of `tempoconf api`."
            )
        if response.status_code in expected:
            return response
        variable = self._token_variable
        if response.status_code == 401:
            die(
                f"the admin API at {self._base} refused the token of {variable} "
                f"(401: {_error_text(response)}). {_TOKEN_FIXES[variable]}"
            )
        if response.status_code == 403:
            # The token is good, its identity may not do this: the API says what it lacks.
            die(
                f"the admin API at {self._base} forbids this to the token of {variable} "
                f"(403): {_error_text(response)}"
            )
        self._refused(response)

    def _refused(self, response: httpx.Response) -> NoReturn:
        die(
            f"the admin API at {self._base} answered {response.status_code}: "
            f"{_error_text(response)}"
        )

    # -- the operations ----------------------------------------------------------------------
    async def get_schema(self, namespace: str, path: str) -> Any | None:
        response = await self._call(
            "GET", f"/v1/admin/schemas/{path}", namespace=namespace, expected=(200, 404)
        )
        if response.status_code == 404:
            return None
        return response.json()["schema"]

    async def set_schema(self, namespace: str, path: str, schema: Any, *, reason: str) -> None:
        await self._call(
            "PUT",
            f"/v1/admin/schemas/{path}",
            namespace=namespace,
            # No `by`: the API names the caller (a named token's name; else "api"), as for every
            # admin write, and refuses a `by` that differs from a named token's.
            body={"schema": schema, "reason": reason},
        )

    async def get_stable(self, namespace: str, path: str) -> VersionRecord | None:
        response = await self._call(
            "GET", f"/v1/admin/stable/{path}", namespace=namespace, expected=(200, 404)
        )
        if response.status_code == 404:
            return None
        return _decode(VersionRecord, response.json())

    async def list_versions(self, namespace: str, path: str) -> list[VersionInfo]:
        response = await self._call(
            "GET", f"/v1/admin/versions/{path}", namespace=namespace, expected=(200, 404)
        )
        if response.status_code == 404:  # a config without versions
            return []
        return [_decode(VersionInfo, item) for item in response.json()["versions"]]

    async def history(self, namespace: str, path: str, *, limit: int) -> list[AuditEntry]:
        response = await self._call(
            "GET", f"/v1/admin/history/{path}", namespace=namespace, params={"limit": str(limit)}
        )
        return [
            _decode(AuditEntry, {**item, "namespace": namespace, "path": path})
            for item in response.json()["entries"]
        ]

    async def prepare(self, raw: Any) -> Prepared:
        response = await self._call("POST", "/v1/admin/plans", body=raw, expected=(200, 400))
        answer = response.json()
        if response.status_code == 400:
            problems = answer.get("problems") or []
            if not problems:
                self._refused(response)
            raise InvalidRequestError([Problem(p["pointer"], p["message"]) for p in problems])
        request = parse_rollout_request(raw)  # valid: the API said so
        lock = answer["lock"]
        return Prepared(
            request=request,
            version=answer["version"],
            version_exists=answer["version_exists"],
            value=answer["value"],
            stable=_decode(VersionRecord, answer["stable"]) if answer["stable"] else None,
            lock=_decode(LockRecord, lock) if lock else None,
            change=answer["change"],
            changes=tuple(ChangePreview(**change) for change in answer.get("changes") or []),
        )

    async def client_rows(self, query: ClientsQuery) -> list[ClientApplied]:
        params = {"since_seconds": f"{query.since.total_seconds():g}"}
        if query.version is not None:
            params["version"] = query.version
        if query.not_applied:
            params["not_applied"] = "true"
        response = await self._call(
            "GET", f"/v1/admin/clients/{query.path}", namespace=query.namespace, params=params
        )
        return [
            ClientApplied(
                client=item["client"],
                channel=item["channel"],
                labels=dict(item["labels"]),
                last_seen=datetime.fromisoformat(item["last_seen"]),
                last_version=item["last_version"],
                applied_version=item.get("applied_version"),
                applied_at=(
                    datetime.fromisoformat(item["applied_at"]) if item.get("applied_at") else None
                ),
                apply_error=item.get("apply_error"),
                apply_error_version=item.get("apply_error_version"),
            )
            for item in response.json()["clients"]
        ]

    async def start(self, raw: Any, prepared: Prepared, workflow_id: str) -> str | None:
        response = await self._call(
            "POST",
            "/v1/admin/rollouts",
            params={"workflow_id": workflow_id},
            body=raw,
            expected=(202, 400, 409),
        )
        if response.status_code == 202:
            run_id: str | None = response.json()["run_id"]
            return run_id
        if response.status_code == 400:
            problems = response.json().get("problems") or []
            if not problems:  # not the request: a parameter beside it (its workflow id)
                raise Invalid(_error_text(response))
            raise InvalidRequestError([Problem(p["pointer"], p["message"]) for p in problems])
        if "already has a running rollout" in _error_text(response):
            again = await self.prepare(raw)
            if again.lock is not None:
                raise LockBusy(again, again.lock)
        raise AlreadyRunning(workflow_id)

    async def wait_result(
        self, namespace: str, path: str, workflow_id: str, run_id: str | None
    ) -> Ending:
        while True:
            workflow = await self._state(namespace, path, workflow_id)
            if workflow.get("outcome") is not None:  # ended (the newest run of this id)
                if workflow.get("result") is not None:
                    return Ending(result=dict(workflow["result"]))
                return Ending(failure=str(workflow.get("reason") or workflow["outcome"]))
            await asyncio.sleep(RESULT_POLL_SECONDS)

    async def command(self, command: OperatorCommandInput) -> CommandSent:
        digest, explicit_id = command.digest, command.workflow_id
        response = await self._call(
            "POST",
            command_path(command.path, command.name),
            namespace=command.namespace,
            params={"workflow_id": explicit_id} if explicit_id else None,
            # No `by`: the API names the caller (a named token's name; else "api"), and refuses
            # a `by` that differs from a named token's.
            body={"reason": command.reason, **({"digest": digest} if digest else {})},
            expected=(200, 403, 404, 409, 502),
        )
        if response.status_code in (403, 409):
            raise Refused(_error_text(response))
        if response.status_code == 404:
            raise NotFound(_error_text(response))  # the same words as the direct mode's
        if response.status_code == 502:
            raise Undelivered(_error_text(response))
        answer = dict(response.json())
        return CommandSent(str(answer.pop("workflow_id")), answer)

    async def rollout_view(
        self, namespace: str, path: str, explicit_id: str | None
    ) -> tuple[RolloutSnapshot, StoreContext]:
        response = await self._call(
            "GET",
            f"/v1/admin/rollouts/{path}",
            namespace=namespace,
            params={"workflow_id": explicit_id} if explicit_id else None,
        )
        answer = response.json()
        workflow = answer["workflow"]
        workflow_id = str(workflow["workflow_id"])
        found = answer.get("context")
        context = _context(found) if found else None
        if workflow.get("error_kind"):
            kind = str(workflow["error_kind"])
            detail = str(workflow.get("error_detail") or workflow.get("error") or "")
            if kind in ("unavailable", "rpc"):
                # Temporal did not answer the API: its `error` names which Temporal (the detail
                # alone, `operation was canceled`, named nothing).
                said = str(workflow.get("error") or detail)
                detail = f"the admin API at {self._base} answered: {said}"
            lock, rollout = answer.get("lock"), answer.get("rollout")
            raise ViewUnavailable(
                workflow_id,
                kind,
                detail,
                lock=_decode(LockRecord, lock) if lock else None,
                rollout=_decode(RolloutRecord, rollout) if rollout else None,
                context=context,
            )
        status = str(workflow.get("execution_status") or "UNKNOWN")
        result = workflow.get("result")
        snapshot = RolloutSnapshot(
            workflow_id=workflow_id,
            run_id=workflow.get("run_id"),
            execution=status.title(),
            running=status == "RUNNING",
            progress=workflow.get("status"),
            outcome=workflow.get("outcome"),
            result_version=result.get("version") if result else None,
            result=result,
            reason=str(workflow.get("reason") or ""),
            starter=str(workflow.get("starter") or ""),
        )
        return snapshot, context or StoreContext()

    async def start_freeze(self, namespace: str, *, reason: str, until: datetime | None) -> Freeze:
        body = {
            "namespace": namespace,
            "reason": reason,
            "until": until.isoformat() if until is not None else None,
        }
        response = await self._call("POST", "/v1/admin/freezes", body=body, expected=(201, 409))
        if response.status_code == 409:
            raise Conflict(_error_text(response))
        return _freeze(response.json())

    async def end_freeze(self, namespace: str, *, reason: str) -> EndedFreeze:
        response = await self._call(
            "POST",
            f"/v1/admin/freezes/{namespace}:end",
            body={"reason": reason},
            expected=(200, 404),
        )
        if response.status_code == 404:
            raise NotFound(_error_text(response))
        answer = response.json()
        freeze = _freeze({key: value for key, value in answer.items() if key not in _END_ONLY})
        if "rollouts_told" not in answer:  # an API older than this CLI ends it and tells nobody
            return EndedFreeze(freeze, None, f"the API at {self._base} does not tell them")
        return EndedFreeze(freeze, answer["rollouts_told"], answer["not_told"])

    async def list_freezes(self, namespace: str | None, *, limit: int) -> list[Freeze]:
        params = {"limit": str(limit), **({"namespace": namespace} if namespace else {})}
        response = await self._call("GET", "/v1/admin/freezes", params=params)
        return [_freeze(item) for item in response.json()["freezes"]]

    async def served_state(self, namespaces: Sequence[str] | None) -> ServedState:
        params: dict[str, str | list[str]] = {}
        if namespaces is not None:
            if not namespaces:  # no namespace asked: nothing (an absent parameter means all)
                return ServedState(configs=[], freezes=[])
            params["namespace"] = list(namespaces)
        response = await self._call("GET", "/v1/admin/configs", params=params)
        answer = response.json()
        return ServedState(
            configs=[_served_config(item) for item in answer["configs"]],
            freezes=[_freeze(item) for item in answer["freezes"]],
        )

    async def _state(self, namespace: str, path: str, workflow_id: str) -> dict[str, Any]:
        response = await self._call(
            "GET",
            f"/v1/admin/rollouts/{path}",
            namespace=namespace,
            params={"workflow_id": workflow_id},
        )
        workflow: dict[str, Any] = response.json()["workflow"]
        return workflow


_TOKEN_FIXES = {
    "TEMPOCONF_API_TOKEN_COMMAND": "Make TEMPOCONF_API_TOKEN_COMMAND print a token the API accepts.",
    "TEMPOCONF_API_TOKEN": "Set TEMPOCONF_API_TOKEN to a token the API accepts.",
    "TEMPOCONF_ADMIN_TOKEN": "Set TEMPOCONF_ADMIN_TOKEN to a token the API accepts.",
}
"""What to do about a token the API refused (401), by the setting it came from."""


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return response.text.strip() or response.reason_phrase


_END_ONLY = ("rollouts_told", "not_told")
"""What the freeze end's answer adds to the freeze."""


def _freeze(item: dict[str, Any]) -> Freeze:
    """A freeze from the admin API's answer (its `active` is the API's view, recomputed here)."""
    return _decode(Freeze, {key: value for key, value in item.items() if key != "active"})


def _served_config(item: dict[str, Any]) -> ServedConfig:
    """A served config from `GET /v1/admin/configs` (its lock names its config only once)."""
    lock = item["lock"]
    where = {"namespace": item["namespace"], "path": item["path"]}
    return _decode(ServedConfig, {**item, "lock": {**lock, **where} if lock else None})


def _context(found: dict[str, Any]) -> StoreContext:
    return StoreContext(
        started_by=found.get("started_by", ""),
        started_at=_when(found["started_at"]) if found.get("started_at") else None,
        start_reason=found.get("start_reason", ""),
        author=found.get("author", ""),
        commit=found.get("commit", ""),
        message=found.get("message", ""),
        stable=found.get("stable"),
    )


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _decode(kind: type[_Record], item: dict[str, Any]) -> _Record:
    """A record the store hands out, from its JSON answer (ISO times parsed; keys the record does
    not have, such as an answer's links, ignored)."""
    from pydantic import TypeAdapter

    return TypeAdapter(kind).validate_python(item)
