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

__all__ = ["SeenClients", "seen_clients"]


@dataclass(frozen=True)
class SeenClients:
    since: datetime
    """The store's now, less the lookback asked."""
    clients: list[ClientApplied]


async def seen_clients(
    store: Store,
    namespace: str,
    path: str,
    *,
    since: timedelta,
    version: str | None = None,
    not_applied: bool = False,
) -> SeenClients:
    """The clients seen in the last `since`; with `version`, those served it (`not_applied`: that
    have not applied it)."""

    def read() -> SeenClients:
        cutoff = store.now() - since
        seen = store.recent_clients(namespace, path, since=cutoff)
        applied = store.applied_states(namespace, path)
        rows = client_rows(seen, applied, since=cutoff, version=version, not_applied=not_applied)
        return SeenClients(cutoff, rows)

    return await asyncio.to_thread(read)
