"""`PendingWrites`: what the API accepted and has not written to the store yet, kept in memory
until a flush writes it: clients seen polling, apply reports, and health reports received while
the store was down. A flush that cannot write (the store is down) puts its batch back, so nothing
accepted is lost to an outage; only a full buffer drops, and counts, what it cannot keep.

Keyed: a newer item of a key replaces the older one (the newest wins). Bounded: past `limit`
items the oldest are dropped and counted, so an outage under a flood costs bounded memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Generic, TypeVar

__all__ = ["PendingWrites", "flush_every"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

logger = logging.getLogger(__name__)


class PendingWrites(Generic[K, T]):
    """Items waiting for a store write, oldest first, one per key. A flush writes a `snapshot()`
    and then forgets what it wrote (`forget_written`): what it could not write stays, and so does
    an item that replaced one it wrote meanwhile. Not locked: one thread uses it at a time (the
    event loop's, or the flush's alone when nothing else adds)."""

    def __init__(self, limit: int) -> None:
        self._items: dict[K, T] = {}
        self.limit = limit
        self.dropped = 0
        """Items dropped because more than `limit` were pending (oldest first)."""
        self._dropped_told = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def full(self) -> bool:
        return len(self._items) >= self.limit

    def add(self, key: K, item: T) -> int:
        """Keep `item` as the newest of `key`; returns how many of the oldest items were dropped
        to stay within the limit."""
        self._items.pop(key, None)  # re-inserted: it is the newest now
        self._items[key] = item
        excess = len(self._items) - self.limit
        if excess <= 0:
            return 0
        for old in list(itertools.islice(self._items, excess)):
            del self._items[old]
        self.dropped += excess
        return excess

    def newly_dropped(self) -> int:
        """Items dropped since the last call: one log line per flush, not one per drop."""
        count, self._dropped_told = self.dropped - self._dropped_told, self.dropped
        return count

    def snapshot(self) -> dict[K, T]:
        """What is pending now, oldest first (a copy: adding goes on meanwhile)."""
        return dict(self._items)

    def forget_written(self, written: Mapping[K, T]) -> None:
        """Forget the items a flush wrote (or gave up on), unless a newer one replaced them."""
        items = self._items
        for key, item in written.items():
            if items.get(key) is item:
                del items[key]


async def flush_every(
    flush: Callable[[], Awaitable[object]], *, stop: asyncio.Event, interval: float, what: str
) -> None:
    """Call `flush` every `interval` seconds until `stop` is set, then once more.

    Stopped by an event, not by cancellation: a flush cut off mid-write would lose its batch."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        try:
            await flush()
        except Exception:  # a bug, not the store (each flush keeps what it could not write)
            logger.exception("cannot flush the %s", what)
