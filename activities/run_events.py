"""A run's own audit rows (its transitions, the freezes it passed) in each config it changes."""

from __future__ import annotations

from typing import Unpack

from tempoconf.rollout.activity_io import GatedConfig
from tempoconf.rollout.changesets import change_event_key
from tempoconf.store.records import AuditEvent, RunConfig
from tempoconf.store.store import Store

__all__ = ["record_run_event"]


def record_run_event(
    store: Store,
    config: RunConfig | GatedConfig,
    *,
    changeset: bool,
    key: str,
    **event: Unpack[AuditEvent],
) -> bool:
    """Record `event` in the audit log of one of the run's configs: a changeset's config with its
    own version, keyed `key` with the config's name (`change_event_key`); a single config's as
    given, keyed `key`. False (nothing written) when that key was recorded before."""
    if changeset:
        event["version"] = config.version
    event["event_key"] = change_event_key(key, config.namespace, config.path, changeset=changeset)
    return store.record_event(config.namespace, config.path, **event)
