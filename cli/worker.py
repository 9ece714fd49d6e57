"""The Temporal worker of tempoconf: `ConfigRollout` and its activities on one task queue."""

from __future__ import annotations

import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker

from tempoconf.activities.health import HealthCheckActivities, WatchClock
from tempoconf.activities.notify import NotifyActivities
from tempoconf.activities.rollout import RolloutActivities
from tempoconf.activity_io import INVALID_REQUEST_ERROR, ROLLOUT_RUNNING_ERROR
from tempoconf.cli.devstack import temporal_command
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tempoconf.temporal import SEARCH_ATTRIBUTES
from tempoconf.workflows.rollout import ConfigRollout

__all__ = ["UserErrorLogFilter", "build_worker", "ensure_search_attributes", "run_worker"]

log = logging.getLogger(__name__)

# Errors of the request, not of tempoconf: the workflow reports them to whoever started it, so the
# worker's console gets one line each, not a traceback.
USER_ERROR_TYPES = frozenset({INVALID_REQUEST_ERROR, ROLLOUT_RUNNING_ERROR})


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


def _quiet_user_errors() -> None:
    activity_log = logging.getLogger("temporalio.activity")
    if not any(isinstance(existing, UserErrorLogFilter) for existing in activity_log.filters):
        activity_log.addFilter(UserErrorLogFilter())


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register the Keyword search attributes the workflow upserts, where the namespace allows it.

    An upsert of an unregistered attribute makes the workflow task retry forever, so the worker
    does this before it polls. On a cluster that refuses (no operator rights), it logs and goes on.
    """
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        missing = {
            key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
            for key in SEARCH_ATTRIBUTES
            if key.name not in existing.custom_attributes
        }
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
            )
            log.info("registered search attributes %s in namespace %s", sorted(missing), namespace)
    except RPCError as error:
        log.warning("could not register search attributes in %s: %s", namespace, error)


def build_worker(
    client: Client,
    store: Store,
    *,
    task_queue: str,
    continue_as_new_after_events: int = 0,
    health_clock: WatchClock | None = None,
) -> Worker:
    """The worker; the rollouts it runs print their steering commands with the address of `client`
    and the Temporal CLI as typed here, so they run as printed.

    `continue_as_new_after_events` bounds a run's history below the server's own suggestion (0:
    the server's); `health_clock` schedules the hold's interval checks (None: the system clock)."""
    rollout = RolloutActivities(
        store,
        temporal_cli=temporal_command(),
        temporal_address=client.service_client.config.target_host,
        continue_as_new_after_events=continue_as_new_after_events,
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[ConfigRollout],
        activities=[
            *rollout.activities(),
            *HealthCheckActivities(store, clock=health_clock).activities(),
            *NotifyActivities().activities(),
        ],
    )


async def run_worker(settings: Settings, store: Store, client: Client) -> None:
    """Register search attributes, then run the worker until cancelled."""
    _quiet_user_errors()
    await ensure_search_attributes(client, client.namespace)
    worker = build_worker(client, store, task_queue=settings.task_queue)
    log.info(
        "worker polling task queue %s on %s",
        settings.task_queue,
        settings.resolved_temporal_address,
    )
    await worker.run()
