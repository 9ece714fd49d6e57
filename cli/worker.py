"""The Temporal worker of tempoconf: `ConfigRollout` and its activities on one task queue.

With a deployment name (`TEMPOCONF_DEPLOYMENT_NAME`) the worker is a version of a Worker
Deployment (Temporal's Worker Versioning) whose workflows are AUTO_UPGRADE: a running rollout
moves to the deployment's current version at its next workflow task, and every change of what the
workflow does goes behind `workflow.patched` (docs/how-to/upgrades.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import logging
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest
from temporalio.client import Client
from temporalio.common import (
    SearchAttributeIndexedValueType,
    VersioningBehavior,
    WorkerDeploymentVersion,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    Worker,
    WorkerDeploymentConfig,
    WorkflowRunner,
)

from tempoconf.activities.abandoned import sweep_abandoned
from tempoconf.activities.applied import AppliedGateActivities
from tempoconf.activities.failures import OriginalErrorLogFilter, ShortFailures
from tempoconf.activities.gates import GateActivities
from tempoconf.activities.health import HealthCheckActivities, WatchClock
from tempoconf.activities.heartbeats import HEARTBEAT_THROTTLE, StoreHeartbeats
from tempoconf.activities.notify import NotifyActivities, WebhookFailureLogFilter
from tempoconf.activities.rollout import RolloutActivities
from tempoconf.cli.devstack import temporal_command
from tempoconf.gates.freezes import FREEZE_RECHECK_SECONDS
from tempoconf.rollout.activity_io import INVALID_REQUEST_ERROR, ROLLOUT_RUNNING_ERROR
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tempoconf.temporal.names import SEARCH_ATTRIBUTES, registered_search_attributes
from tempoconf.workflows.rollout import ConfigRollout

__all__ = [
    "UserErrorLogFilter",
    "quiet_activity_logs",
    "WorkerSettingsError",
    "build_worker",
    "default_build_id",
    "deployment_config",
    "ensure_search_attributes",
    "make_version_current",
    "run_worker",
    "worker_activities",
    "worker_options",
]

log = logging.getLogger(__name__)

# Errors of the request, not of tempoconf: the workflow reports them to whoever started it, so the
# worker's console gets one line each, not a traceback.
USER_ERROR_TYPES = frozenset({INVALID_REQUEST_ERROR, ROLLOUT_RUNNING_ERROR})
# The SDK's key types (tempoconf.temporal) as the operator service names them.
_INDEXED_VALUE_TYPES = {
    SearchAttributeIndexedValueType.KEYWORD: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    SearchAttributeIndexedValueType.KEYWORD_LIST: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
}


class UserErrorLogFilter(logging.Filter):
    """Turns the SDK's "Completing activity as failed" + traceback into one line for a user error."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ApplicationError) and error.type in USER_ERROR_TYPES:
            details = getattr(record, "temporal_activity", None) or {}
            workflow = details.get("workflow_id", "?") if isinstance(details, dict) else "?"
            record.msg = "rollout %s refused (%s): %s"
            record.args = (workflow, error.type, " ".join(error.message.split()))
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_activity_logs() -> None:
    """One line, no traceback, for the activity failures that are no bug of tempoconf's."""
    activity_log = logging.getLogger("temporalio.activity")
    for kind in (UserErrorLogFilter, WebhookFailureLogFilter, OriginalErrorLogFilter):
        if not any(isinstance(existing, kind) for existing in activity_log.filters):
            activity_log.addFilter(kind())


async def ensure_search_attributes(client: Client, namespace: str) -> frozenset[str]:
    """Register the search attributes the workflow upserts, where the namespace allows it; the
    custom attributes the namespace has afterwards (empty when the cluster does not say).

    An upsert of an unregistered attribute makes the workflow task retry forever, so the worker
    does this before it polls. On a cluster that refuses (no operator rights), it logs and goes on:
    the four attributes every tempoconf registers are then the operator's to register, and
    `TempoconfPaths`, newer, is upserted only where the prepare step finds it registered.
    """
    try:
        existing = await registered_search_attributes(client, namespace)
        missing = {
            key.name: _INDEXED_VALUE_TYPES[key.indexed_value_type]
            for key in SEARCH_ATTRIBUTES
            if key.name not in existing
        }
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
            )
            log.info("registered search attributes %s in namespace %s", sorted(missing), namespace)
        return existing | missing.keys()
    except RPCError as error:
        log.warning("could not register search attributes in %s: %s", namespace, error)
        return frozenset()


class WorkerSettingsError(ValueError):
    """The worker's versioning settings do not fit together; the message says which and how."""


# What a build id covers: the workflow, the domain code it runs, and the activities and store
# behind it. Listed by package (not by folder) so an editable install and a wheel agree.
_BUILD_PACKAGES = ("tempoconf", "tempoconf.store", "tempoconf.workflows", "tempoconf.activities")


def default_build_id() -> str:
    """`<package version>-<12 hex digits>`: a hash of the source a worker runs, so a change of the
    code is a new build and the same code is the same build on every machine."""
    try:
        package_version = version("tempoconf")
    except PackageNotFoundError:  # a source tree that was never installed
        package_version = "0"
    digest = hashlib.sha256()
    for package in _BUILD_PACKAGES:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for source in sorted(Path(folder).glob("*.py")):
                digest.update(f"{package}/{source.name}\0".encode())
                digest.update(source.read_bytes())
    return f"{package_version}-{digest.hexdigest()[:12]}"


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker's Worker Deployment version, or None for an unversioned worker (no deployment
    name: `tempoconf dev` and every worker before versioning was turned on)."""
    name = settings.deployment_name
    if name is None:
        if settings.build_id is not None:
            raise WorkerSettingsError(
                f"build id {settings.build_id!r} (TEMPOCONF_BUILD_ID or --build-id) needs a "
                "deployment name: set TEMPOCONF_DEPLOYMENT_NAME (or --deployment-name) too, or "
                "neither for an unversioned worker"
            )
        return None
    if "." in name or not name.strip():
        raise WorkerSettingsError(
            f"deployment name {name!r} (TEMPOCONF_DEPLOYMENT_NAME or --deployment-name) must be "
            "non-empty and contain no '.': Temporal writes a version as <deployment>.<build id>"
        )
    build_id = settings.build_id or default_build_id()
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build_id),
        use_worker_versioning=True,
        # The worker's default, not `@workflow.defn(versioning_behavior=...)`: the server refuses
        # a workflow that declares a behaviour from an unversioned worker (`tempoconf dev`, tests).
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )


def worker_activities(
    client: Client,
    store: Store,
    *,
    continue_as_new_after_events: int = 0,
    health_clock: WatchClock | None = None,
    freeze_recheck_seconds: float = FREEZE_RECHECK_SECONDS,
    search_attributes: frozenset[str] | None = None,
) -> list[Callable[..., Any]]:
    """Every activity of a rollout; they print steering commands with the address of `client`
    and the Temporal CLI as typed here, so they run as printed.

    `continue_as_new_after_events` bounds a run's history below the server's own suggestion (0:
    the server's); `health_clock` schedules the hold's interval checks (None: the system clock);
    `search_attributes`: those the namespace has (ensure_search_attributes; None: not known, the
    prepare step asks)."""
    rollout = RolloutActivities(
        store,
        temporal_cli=temporal_command(),
        temporal_address=client.service_client.config.target_host,
        continue_as_new_after_events=continue_as_new_after_events,
        search_attributes=search_attributes,
    )
    return [
        *rollout.activities(),
        *HealthCheckActivities(store, clock=health_clock).activities(),
        *NotifyActivities().activities(),
        *GateActivities(store, recheck_seconds=freeze_recheck_seconds).activities(),
        *AppliedGateActivities(store).activities(),
    ]


WORKFLOW_CACHE_SIZE = 1000
"""Runs kept in the worker's workflow cache (sticky queue): a task of a cached run replays nothing.
For a while the worker kept none, because SDK Core (temporalio 1.35.0) can replay a fired timer
for a query at the time of an older task and the cache then kept what that replay decided (a
second hold timer, then a nondeterminism error: bench/findings/README.md). The workflow no longer
reads a clock older than a timer that fired (`ConfigRollout._clock`), so the cache is safe
again, and without it every task replayed its run's history: ten times the worker's CPU per
rollout in the soak (bench/README.md). A run beyond this many is evicted and replays once."""


def worker_options() -> dict[str, Any]:
    """The `Worker` settings of every tempoconf worker beyond its workflows and activities
    (bench/bench_rollouts.py gives its no-op floor the very same)."""
    return {
        # ConfigRollout runs outside the SDK's workflow sandbox. The sandbox re-imports the
        # workflow's module for every run and enters itself again for every payload's
        # serialization context and every activation: with 200 concurrent rollouts that was about
        # a quarter of the worker's Python time, and their workflow tasks took three times as
        # long (bench/README.md). What it checks, that the workflow code makes no non-deterministic
        # call, is checked in the tests instead: every saved history replays inside the sandbox,
        # and rollouts run in it live (tests/workflows/test_sandbox.py).
        "workflow_runner": UnsandboxedWorkflowRunner(),
        # Unexpected activity errors reach Temporal short and readable (activities.failures);
        # store activities heartbeat, so a lost worker costs seconds (activities.heartbeats).
        "interceptors": [ShortFailures(), StoreHeartbeats()],
        "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
        "max_cached_workflows": WORKFLOW_CACHE_SIZE,
    }


def build_worker(
    client: Client,
    store: Store,
    *,
    task_queue: str,
    deployment: WorkerDeploymentConfig | None = None,
    workflows: Sequence[type] = (ConfigRollout,),
    continue_as_new_after_events: int = 0,
    health_clock: WatchClock | None = None,
    freeze_recheck_seconds: float = FREEZE_RECHECK_SECONDS,
    workflow_runner: WorkflowRunner | None = None,
    search_attributes: frozenset[str] | None = None,
) -> Worker:
    """The worker: unversioned, or the `deployment` version given (`continue_as_new_after_events`
    to `freeze_recheck_seconds` and `search_attributes`: see `worker_activities`;
    `workflow_runner` replaces the worker's own, as the tests that run rollouts inside the
    sandbox do)."""
    options = worker_options()
    if workflow_runner is not None:
        options["workflow_runner"] = workflow_runner
    return Worker(
        client,
        task_queue=task_queue,
        workflows=workflows,
        activities=worker_activities(
            client,
            store,
            continue_as_new_after_events=continue_as_new_after_events,
            health_clock=health_clock,
            freeze_recheck_seconds=freeze_recheck_seconds,
            search_attributes=search_attributes,
        ),
        deployment_config=deployment,
        **options,
    )


async def make_version_current(
    client: Client, version: WorkerDeploymentVersion, *, timeout: float = 30.0
) -> None:
    """Make `version` its deployment's current version (`temporal worker deployment
    set-current-version`), waiting for its worker's first poll, which registers it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace,
                    deployment_name=version.deployment_name,
                    build_id=version.build_id,
                    identity=client.identity,
                )
            )
            return
        except RPCError as error:
            # Not found / no pollers yet: the worker has not polled; anything else is a real error.
            retry = error.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)
            if not retry or loop.time() >= deadline:
                raise
        await asyncio.sleep(0.2)


async def run_worker(
    settings: Settings, store: Store, client: Client, *, make_current: bool = False
) -> None:
    """Register search attributes, then run the worker until cancelled. A versioned worker with
    `make_current` (the dev stack) makes its version current once it polls. Beside it, the sweep
    that ends rollouts whose workflow ended without its own end (activities.abandoned)."""
    quiet_activity_logs()
    deployment = deployment_config(settings)
    registered = await ensure_search_attributes(client, client.namespace)
    worker = build_worker(
        client,
        store,
        task_queue=settings.task_queue,
        deployment=deployment,
        search_attributes=registered,
    )
    log.info(
        "worker polling task queue %s on %s%s",
        settings.task_queue,
        settings.resolved_temporal_address,
        f" as version {deployment.version.to_canonical_string()}" if deployment else "",
    )
    sweep = asyncio.create_task(
        sweep_abandoned(client, store, interval=settings.sweep_interval), name="tempoconf-sweep"
    )
    running = asyncio.create_task(worker.run())
    try:
        if deployment is not None and make_current:
            await make_version_current(client, deployment.version)
            log.info("version %s is current", deployment.version.to_canonical_string())
        await running
    finally:
        for task in (running, sweep):
            task.cancel()
        for task in (running, sweep):
            with contextlib.suppress(asyncio.CancelledError):
                await task
