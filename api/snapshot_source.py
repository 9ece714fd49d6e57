"""`SnapshotSource`: what the answering code reads config snapshots from.

The origin API reads them from the store (`SnapshotCache`, api/snapshots.py); an edge relay
(`tempoconf edge`) from its upstream's resolution bundles (`BundleSnapshots`, api/edge_snapshots.py).
Polls, multi-path reads, OFREP, metrics and health answer the same way over either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from tempoconf.resolution import ConfigSnapshot

__all__ = ["SnapshotSource"]


class SnapshotSource(Protocol):
    """Config snapshots in memory, and an event per config set when its snapshot changes.

    `get`, `snapshots` raise `SnapshotsNotLoadedError` before the source has loaded once.
    """

    @property
    def loaded(self) -> bool:
        """True once the source has loaded (or reached its upstream) at least once."""
        ...

    @property
    def age(self) -> float | None:
        """Seconds since the snapshots held were last known current (None before the first load)."""
        ...

    @property
    def revision(self) -> int | None:
        """The revision of what is held (the store's; an edge counts its own changes)."""
        ...

    @property
    def last_error(self) -> BaseException | None:
        """Why the last refresh failed; None once one succeeds."""
        ...

    def snapshots(self) -> Mapping[tuple[str, str], ConfigSnapshot]: ...

    def get(self, namespace: str, path: str) -> ConfigSnapshot | None: ...

    def changed_for(self, namespace: str, path: str) -> asyncio.Event:
        """Set by the next change of this config's snapshot: take it before reading."""
        ...

    def on_change(self, listener: Callable[[Sequence[tuple[str, str]]], None]) -> None:
        """Call `listener(changed_keys)` right after snapshots change (synchronously: a reader
        that saw the old snapshot and then registered a waiter is found by it)."""
        ...

    def release_waiters(self) -> None:
        """Set every event handed out (shutdown)."""
        ...

    def running(self) -> AbstractAsyncContextManager[Any]:
        """Load and follow changes while inside (an ASGI lifespan)."""
        ...
