"""The clients seen on a config recently (polls or reports), with the version each last applied:
`tempoconf clients`, the plan's reach, `GET /v1/admin/clients/{path}`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from tempoconf.gates.applied_gate import ClientApplied, client_rows

if TYPE_CHECKING:
    from tempoconf.store.store import Store

__all__ = ["ClientsQuery", "SeenClients", "seen_clients"]


@dataclass(frozen=True)
class ClientsQuery:
    namespace: str
    path: str
    since: timedelta
    """How far back: the clients seen in the last `since`."""
    version: str | None = None
    """Only those served this version (or that reported applying it)."""
    not_applied: bool = False
    """With `version`: only those whose last applied version is not it (a stage's stragglers)."""


@dataclass(frozen=True)
class SeenClients:
    since: datetime
    """The store's now, less the lookback asked."""
    clients: list[ClientApplied]


async def seen_clients(store: Store, query: ClientsQuery) -> SeenClients:
    """The clients `query` asks for, sorted by client id."""
    namespace, path = query.namespace, query.path

    def read() -> SeenClients:
        cutoff = store.now() - query.since
        seen = store.recent_clients(namespace, path, since=cutoff)
        applied = store.applied_states(namespace, path)
        rows = client_rows(
            seen, applied, since=cutoff, version=query.version, not_applied=query.not_applied
        )
        return SeenClients(cutoff, rows)

    return await asyncio.to_thread(read)
