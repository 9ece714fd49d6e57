"""Where the operator commands read and act: the store and Temporal directly (`DirectBackend`), or
the admin API over HTTP (`ApiBackend`) when TEMPOCONF_API_URL (or --api-url) and
TEMPOCONF_ADMIN_TOKEN are both set, so an operator needs neither database credentials nor access to
Temporal. Both answer with the same records; the commands format them with the same code, so the
output is the same in either mode."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from tempoconf.cli._clients import KnownClient
from tempoconf.cli._common import actor, connect_temporal, die, open_store
from tempoconf.gates.applied_gate import ClientApplied
from tempoconf.gates.freezes import Freeze
from tempoconf.operations.preview import ChangePreview, RolloutPreview, preview_rollout
from tempoconf.operations.view import (
    RolloutSnapshot,
    SnapshotUnavailable,
    StoreContext,
    find_workflow_id,
    read_snapshot,
    store_context,
)
from tempoconf.problems import InvalidRequestError, Problem
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.commands import command_path
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.settings import Settings
from tempoconf.store.records import AuditEntry, LockRecord, VersionInfo
from tempoconf.temporal.names import WORKFLOW_TYPE, rollout_workflow_id

if TYPE_CHECKING:
    # Both imported where used: a command loads the one its mode needs (each a tenth of a second
    # or more of start-up).
    import httpx
    from temporalio.client import Client

__all__ = [
    "AlreadyRunning",
    "ApiBackend",
    "CommandRefused",
    "DirectBackend",
    "Ending",
    "LockBusy",
    "OperatorBackend",
    "Prepared",
    "ViewUnavailable",
    "api_mode",
    "failure_message",
    "operator_backend",
]

RPC_TIMEOUT = timedelta(seconds=15)
HTTP_TIMEOUT_SECONDS = 30.0
# How often a waiting command asks the API whether the rollout ended.
RESULT_POLL_SECONDS = 1.0


_Record = TypeVar("_Record")

# What `prepare` answers: the domain's preview, under the name the commands use.
Prepared = RolloutPreview


@dataclass(frozen=True)
class Ending:
    """How a rollout ended: its result, or why it ended without one."""

    result: dict[str, Any] | None = None
    failure: str = ""


class LockBusy(Exception):
    def __init__(self, lock: LockRecord) -> None:
        super().__init__(lock.workflow_id)
        self.lock = lock


class AlreadyRunning(Exception):
    """The workflow id is taken by a running workflow."""


class CommandRefused(Exception):
    """The rollout refused the command; the message says so in the operator's words."""


class ViewUnavailable(Exception):
    """Temporal could not tell the rollout's state (`kind` as in SnapshotUnavailable, or
    `unavailable`: the API could not reach Temporal)."""

    def __init__(self, workflow_id: str, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.workflow_id = workflow_id
        self.kind = kind
        self.detail = detail


class OperatorBackend(Protocol):
    async def get_schema(self, namespace: str, path: str) -> Any | None: ...
    async def set_schema(self, namespace: str, path: str, schema: Any, *, reason: str) -> None: ...
    async def get_stable(self, namespace: str, path: str) -> VersionRecord | None: ...
    async def list_versions(self, namespace: str, path: str) -> list[VersionInfo]: ...
    async def history(self, namespace: str, path: str, *, limit: int) -> list[AuditEntry]: ...
    async def prepare(self, raw: Any) -> Prepared:
        """Raises InvalidRequestError with every problem."""
        ...

    async def recent_clients(
        self, namespace: str, path: str, *, since: timedelta
    ) -> list[KnownClient]: ...
    async def client_rows(
        self,
        namespace: str,
        path: str,
        *,
        since: timedelta,
        version: str | None,
        not_applied: bool,
    ) -> list[ClientApplied]:
        """`tempoconf clients`: the clients seen since then, with what each applied."""
        ...

    async def start(self, raw: Any, prepared: Prepared, workflow_id: str) -> str | None:
        """Start the rollout; its run id. Raises LockBusy, AlreadyRunning."""
        ...

    async def wait_result(
        self, namespace: str, path: str, workflow_id: str, run_id: str | None
    ) -> Ending: ...
    async def command(
        self,
        namespace: str,
        path: str,
        explicit_id: str | None,
        name: str,
        reason: str,
        *,
        digest: str = "",
    ) -> tuple[str, dict[str, Any]]:
        """Send an operator command; the workflow id and its answer. Raises CommandRefused."""
        ...

    async def rollout_view(
        self, namespace: str, path: str, explicit_id: str | None
    ) -> tuple[RolloutSnapshot, StoreContext]:
        """The rollout `rollout status` shows. Raises ViewUnavailable."""
        ...

    # Freezes (tempoconf.gates.freezes): `tempoconf freeze start|end|list`.
    async def start_freeze(self, namespace: str, *, reason: str, until: datetime | None) -> Freeze:
        """Raises CommandRefused when the namespace is frozen already."""
        ...

    async def end_freeze(self, namespace: str, *, reason: str) -> EndedFreeze:
        """End it, then tell the rollouts waiting on a freeze to look again now
        (tempoconf.temporal.freeze_wakeup). Raises CommandRefused when the namespace is not frozen."""
        ...

    async def list_freezes(self, namespace: str | None, *, limit: int) -> list[Freeze]: ...


@dataclass(frozen=True)
class EndedFreeze:
    """A freeze just ended, and how many waiting rollouts were told so (None: they could not be,
    `not_told` says why; they see it at their next look, within 30 s)."""

    freeze: Freeze
    rollouts_told: int | None
    not_told: str = ""


def api_mode(settings: Settings) -> bool:
    """Both the API's URL and the admin token are set: the operator goes through the admin API.
    The URL alone keeps the direct mode (`get` and the hints use it already)."""
    return bool(settings.api_url and settings.admin_token)


@asynccontextmanager
async def operator_backend(settings: Settings) -> AsyncIterator[OperatorBackend]:
    if api_mode(settings):
        async with ApiBackend.connect(settings) as backend:
            yield backend
        return
    with ExitStack() as stack:
        yield DirectBackend(settings, stack)


def failure_message(error: BaseException) -> str:
    """The message of the first ApplicationError in a Temporal failure's causes."""
    from temporalio.exceptions import ApplicationError

    cause: BaseException | None = error
    while (
        cause is not None
        and cause.__cause__ is not None
        and not isinstance(cause, ApplicationError)
    ):
        cause = cause.__cause__
    return str(cause.message if isinstance(cause, ApplicationError) else cause)


# -- direct: the store and Temporal ------------------------------------------------------------
class DirectBackend:
    """The store (opened on first use, never created or migrated) and Temporal (connected on
    first use)."""

    def __init__(self, settings: Settings, stack: ExitStack) -> None:
        self._settings = settings
        self._stack = stack
        self._opened: Any = None
        self._client: Client | None = None

    def _store(self) -> Any:
        if self._opened is None:
            self._opened = self._stack.enter_context(open_store(self._settings))
        return self._opened

    async def _temporal(self) -> Client:
        if self._client is None:
            self._client = await connect_temporal(self._settings)
        return self._client

    async def get_schema(self, namespace: str, path: str) -> Any | None:
        return self._store().get_schema(namespace, path)

    async def set_schema(self, namespace: str, path: str, schema: Any, *, reason: str) -> None:
        self._store().set_schema(namespace, path, schema, actor=actor(), reason=reason)

    async def get_stable(self, namespace: str, path: str) -> VersionRecord | None:
        stable: VersionRecord | None = self._store().get_stable(namespace, path)
        return stable

    async def list_versions(self, namespace: str, path: str) -> list[VersionInfo]:
        return list(self._store().list_versions(namespace, path))

    async def history(self, namespace: str, path: str, *, limit: int) -> list[AuditEntry]:
        return list(self._store().history(namespace, path, limit=limit))

    async def prepare(self, raw: Any) -> Prepared:
        from tempoconf.rollout.validation import validate_rollout

        store = self._store()
        return preview_rollout(validate_rollout(raw, store), store)

    async def recent_clients(
        self, namespace: str, path: str, *, since: timedelta
    ) -> list[KnownClient]:
        from tempoconf.cli._clients import recent_clients

        return recent_clients(self._store(), namespace, path, since=datetime.now(UTC) - since)

    async def client_rows(
        self,
        namespace: str,
        path: str,
        *,
        since: timedelta,
        version: str | None,
        not_applied: bool,
    ) -> list[ClientApplied]:
        from tempoconf.gates.applied_gate import client_rows

        store = self._store()
        cutoff = store.now() - since
        return client_rows(
            store.recent_clients(namespace, path, since=cutoff),
            store.applied_states(namespace, path),
            since=cutoff,
            version=version,
            not_applied=not_applied,
        )

    async def start(self, raw: Any, prepared: Prepared, workflow_id: str) -> str | None:
        from temporalio.exceptions import WorkflowAlreadyStartedError

        client = await self._temporal()
        lock = prepared.lock
        if lock is not None and await _is_running(client, lock.workflow_id, lock.run_id):
            raise LockBusy(lock)
        try:
            handle = await client.start_workflow(
                WORKFLOW_TYPE,
                raw,
                id=workflow_id,
                task_queue=self._settings.task_queue,
                static_summary=prepared.summary(),
                static_details=prepared.details(),
            )
        except WorkflowAlreadyStartedError:
            raise AlreadyRunning(workflow_id) from None
        return handle.result_run_id

    async def wait_result(
        self, namespace: str, path: str, workflow_id: str, run_id: str | None
    ) -> Ending:
        from tempoconf.rollout.outcomes import await_rollout_ending

        client = await self._temporal()
        ending = await await_rollout_ending(client.get_workflow_handle(workflow_id, run_id=run_id))
        return Ending(result=ending.result_json, failure=ending.reason)

    async def command(
        self,
        namespace: str,
        path: str,
        explicit_id: str | None,
        name: str,
        reason: str,
        *,
        digest: str = "",
    ) -> tuple[str, dict[str, Any]]:
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.service import RPCError, RPCStatusCode

        workflow_id = explicit_id
        if not workflow_id:
            lock = self._store().get_lock(namespace, path)
            workflow_id = (
                lock.workflow_id if lock is not None else rollout_workflow_id(namespace, path)
            )
        client = await self._temporal()
        handle = client.get_workflow_handle(workflow_id)
        try:
            result = await handle.execute_update(
                name,
                {"reason": reason, "by": actor(), **({"digest": digest} if digest else {})},
                rpc_timeout=RPC_TIMEOUT,
            )
        except WorkflowUpdateFailedError as error:
            raise CommandRefused(
                f"{name} refused by the rollout {workflow_id!r}: {failure_message(error)}"
            ) from None
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                die(f"no running rollout of {namespace}/{path} (workflow id {workflow_id!r})")
            die(f"{name} could not be delivered to {workflow_id!r}: {error.message}")
        return workflow_id, dict(result)

    async def rollout_view(
        self, namespace: str, path: str, explicit_id: str | None
    ) -> tuple[RolloutSnapshot, StoreContext]:
        client = await self._temporal()
        store = self._store()
        workflow_id = find_workflow_id(store, namespace, path, explicit_id)
        try:
            snapshot = await read_snapshot(client, workflow_id)
        except SnapshotUnavailable as error:
            raise ViewUnavailable(workflow_id, error.kind, error.detail) from error
        version = (snapshot.progress or {}).get("version") or snapshot.result_version
        context = store_context(store, namespace, path, workflow_id, snapshot.run_id, version)
        return snapshot, context

    async def start_freeze(self, namespace: str, *, reason: str, until: datetime | None) -> Freeze:
        from tempoconf.store.store import FreezeActiveError

        try:
            freeze: Freeze = self._store().start_freeze(
                namespace, reason=reason, by=actor(), until=until
            )
        except (FreezeActiveError, ValueError) as error:
            raise CommandRefused(str(error)) from None
        return freeze

    async def end_freeze(self, namespace: str, *, reason: str) -> EndedFreeze:
        from tempoconf.store.store import NotFrozenError

        try:
            ended: Freeze = self._store().end_freeze(namespace, by=actor(), reason=reason)
        except NotFrozenError as error:
            raise CommandRefused(str(error)) from None
        return await self._tell_frozen_rollouts(ended)

    async def _tell_frozen_rollouts(self, ended: Freeze) -> EndedFreeze:
        """Best effort, bounded: the freeze has ended in the store whatever Temporal answers."""
        from temporalio.service import RPCError

        from tempoconf.temporal.connection import TemporalSettingsError, temporal_connection
        from tempoconf.temporal.freeze_wakeup import TELL_TIMEOUT_SECONDS, tell_frozen_rollouts

        try:
            connection = temporal_connection(self._settings)
        except TemporalSettingsError as error:
            return EndedFreeze(ended, None, str(error))
        try:
            async with asyncio.timeout(TELL_TIMEOUT_SECONDS):
                if self._client is None:
                    self._client = await connection.connect(identity=f"tempoconf:{actor()}")
                told = await tell_frozen_rollouts(self._client, ended.namespace)
        except TimeoutError:
            why = f"{connection.where} did not answer within {TELL_TIMEOUT_SECONDS:g}s"
        except RuntimeError as error:  # the SDK's failure to connect
            reason = connection.redact(str(error))
            why = f"{connection.where} is unreachable: {connection.diagnose(reason) or reason}"
        except RPCError as error:
            why = f"{connection.where}: {connection.redact(error.message)}"
        else:
            return EndedFreeze(ended, told)
        return EndedFreeze(ended, None, why)

    async def list_freezes(self, namespace: str | None, *, limit: int) -> list[Freeze]:
        return list(self._store().list_freezes(namespace, limit=limit))


async def _is_running(client: Client, workflow_id: str, run_id: str | None) -> bool:
    """Whether the lock's holder still runs. A rollout holds the lock under its first run's id for
    its whole life: a run that continued as new runs on as a later run of its chain (as the
    prepare activity judges it, so a start it would refuse is refused here, not started)."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    try:
        description = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        if description.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
            return description.status == WorkflowExecutionStatus.RUNNING
        latest = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    chain = latest.raw_description.workflow_execution_info.first_run_id
    return latest.status == WorkflowExecutionStatus.RUNNING and chain == run_id


# -- API mode: the admin API over HTTP ---------------------------------------------------------
class ApiBackend:
    """The admin API (`/v1/admin/...`) with the admin token: nothing else is touched."""

    def __init__(self, settings: Settings, http: httpx.AsyncClient) -> None:
        self._base = settings.resolved_api_url
        self._http = http

    @classmethod
    @asynccontextmanager
    async def connect(cls, settings: Settings) -> AsyncIterator[ApiBackend]:
        import httpx

        headers = {"Authorization": f"Bearer {settings.admin_token}"}
        async with httpx.AsyncClient(
            base_url=settings.resolved_api_url, headers=headers, timeout=HTTP_TIMEOUT_SECONDS
        ) as http:
            yield cls(settings, http)

    # -- the exchange ------------------------------------------------------------------------
    async def _call(
        self,
        method: str,
        url: str,
        *,
        namespace: str | None = None,
        params: dict[str, str] | None = None,
        body: Any = None,
        expected: tuple[int, ...] = (200,),
    ) -> httpx.Response:
        """The response when its status is one of `expected`; every other answer ends the
        command with a message naming the setting to fix."""
        import httpx

        query = dict(params or {})
        if namespace is not None:
            query["namespace"] = namespace
        try:
            response = await self._http.request(method, url, params=query or None, json=body)
        except httpx.HTTPError as error:
            die(
                f"cannot reach the admin API at {self._base}: {error or type(error).__name__}\n"
                "Set TEMPOCONF_API_URL (or --api-url) to the address of `tempoconf api`."
            )
        if response.status_code in expected:
            return response
        if response.status_code in (401, 403):
            die(
                f"the admin API at {self._base} refused the admin token "
                f"({response.status_code}: {_error_text(response)}).\n"
                "Set TEMPOCONF_ADMIN_TOKEN to the token the API was started with."
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
            body={"schema": schema, "reason": reason, "by": actor()},
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

    async def recent_clients(
        self, namespace: str, path: str, *, since: timedelta
    ) -> list[KnownClient]:
        response = await self._call(
            "GET",
            f"/v1/admin/clients/{path}",
            namespace=namespace,
            params={"since_seconds": f"{since.total_seconds():g}"},
        )
        return [
            KnownClient(item["client"], item["channel"], dict(item["labels"]))
            for item in response.json()["clients"]
        ]

    async def client_rows(
        self,
        namespace: str,
        path: str,
        *,
        since: timedelta,
        version: str | None,
        not_applied: bool,
    ) -> list[ClientApplied]:
        params = {"since_seconds": f"{since.total_seconds():g}"}
        if version is not None:
            params["version"] = version
        if not_applied:
            params["not_applied"] = "true"
        response = await self._call(
            "GET", f"/v1/admin/clients/{path}", namespace=namespace, params=params
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
            raise InvalidRequestError([Problem(p["pointer"], p["message"]) for p in problems])
        if "already has a running rollout" in _error_text(response):
            again = await self.prepare(raw)
            if again.lock is not None:
                raise LockBusy(again.lock)
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

    async def command(
        self,
        namespace: str,
        path: str,
        explicit_id: str | None,
        name: str,
        reason: str,
        *,
        digest: str = "",
    ) -> tuple[str, dict[str, Any]]:
        response = await self._call(
            "POST",
            command_path(path, name),
            namespace=namespace,
            params={"workflow_id": explicit_id} if explicit_id else None,
            # No `by`: the API names the caller (a named token's name; else "api"), and refuses
            # a `by` that differs from a named token's.
            body={"reason": reason, **({"digest": digest} if digest else {})},
            expected=(200, 403, 404, 409, 502),
        )
        if response.status_code in (403, 409):
            raise CommandRefused(_error_text(response))
        if response.status_code != 200:
            die(_error_text(response))  # the same words as the direct mode's
        answer = dict(response.json())
        return str(answer.pop("workflow_id")), answer

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
        if workflow.get("error_kind"):
            kind = str(workflow["error_kind"])
            detail = str(workflow.get("error_detail") or workflow.get("error") or "")
            if kind == "unavailable":
                detail = f"the admin API at {self._base} answered: {detail}"
            raise ViewUnavailable(workflow_id, kind, detail)
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
        found = answer.get("context") or {}
        context = StoreContext(
            started_by=found.get("started_by", ""),
            started_at=_when(found["started_at"]) if found.get("started_at") else None,
            start_reason=found.get("start_reason", ""),
            author=found.get("author", ""),
            commit=found.get("commit", ""),
            message=found.get("message", ""),
            stable=found.get("stable"),
        )
        return snapshot, context

    async def start_freeze(self, namespace: str, *, reason: str, until: datetime | None) -> Freeze:
        body = {
            "namespace": namespace,
            "reason": reason,
            "until": until.isoformat() if until is not None else None,
            "by": actor(),
        }
        response = await self._call("POST", "/v1/admin/freezes", body=body, expected=(201, 409))
        if response.status_code == 409:
            raise CommandRefused(_error_text(response))
        return _freeze(response.json())

    async def end_freeze(self, namespace: str, *, reason: str) -> EndedFreeze:
        response = await self._call(
            "POST",
            f"/v1/admin/freezes/{namespace}:end",
            body={"reason": reason, "by": actor()},
            expected=(200, 404),
        )
        if response.status_code == 404:
            raise CommandRefused(_error_text(response))
        answer = response.json()
        freeze = _freeze({key: value for key, value in answer.items() if key not in _END_ONLY})
        if "rollouts_told" not in answer:  # an API older than this CLI ends it and tells nobody
            return EndedFreeze(freeze, None, f"the API at {self._base} does not tell them")
        return EndedFreeze(freeze, answer["rollouts_told"], answer["not_told"])

    async def list_freezes(self, namespace: str | None, *, limit: int) -> list[Freeze]:
        params = {"limit": str(limit), **({"namespace": namespace} if namespace else {})}
        response = await self._call("GET", "/v1/admin/freezes", params=params)
        return [_freeze(item) for item in response.json()["freezes"]]

    async def _state(self, namespace: str, path: str, workflow_id: str) -> dict[str, Any]:
        response = await self._call(
            "GET",
            f"/v1/admin/rollouts/{path}",
            namespace=namespace,
            params={"workflow_id": workflow_id},
        )
        workflow: dict[str, Any] = response.json()["workflow"]
        return workflow


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


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _decode(kind: type[_Record], item: dict[str, Any]) -> _Record:
    """A record the store hands out, from its JSON answer (ISO times parsed; keys the record does
    not have, such as an answer's links, ignored)."""
    from pydantic import TypeAdapter

    return TypeAdapter(kind).validate_python(item)
