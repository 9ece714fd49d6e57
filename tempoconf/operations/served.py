"""What is served in some namespaces, read at once: every config the store knows (its stable
version, its schema's digest, its lock) and the namespaces' active freezes. Configs as code
(`tempoconf diff|apply DIR`) compare a directory with it: one read, not one per config."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tempoconf.gates.freezes import Freeze
from tempoconf.store.records import ServedConfig

if TYPE_CHECKING:
    from tempoconf.store.store import Store

__all__ = ["ServedState", "served_state"]


@dataclass(frozen=True)
class ServedState:
    """What is served in some namespaces: every known config, and the namespaces' active freezes."""

    configs: list[ServedConfig]
    """Sorted by (namespace, path)."""
    freezes: list[Freeze]
    """Only those active now, of the namespaces asked (all when None), by namespace."""


async def served_state(store: Store, namespaces: Sequence[str] | None) -> ServedState:
    """The configs and active freezes of `namespaces` (None: every namespace)."""
    asked = None if namespaces is None else list(namespaces)
    configs = await asyncio.to_thread(store.served_configs, asked)
    freezes = await asyncio.to_thread(store.active_freezes, asked)
    return ServedState(configs=configs, freezes=freezes)
