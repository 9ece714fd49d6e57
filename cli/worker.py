"""The Temporal worker of tempoconf: `ConfigRollout` and its activities on one task queue."""

from __future__ import annotations

import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.health import HealthCheckActivities
from activities.notify import NotifyActivities
from activities.rollout import RolloutActivities
from cli.devstack import temporal_command
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tempoconf.temporal import SEARCH_ATTRIBUTES
from workflows.rollout import ConfigRollout

__all__ = ["build_worker", "ensure_search_attributes", "run_worker"]

log = logging.getLogger(__name__)


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


def build_worker(client: Client, store: Store, *, task_queue: str) -> Worker:
    """The worker; the rollouts it runs print their steering commands with the address of `client`
    and the Temporal CLI as typed here, so they run as printed."""
    rollout = RolloutActivities(
        store, temporal_cli=temporal_command(), temporal_address=client.service_client.config.target_host
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[ConfigRollout],
        activities=[
            *rollout.activities(),
            *HealthCheckActivities(store).activities(),
            *NotifyActivities().activities(),
        ],
    )


async def run_worker(settings: Settings, store: Store, client: Client) -> None:
    """Register search attributes, then run the worker until cancelled."""
    await ensure_search_attributes(client, client.namespace)
    worker = build_worker(client, store, task_queue=settings.task_queue)
    log.info("worker polling task queue %s on %s", settings.task_queue, settings.resolved_temporal_address)
    await worker.run()
