"""The rollout's side effects: every store write of `ConfigRollout` happens here.

Each write is idempotent (keyed by run id and step), so an activity retried after a crash writes
nothing twice. Store calls are synchronous; they run in a thread so the worker's loop stays free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from tempoconf.activities.abandoned import end_run, holder_ending
from tempoconf.activities.prepare import begin_run, prepared_plan
from tempoconf.activities.run_events import record_run_event
from tempoconf.problems import InvalidRequestError, Problem
from tempoconf.resolution import PublishedStage
from tempoconf.rollout.activity_io import (
    INVALID_REQUEST_ERROR,
    PREPARE_ACTIVITY,
    PROMOTE_ACTIVITY,
    PUBLISH_STAGE_ACTIVITY,
    RECORD_TRANSITION_ACTIVITY,
    RENEW_LEASES_ACTIVITY,
    REVERT_ACTIVITY,
    ROLLOUT_RUNNING_ERROR,
    PrepareInput,
    PromoteInput,
    PublishStageInput,
    PublishStageResult,
    RecordTransitionsInput,
    RenewLeasesInput,
    RenewLeasesResult,
    RevertInput,
    RevertResult,
)
from tempoconf.rollout.plan import RolloutPlan
from tempoconf.rollout.progress import NOTE, Transition
from tempoconf.rollout.request import RolloutRequest
from tempoconf.rollout.validation import ValidatedRollout, validate_rollout
from tempoconf.store.records import LockRecord, RunConfig, StageLease
from tempoconf.store.store import LockHeldError, Store
from tempoconf.temporal.lock_holder import lock_holder_running
from tempoconf.temporal.names import PATHS_ATTRIBUTE_NAME, registered_search_attributes

__all__ = ["RolloutActivities"]

LOCK_LOST_ERROR = "RolloutLockLost"
UNKNOWN_STARTER = "unknown"


_Params = ParamSpec("_Params")


async def _holding_lock(
    step: Callable[_Params, object], *args: _Params.args, **kwargs: _Params.kwargs
) -> None:
    """Run a step of the run on the store (in a thread); a lock the run lost fails the activity."""
    try:
        await asyncio.to_thread(step, *args, **kwargs)
    except LockHeldError as error:
        # Another run owns the config now: writing would overwrite its work. Retrying can't help.
        raise ApplicationError(
            f"lost the config's lock: {error}", type=LOCK_LOST_ERROR, non_retryable=True
        ) from None


def _invalid(problems: list[Problem]) -> ApplicationError:
    error = InvalidRequestError(problems)
    return ApplicationError(
        str(error),
        [asdict(problem) for problem in problems],
        type=INVALID_REQUEST_ERROR,
        non_retryable=True,
    )


def _own_metadata(request: RolloutRequest) -> dict[str, str]:
    """The request's author, commit and message (those given), for its `rollout.started` row."""
    return {
        key: text
        for key, text in (
            ("author", request.author),
            ("commit", request.commit),
            ("message", request.message),
        )
        if text
    }


class RolloutActivities:
    """Activities bound to one store; register `activities()` with the worker.

    `temporal_cli` and `temporal_address` say how a person reaches this worker's Temporal server
    (`.venv/bin/temporal`, `127.0.0.1:7233`): the workflow prints its steering commands with them
    ("" leaves the address out, for the CLI's own default). `search_attributes`: the custom
    search attributes the worker found registered at its start (None: not looked).
    """

    def __init__(
        self,
        store: Store,
        *,
        temporal_cli: str = "temporal",
        temporal_address: str = "",
        continue_as_new_after_events: int = 0,
        search_attributes: frozenset[str] | None = None,
    ) -> None:
        self._store = store
        self._temporal_cli = temporal_cli
        self._temporal_address = temporal_address
        self._continue_as_new_after_events = continue_as_new_after_events
        self._paths_attribute_found = PATHS_ATTRIBUTE_NAME in (search_attributes or ())

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.prepare_rollout,
            self.publish_stage,
            self.renew_leases,
            self.record_transition,
            self.promote_version,
            self.revert_rollout,
        ]

    @activity.defn(name=PREPARE_ACTIVITY)
    async def prepare_rollout(self, input: PrepareInput) -> RolloutPlan:
        """Validate everything first (nothing is written for a bad request), then take the lock of
        every config (one config's, or each of a changeset's: all or none), then store each new
        version and begin each config's rollout, in one transaction."""
        try:
            validated = await asyncio.to_thread(validate_rollout, input.request, self._store)
        except InvalidRequestError as error:
            raise _invalid(error.problems) from None
        request = validated.request
        # The change is told against the stable version this rollout starts from.
        stables = [
            await asyncio.to_thread(self._store.get_stable, change.namespace, change.path)
            for change in validated.configs()
        ]
        await self._take_locks(input, validated)
        await asyncio.to_thread(
            begin_run,
            self._store,
            validated,
            workflow_id=input.workflow_id,
            run_id=input.run_id,
            # Who started it as the API verified it, else who the request says wrote it.
            actor=request.started_by or request.author or await self._starter(input),
            # This rollout's own metadata: the version keeps its first publisher's (never rewritten).
            details=_own_metadata(request),
        )
        return replace(
            prepared_plan(validated, stables),
            paths_attribute=await self._paths_attribute(),
            temporal_cli=self._temporal_cli,
            temporal_address=self._temporal_address,
            temporal_namespace=activity.info().workflow_namespace or "",
            continue_as_new_after_events=self._continue_as_new_after_events,
        )

    async def _take_locks(self, input: PrepareInput, validated: ValidatedRollout) -> None:
        """Every config's lock in one transaction, or none. A config held by a running rollout
        refuses the rollout, naming the config and the holder. One held by a run that ended
        without cleanup (terminated, say) and not yet ended by the worker's sweep
        (activities.abandoned) is ended here, so its audit trail ends with how it ended, and its
        lock taken over atomically as the whole set is tried again."""
        changeset = bool(validated.changes)
        configs = validated.configs()
        versions = {(change.namespace, change.path): change.version for change in configs}
        replace_ids: dict[tuple[str, str], str] = {}
        reclaimed: LockRecord | None = None
        for _ in range(len(configs) + 1):
            try:
                await asyncio.to_thread(
                    self._store.acquire_locks,
                    versions,
                    workflow_id=input.workflow_id,
                    run_id=input.run_id,
                    replace=replace_ids,
                )
                break
            except LockHeldError as held:
                holder = held.holder
                if await self._is_running(holder):
                    raise ApplicationError(
                        f"changeset refused, no lock taken: {held}" if changeset else str(held),
                        type=ROLLOUT_RUNNING_ERROR,
                        non_retryable=True,
                    ) from None
                activity.logger.warning(
                    "reclaiming the lock of %s/%s from ended run %s",
                    holder.namespace,
                    holder.path,
                    holder.run_id,
                )
                await self._end_abandoned(holder, changeset=changeset)
                replace_ids[(holder.namespace, holder.path)] = holder.run_id
                reclaimed = holder
        else:
            locks = "the changeset's locks" if changeset else "the config's lock"
            raise ApplicationError(f"{locks} kept changing hands; trying again")
        if reclaimed is not None and not changeset:
            await asyncio.to_thread(
                self._store.record_event,
                reclaimed.namespace,
                reclaimed.path,
                action="lock.reclaimed",
                actor="workflow",
                reason=(
                    f"the holder {reclaimed.workflow_id} (run {reclaimed.run_id}) "
                    "is no longer running"
                ),
                version=validated.version,
                workflow_id=input.workflow_id,
                event_key=f"{input.run_id}:reclaim",
            )

    async def _end_abandoned(self, holder: LockRecord, *, changeset: bool) -> None:
        """End the lock's ended holder as the worker's sweep would, keyed as its revert: a
        changeset's prepare keys it as the holder's run has it (one config's or a changeset's),
        a single config's prepare as a single config's revert."""
        ending = await holder_ending(activity.client(), holder)
        if ending is None:
            return
        several = False
        if changeset:
            configs = await asyncio.to_thread(
                self._store.run_configs, holder.namespace, holder.path, holder.run_id
            )
            several = len(configs) > 1
        await asyncio.to_thread(end_run, self._store, holder, ending, changeset=several)

    async def _paths_attribute(self) -> bool:
        """Whether the workflow may upsert `TempoconfPaths`: only where it is registered, since an
        unregistered one fails every workflow task of the rollout forever (a deployment upgraded
        from before it, on a cluster where the worker cannot register it). Found at the worker's
        start, else asked of the server, again at each prepare until it is there."""
        if not self._paths_attribute_found:
            try:
                registered = await registered_search_attributes(
                    activity.client(), activity.info().workflow_namespace or "default"
                )
            except (RPCError, RuntimeError) as error:  # RuntimeError: no worker's client
                activity.logger.warning(
                    "cannot list the search attributes of %s: %s; %s is not set",
                    activity.info().workflow_namespace,
                    error,
                    PATHS_ATTRIBUTE_NAME,
                )
                return False
            self._paths_attribute_found = PATHS_ATTRIBUTE_NAME in registered
        return self._paths_attribute_found

    async def _starter(self, input: PrepareInput) -> str:
        """Who started the run when the request names no author: the identity Temporal recorded
        (`temporal-cli:alice@laptop`, `tempoconf:alice@laptop`), as `rollout status` shows it."""
        try:
            handle = activity.client().get_workflow_handle(input.workflow_id, run_id=input.run_id)
            async for event in handle.fetch_history_events(page_size=1):
                return event.workflow_execution_started_event_attributes.identity or UNKNOWN_STARTER
        except (RPCError, RuntimeError) as error:  # RuntimeError: run without a worker's client
            # Only the audit row's actor depends on it: not worth failing the rollout over.
            activity.logger.warning("cannot read who started %s: %s", input.workflow_id, error)
        return UNKNOWN_STARTER

    async def _is_running(self, holder: LockRecord) -> bool:
        """Whether the lock's holder still runs (a later run of its chain counts)."""
        return await lock_holder_running(activity.client(), holder.workflow_id, holder.run_id)

    @activity.defn(name=PUBLISH_STAGE_ACTIVITY)
    async def publish_stage(self, input: PublishStageInput) -> PublishStageResult:
        now = datetime.now(UTC)
        stage = input.stage
        expires_at = now + timedelta(seconds=stage.expiration_seconds)
        published = PublishedStage(
            index=stage.index,
            name=stage.name,
            channel=stage.channel,
            percentile=stage.percentile,
            labels=dict(stage.labels),
            expires_at=expires_at,
            bucket_key=input.plan.bucket_key,
        )
        await _holding_lock(
            self._store.publish_stage,
            input.plan.namespace,
            input.plan.path,
            run_id=input.run_id,
            stage=published,
            actor=input.actor,
            event_key=f"{input.run_id}:publish:{stage.index}",
        )
        return PublishStageResult(expires_at=expires_at.isoformat(), published_at=now.isoformat())

    @activity.defn(name=RENEW_LEASES_ACTIVITY)
    async def renew_leases(self, input: RenewLeasesInput) -> RenewLeasesResult:
        now = datetime.now(UTC)
        leases = [
            StageLease(index=int(index), expires_at=now + timedelta(seconds=seconds))
            for index, seconds in input.expirations.items()
        ]
        await asyncio.to_thread(
            self._store.renew_leases,
            input.namespace,
            input.path,
            run_id=input.run_id,
            leases=leases,
        )
        return RenewLeasesResult(
            expires_at={lease.index: lease.expires_at.isoformat() for lease in leases}
        )

    @activity.defn(name=RECORD_TRANSITION_ACTIVITY)
    async def record_transition(self, input: RecordTransitionsInput) -> None:
        def write() -> None:
            # Every config of a changeset has the changeset's transitions in its own history.
            configs = (
                [RunConfig(input.namespace, input.path, input.version)]
                if input.single_config
                else self._store.run_configs(input.namespace, input.path, input.run_id)
            )
            changeset = len(configs) > 1
            for sequence, transition in zip(input.sequences, input.transitions, strict=True):
                # A note (an operator command that left the state as it was) is no transition.
                note = transition.kind == NOTE or transition.from_state == transition.to_state
                for config in configs:
                    record_run_event(
                        self._store,
                        config,
                        changeset=changeset,
                        key=f"{input.run_id}:transition:{sequence}",
                        action=_action(transition, note=note),
                        actor=transition.by,
                        reason=transition.reason,
                        version=input.version,
                        workflow_id=input.workflow_id,
                        details={
                            "from": transition.from_state,
                            "stage": transition.stage,
                            "at": transition.at,
                            # an approval's identity, digest and reason (tempoconf.rollout.approvals)
                            **transition.details,
                        },
                    )

        await asyncio.to_thread(write)

    @activity.defn(name=PROMOTE_ACTIVITY)
    async def promote_version(self, input: PromoteInput) -> None:
        await _holding_lock(
            self._store.promote,
            input.plan.namespace,
            input.plan.path,
            run_id=input.run_id,
            workflow_id=input.workflow_id,
            version=input.plan.version,
            actor=input.actor,
            reason=input.reason,
            event_key=f"{input.run_id}:promote",
        )

    @activity.defn(name=REVERT_ACTIVITY)
    async def revert_rollout(self, input: RevertInput) -> RevertResult:
        """Clear the run's stages and lock; answer what clients fall back to (the stable version,
        or none)."""
        await asyncio.to_thread(
            self._store.revert,
            input.namespace,
            input.path,
            run_id=input.run_id,
            workflow_id=input.workflow_id,
            actor=input.actor,
            reason=input.reason,
            outcome=input.outcome,
            event_key=f"{input.run_id}:revert",
            audit_always=input.audit_always,
        )
        stable = await asyncio.to_thread(self._store.get_stable, input.namespace, input.path)
        return RevertResult(stable_version=stable.version if stable is not None else None)


def _action(transition: Transition, *, note: bool) -> str:
    """The audit row's action: the state entered; for a note, a judged health check's verdict
    (`rollout.verdict`) or an operator's command."""
    if not note:
        return f"rollout.{transition.to_state}"
    return "rollout.verdict" if "verdict" in transition.details else "rollout.command"
