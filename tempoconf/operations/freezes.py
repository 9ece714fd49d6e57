"""Freeze a namespace, end its freeze (and tell the rollouts waiting on one to look again now:
tempoconf.temporal.freeze_wakeup), list the freezes (tempoconf.gates.freezes)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from tempoconf.gates.freezes import Freeze
from tempoconf.operations.errors import Conflict, NotFound, Unavailable
from tempoconf.operations.temporal_access import TemporalAccess

if TYPE_CHECKING:
    from tempoconf.store.store import Store

__all__ = ["EndedFreeze", "end_freeze", "list_freezes", "start_freeze"]


@dataclass(frozen=True)
class EndedFreeze:
    """A freeze just ended, and how many waiting rollouts were told so (None: they could not be,
    `not_told` says why; they see it at their next look, within 30 s)."""

    freeze: Freeze
    rollouts_told: int | None
    not_told: str = ""


async def start_freeze(
    store: Store, namespace: str, *, reason: str, by: str, until: datetime | None
) -> Freeze:
    """Conflict when the namespace is frozen already (or `until` is not in the future)."""
    from tempoconf.store.store import FreezeActiveError

    try:
        return await asyncio.to_thread(
            store.start_freeze, namespace, reason=reason, by=by, until=until
        )
    except (FreezeActiveError, ValueError) as error:
        raise Conflict(str(error)) from None


async def end_freeze(
    store: Store, temporal: TemporalAccess, namespace: str, *, reason: str, by: str
) -> EndedFreeze:
    """End it, then tell the waiting rollouts. NotFound when the namespace is not frozen."""
    from tempoconf.store.store import NotFrozenError

    try:
        ended = await asyncio.to_thread(store.end_freeze, namespace, by=by, reason=reason)
    except NotFrozenError as error:
        raise NotFound(str(error)) from None
    return await _tell_frozen_rollouts(temporal, ended)


async def _tell_frozen_rollouts(temporal: TemporalAccess, ended: Freeze) -> EndedFreeze:
    """Best effort, bounded: the freeze has ended in the store whatever Temporal answers."""
    from temporalio.service import RPCError

    from tempoconf.temporal.freeze_wakeup import TELL_TIMEOUT_SECONDS, tell_frozen_rollouts

    try:
        async with asyncio.timeout(TELL_TIMEOUT_SECONDS):
            told = await tell_frozen_rollouts(await temporal.client(), ended.namespace)
    except TimeoutError:
        why = f"{temporal.where} did not answer within {TELL_TIMEOUT_SECONDS:g}s"
    except Unavailable as error:
        why = error.message
    except RPCError as error:
        why = f"{temporal.where}: {temporal.redact(error.message)}"
    else:
        return EndedFreeze(ended, told)
    return EndedFreeze(ended, None, why)


async def list_freezes(store: Store, namespace: str | None, *, limit: int) -> list[Freeze]:
    """Newest first, active and ended (of every namespace when `namespace` is None)."""
    return list(await asyncio.to_thread(store.list_freezes, namespace, limit=limit))
