"""Helpers of the client tests: store writes (as the rollout activities make them) and polling."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from tempoconf.client import METRIC_NAME
from tempoconf.resolution import VersionRecord
from tempoconf.store.store import Store
from tests.api.helpers import ACTOR, NS, make_stable

if TYPE_CHECKING:
    from tests.client.live_api import LiveApi

PATH = "myproject/server_config"


def stable_served(live_api: LiveApi, value: Any, path: str = PATH) -> VersionRecord:
    """Make `value` stable and wait until the API serves it (its snapshot poll lags a little)."""
    record = make_stable(live_api.store, path, value)
    live_api.wait_served(path, record.version)
    return record


def revert(store: Store, path: str = PATH, *, run_id: str = "run-1") -> None:
    """Halt the rollout of `run_id`: every client is back on stable."""
    store.revert(
        NS,
        path,
        run_id=run_id,
        workflow_id=f"rollout:{NS}/{path}",
        actor=ACTOR,
        reason="test halt",
        outcome="halted",
        event_key=f"revert:{uuid.uuid4()}",
    )


def promote(store: Store, version: str, path: str = PATH, *, run_id: str = "run-1") -> None:
    store.promote(
        NS,
        path,
        run_id=run_id,
        workflow_id=f"rollout:{NS}/{path}",
        version=version,
        actor=ACTOR,
        reason="test promote",
        event_key=f"promote:{uuid.uuid4()}",
    )


def version_series(registry: CollectorRegistry) -> list[dict[str, str]]:
    """The label sets of every `tempoconf_agent_config_version` sample with value 1."""
    found = []
    for family in registry.collect():
        if family.name == METRIC_NAME:
            for sample in family.samples:
                assert sample.value == 1
                found.append(dict(sample.labels))
    return found
