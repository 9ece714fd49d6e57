"""Where the operator commands read and act: the store and Temporal directly (`DirectBackend`, a
thin transport over tempoconf.operations), or the admin API over HTTP (`ApiBackend`,
cli/_api_backend.py: the same operations behind the API's routes) when TEMPOCONF_API_URL (or
--api-url) is set with a token: TEMPOCONF_API_TOKEN_COMMAND, TEMPOCONF_API_TOKEN or
TEMPOCONF_ADMIN_TOKEN (cli/_api_token.py, in that order), so an operator needs neither database
credentials nor access to Temporal. Both answer with the same records and raise the operations'
errors; the commands format them with the same code, so the output is the same in either mode."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import ExitStack, asynccontextmanager
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from tempoconf.cli._api_token import token_variable
from tempoconf.cli._common import actor, connect_temporal, die, open_store
from tempoconf.cli._operator_records import CommandRefused, Ending, Prepared, ViewUnavailable
from tempoconf.gates.applied_gate import ClientApplied
from tempoconf.gates.freezes import Freeze
from tempoconf.operations.clients import ClientsQuery
from tempoconf.operations.errors import OperationError, Unavailable
from tempoconf.operations.freezes import EndedFreeze
from tempoconf.operations.served import ServedState
from tempoconf.operations.start import AlreadyRunning, LockBusy
from tempoconf.operations.steer import CommandSent, OperatorCommandInput
from tempoconf.operations.view import RolloutSnapshot, StoreContext
from tempoconf.resolution import VersionRecord
from tempoconf.settings import Settings
from tempoconf.store.records import AuditEntry, VersionInfo

if TYPE_CHECKING:
    # Imported where used: a command loads the one its mode needs (each a tenth of a second or
    # more of start-up).
    from temporalio.client import Client


__all__ = [
    "AlreadyRunning",
    "ClientsQuery",
    "CommandRefused",
    "DirectBackend",
    "EndedFreeze",
    "Ending",
    "LockBusy",
    "OperatorBackend",
    "Prepared",
    "OperatorCommandInput",
    "ServedState",
    "ViewUnavailable",
    "api_mode",
    "operator_backend",
]


class OperatorBackend(Protocol):
    """What the operator commands do. Raises the operations' errors (tempoconf.operations.errors);
    those a command does not handle end it with their message (`operator_backend`)."""

    async def get_schema(self, namespace: str, path: str) -> Any | None: ...
    async def set_schema(self, namespace: str, path: str, schema: Any, *, reason: str) -> None: ...
    async def get_stable(self, namespace: str, path: str) -> VersionRecord | None: ...
    async def list_versions(self, namespace: str, path: str) -> list[VersionInfo]: ...
    async def history(self, namespace: str, path: str, *, limit: int) -> list[AuditEntry]: ...
    async def prepare(self, raw: Any) -> Prepared:
        """Raises InvalidRequestError with every problem."""
        ...

    async def client_rows(self, query: ClientsQuery) -> list[ClientApplied]:
        """The clients seen on a config, with what each applied (`tempoconf clients`, the plan's
        reach)."""
        ...

    async def start(self, raw: Any, prepared: Prepared, workflow_id: str) -> str | None:
        """Start the rollout; its run id. Raises LockBusy, AlreadyRunning."""
        ...

    async def wait_result(
        self, namespace: str, path: str, workflow_id: str, run_id: str | None
    ) -> Ending: ...
    async def command(self, command: OperatorCommandInput) -> CommandSent:
        """Send an operator command (its `by` left empty: this mode names the caller). Raises
        Refused (the rollout refused it), NotFound, Undelivered."""
        ...

    async def rollout_view(
        self, namespace: str, path: str, explicit_id: str | None
    ) -> tuple[RolloutSnapshot, StoreContext]:
        """The rollout `rollout status` shows. Raises ViewUnavailable."""
        ...

    # Freezes (tempoconf.gates.freezes): `tempoconf freeze start|end|list`.
    async def start_freeze(self, namespace: str, *, reason: str, until: datetime | None) -> Freeze:
        """Raises Conflict when the namespace is frozen already."""
        ...

    async def end_freeze(self, namespace: str, *, reason: str) -> EndedFreeze:
        """End it, then tell the rollouts waiting on a freeze to look again now
        (tempoconf.temporal.freeze_wakeup). Raises NotFound when the namespace is not frozen."""
        ...

    async def list_freezes(self, namespace: str | None, *, limit: int) -> list[Freeze]: ...

    # Configs as code: `tempoconf diff|apply DIR`.
    async def served_state(self, namespaces: Sequence[str] | None) -> ServedState:
        """Every config the store knows in `namespaces` (None: every namespace), with its stable
        version, schema digest and lock, and their active freezes: one read, whatever the
        number of configs."""
        ...


def api_mode(settings: Settings) -> bool:
    """The API's URL and a token (or the command that prints one, not run here) are set: the
    operator goes through the admin API. The URL alone keeps the direct mode (`get` and the hints
    use it already)."""
    return bool(settings.api_url and token_variable(settings))


@asynccontextmanager
async def operator_backend(settings: Settings) -> AsyncIterator[OperatorBackend]:
    """The backend of this mode; an operation's error the command leaves unhandled ends it with
    the error's message (exit 1)."""
    try:
        if api_mode(settings):
            from tempoconf.cli._api_backend import ApiBackend

            async with ApiBackend.connect(settings) as backend:
                yield backend
            return
        with ExitStack() as stack:
            yield DirectBackend(settings, stack)
    except OperationError as error:
        die(error.message)


# -- direct: the store and Temporal ------------------------------------------------------------
class _DirectTemporal:
    """Temporal as the direct mode reaches it (the operations' TemporalAccess): connected on first
    use. A failure to connect ends the command saying what to check, unless `quiet`: then it is
    Unavailable (a freeze's end, which tells the rollouts only as a courtesy)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: Client | None = None
        self.quiet = False

    @property
    def where(self) -> str:
        from tempoconf.temporal.connection import TemporalSettingsError, temporal_connection

        try:
            return temporal_connection(self._settings).where
        except TemporalSettingsError:
            s = self._settings
            return f"Temporal at {s.resolved_temporal_address} (namespace {s.temporal_namespace})"

    def redact(self, text: str) -> str:
        from tempoconf.temporal.connection import TemporalSettingsError, temporal_connection

        try:
            return temporal_connection(self._settings).redact(text)
        except TemporalSettingsError:
            return text

    async def client(self) -> Client:
        if self._client is None:
            self._client = await (self._connect_quietly() if self.quiet else self._connect())
        return self._client

    async def _connect(self) -> Client:
        return await connect_temporal(self._settings)

    async def _connect_quietly(self) -> Client:
        from tempoconf.temporal.connection import TemporalSettingsError, temporal_connection

        try:
            connection = temporal_connection(self._settings)
        except TemporalSettingsError as error:
            raise Unavailable(str(error)) from None
        try:
            return await connection.connect(identity=f"tempoconf:{actor()}")
        except RuntimeError as error:  # the SDK's failure to connect
            reason = connection.redact(str(error))
            why = connection.diagnose(reason) or reason
            raise Unavailable(f"{connection.where} is unreachable: {why}") from None


class DirectBackend:
    """The operations over the store (opened on first use, never created or migrated) and
    Temporal (connected on first use)."""

    def __init__(self, settings: Settings, stack: ExitStack) -> None:
        self._settings = settings
        self._stack = stack
        self._opened: Any = None
        self._temporal = _DirectTemporal(settings)

    def _store(self) -> Any:
        if self._opened is None:
            self._opened = self._stack.enter_context(open_store(self._settings))
        return self._opened

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
        from tempoconf.operations.start import plan_rollout

        return await plan_rollout(self._store(), raw)

    async def client_rows(self, query: ClientsQuery) -> list[ClientApplied]:
        from tempoconf.operations.clients import seen_clients

        return (await seen_clients(self._store(), query)).clients

    async def start(self, raw: Any, prepared: Prepared, workflow_id: str) -> str | None:
        from tempoconf.operations.start import start_rollout

        started = await start_rollout(
            self._temporal,
            raw,
            prepared,
            task_queue=self._settings.task_queue,
            workflow_id=workflow_id,
        )
        return started.run_id

    async def wait_result(
        self, namespace: str, path: str, workflow_id: str, run_id: str | None
    ) -> Ending:
        from tempoconf.rollout.outcomes import await_rollout_ending

        client = await self._temporal.client()
        ending = await await_rollout_ending(client.get_workflow_handle(workflow_id, run_id=run_id))
        return Ending(result=ending.result_json, failure=ending.reason)

    async def command(self, command: OperatorCommandInput) -> CommandSent:
        from tempoconf.operations.steer import steer_rollout

        return await steer_rollout(
            self._store, self._temporal, replace(command, by=command.by or actor())
        )

    async def rollout_view(
        self, namespace: str, path: str, explicit_id: str | None
    ) -> tuple[RolloutSnapshot, StoreContext]:
        from tempoconf.operations.state import read_rollout_state

        await self._temporal.client()  # without Temporal, say so before looking for a store
        state = await read_rollout_state(self._store, self._temporal, namespace, path, explicit_id)
        if state.snapshot is None or state.context is None:
            unreadable = state.unreadable
            assert unreadable is not None
            raise ViewUnavailable(
                state.workflow_id,
                unreadable.kind,
                unreadable.detail,
                lock=state.lock,
                rollout=state.rollout,
                context=state.context,
            )
        return state.snapshot, state.context

    async def start_freeze(self, namespace: str, *, reason: str, until: datetime | None) -> Freeze:
        from tempoconf.operations.freezes import start_freeze

        return await start_freeze(self._store(), namespace, reason=reason, by=actor(), until=until)

    async def end_freeze(self, namespace: str, *, reason: str) -> EndedFreeze:
        from tempoconf.operations.freezes import end_freeze

        self._temporal.quiet = True  # the freeze ends whatever Temporal answers
        return await end_freeze(self._store(), self._temporal, namespace, reason=reason, by=actor())

    async def list_freezes(self, namespace: str | None, *, limit: int) -> list[Freeze]:
        from tempoconf.operations.freezes import list_freezes

        return await list_freezes(self._store(), namespace, limit=limit)

    async def served_state(self, namespaces: Sequence[str] | None) -> ServedState:
        from tempoconf.operations.served import served_state

        return await served_state(self._store(), namespaces)
