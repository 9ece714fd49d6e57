"""Every config's snapshot, held in memory and refreshed when the store's revision moves: only
the configs the store's change log names are reloaded, every one on the first load (or when the
log cannot say what changed).

Polls are served from here, never by a store query per poll (docs/architecture.md, Data flow).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from types import MappingProxyType

from tempoconf.resolution import ConfigSnapshot
from tempoconf.store.records import SnapshotDelta
from tempoconf.store.store import Store

__all__ = ["DEFAULT_POLL_INTERVAL", "HeldSnapshots", "SnapshotCache", "SnapshotsNotLoadedError"]

DEFAULT_POLL_INTERVAL = 0.05
"""Seconds between two checks of `store.revision()` (one row: cheap)."""

logger = logging.getLogger(__name__)

_EMPTY: Mapping[tuple[str, str], ConfigSnapshot] = MappingProxyType({})


class SnapshotsNotLoadedError(RuntimeError):
    """The snapshots have never been loaded from the store (it has been unreachable so far)."""


class HeldSnapshots:
    """What every snapshot source does alike: hold the snapshots (swapped whole, read-only), hand
    out an event per config that its next change sets, and tell the listeners of each change.
    A subclass loads the snapshots, calls `_changed` right after it swaps them in, and says
    (`_require_loaded`) why there is nothing to read yet."""

    def __init__(self) -> None:
        self._snapshots: Mapping[tuple[str, str], ConfigSnapshot] = _EMPTY
        self._config_events: dict[tuple[str, str], asyncio.Event] = {}
        self._listeners: list[Callable[[Sequence[tuple[str, str]]], None]] = []

    def snapshots(self) -> Mapping[tuple[str, str], ConfigSnapshot]:
        """Every known config, keyed by (namespace, path); a read-only view."""
        self._require_loaded()
        return self._snapshots

    def get(self, namespace: str, path: str) -> ConfigSnapshot | None:
        """The snapshot of one config, or None if the source does not know it."""
        self._require_loaded()
        return self._snapshots.get((namespace, path))

    def changed_for(self, namespace: str, path: str) -> asyncio.Event:
        """The event the next change of this config's snapshot sets (its first load included).
        Take it *before* reading the snapshot, then wait on it."""
        key = (namespace, path)
        event = self._config_events.get(key)
        if event is None:
            event = self._config_events[key] = asyncio.Event()
        return event

    def on_change(self, listener: Callable[[Sequence[tuple[str, str]]], None]) -> None:
        """Call `listener(changed_keys)` after each change of some snapshots, right after they
        are swapped in (synchronously: a reader that saw the old snapshot and then registered
        somewhere is found by it)."""
        self._listeners.append(listener)

    def release_waiters(self) -> None:
        """Set every event handed out (shutdown: waiters answer now instead of at their deadline)."""
        events, self._config_events = self._config_events, {}
        for event in events.values():
            event.set()

    def _changed(self, keys: Sequence[tuple[str, str]]) -> None:
        """The snapshots of `keys` were just swapped in: set their events, tell the listeners."""
        for key in keys:
            event = self._config_events.pop(key, None)
            if event is not None:
                event.set()
        if keys:
            for listener in self._listeners:
                try:
                    listener(keys)
                except Exception:  # a bug there must not stop the snapshots' changes
                    logging.getLogger(type(self).__module__).exception(
                        "a snapshot change listener failed"
                    )

    def _require_loaded(self) -> None:
        """Raise SnapshotsNotLoadedError, saying why, while there is nothing to read yet."""
        raise NotImplementedError


class SnapshotCache(HeldSnapshots):
    """`store.load_snapshots_with_revision()` in memory, refreshed when `store.revision()` changes
    by `store.load_snapshots_since(revision held)`: the configs changed since, swapped into a new
    mapping; every snapshot is reloaded when that returns None (the cache fell behind the change
    log's retention, or the store is another one).

    `run()` (or `running()`) checks the revision every `poll_interval` seconds, or at once when
    `notify()` is called (PostgreSQL's LISTEN does); `refresh()` refreshes at once. The event
    `changed_for(namespace, path)` hands out is set by the next refresh that changes that config's
    snapshot, so a waiter that took it before reading the snapshot never misses a change.
    """

    def __init__(self, store: Store, *, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        super().__init__()
        self._store = store
        self._poll_interval = poll_interval
        self._revision: int | None = None
        self._wake = asyncio.Event()
        self._refresh_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.last_error: BaseException | None = None
        """The error of the last failed check or load; None once one succeeds."""
        self._confirmed_at: float | None = None
        """time.monotonic() when the held snapshots were last known to be the store's current ones."""

    # -- reading -------------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        """True once the snapshots have been loaded at least once."""
        return self._revision is not None

    @property
    def age(self) -> float | None:
        """Seconds since the held snapshots were last known current: loaded, or found unchanged by
        a revision check (None before the first load). It grows while the store is unreachable,
        and polls are then served from snapshots this old."""
        confirmed = self._confirmed_at
        return None if confirmed is None else max(0.0, time.monotonic() - confirmed)

    @property
    def revision(self) -> int | None:
        """The store revision the held snapshots were loaded at (None before the first load)."""
        return self._revision

    @property
    def poll_interval(self) -> float:
        """Seconds between two revision checks; may be changed while running."""
        return self._poll_interval

    @poll_interval.setter
    def poll_interval(self, seconds: float) -> None:
        self._poll_interval = seconds

    def notify(self, revision: int | None = None) -> None:
        """The store says it changed (at `revision`, when known): check it now, not at the next
        poll. Cheap and idempotent, so a burst of notifications costs one reload."""
        if revision is not None and self._revision is not None and revision <= self._revision:
            return
        self._wake.set()

    # -- loading -------------------------------------------------------------------------------
    async def refresh(self) -> int:
        """Bring the snapshots to the store's revision now (the changed ones, or every one);
        returns the revision loaded."""
        async with self._refresh_lock:
            began = time.monotonic()  # what was read is current as of the read's start
            revision, snapshots, changed_keys = await asyncio.to_thread(
                self._load, self._snapshots, self._revision
            )
            if snapshots is not self._snapshots:
                self._snapshots = MappingProxyType(snapshots)
            self._revision = revision
            self._confirmed_at = began
            self.last_error = None
            self._changed(changed_keys)
            return revision

    def _load(
        self, previous: Mapping[tuple[str, str], ConfigSnapshot], held: int | None
    ) -> tuple[int, Mapping[tuple[str, str], ConfigSnapshot], list[tuple[str, str]]]:
        """(In a thread.) The store's snapshots, reusing each unchanged one, and the changed keys:
        the configs changed since `held` (the revision of `previous`), or every one."""
        if held is not None:
            delta = self._store.load_snapshots_since(held)
            if delta is not None:
                return _apply(previous, delta)
            logger.info(
                "reloading every config snapshot: the store's change log cannot say what "
                "changed since revision %d",
                held,
            )
        with _collector_paused():
            # One consistent read: the revision recorded is exactly that of the snapshots held.
            revision, loaded = self._store.load_snapshots_with_revision()
            snapshots: dict[tuple[str, str], ConfigSnapshot] = {}
            changed_keys = []
            for key, snapshot in loaded.items():
                old = previous.get(key)
                if old is not None and old == snapshot:
                    # The same object as before, so whatever was derived from it stays valid.
                    snapshots[key] = old
                else:
                    snapshots[key] = snapshot
                    changed_keys.append(key)
        return revision, snapshots, changed_keys

    async def refresh_if_changed(self) -> bool:
        """Reload when the store's revision differs from the one held; True if it reloaded."""
        began = time.monotonic()
        revision = await asyncio.to_thread(self._store.revision)
        if revision == self._revision:
            self._confirmed_at = began
            self.last_error = None
            return False
        await self.refresh()
        return True

    async def run(self) -> None:
        """Check the revision every `poll_interval` seconds until cancelled (the first check
        after one interval: `start()` loads before it runs this).

        A failing store is logged once per outage and retried; the last snapshots stay served.
        """
        failing = self.last_error is not None
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.refresh_if_changed()
            except Exception as exc:  # the store may be down for a while: keep serving, keep trying
                if not failing:
                    logger.warning("cannot refresh config snapshots from the store: %s", exc)
                failing = True
                self.last_error = exc
            else:
                if failing:
                    logger.info("config snapshots load from the store again")
                failing = False

    async def start(self) -> None:
        """Load once (a failure is logged, not raised), then poll in a background task."""
        if self._task is not None:
            return
        try:
            await self.refresh()
        except Exception as exc:  # start serving anyway: the poller loads once the store is back
            logger.warning("cannot load config snapshots from the store: %s", exc)
            self.last_error = exc
        self._task = asyncio.create_task(self.run(), name="tempoconf-snapshot-cache")

    async def stop(self) -> None:
        """Stop polling (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[SnapshotCache]:
        """`start()` on entry, `stop()` on exit: the shape an ASGI lifespan wants."""
        await self.start()
        try:
            yield self
        finally:
            await self.stop()

    def _require_loaded(self) -> None:
        if self._revision is None:
            reason = f": {self.last_error}" if self.last_error is not None else ""
            raise SnapshotsNotLoadedError(f"config snapshots not loaded from the store yet{reason}")


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while every config's snapshot is built: each collection
    would scan the whole heap, which the load itself grows (at 100,000 configs, a second or more
    of a full load went to it). Reference counting frees all the while; the collector, if it was
    on, is back on after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _apply(
    previous: Mapping[tuple[str, str], ConfigSnapshot], delta: SnapshotDelta
) -> tuple[int, Mapping[tuple[str, str], ConfigSnapshot], list[tuple[str, str]]]:
    """`previous` with the snapshots of `delta` swapped in, and the keys whose snapshot differs.
    A new mapping (`previous` is read-only and shared with readers), or `previous` itself when no
    snapshot differs; an equal snapshot keeps its old object, so what was derived from it stays
    valid."""
    changed_keys = [key for key, snapshot in delta.changed.items() if previous.get(key) != snapshot]
    if not changed_keys:
        return delta.revision, previous, []
    # MappingProxyType.copy() copies the dict under it (C speed: ~0.1 ms for 10,000 configs).
    snapshots: dict[tuple[str, str], ConfigSnapshot] = (
        previous.copy() if isinstance(previous, MappingProxyType) else dict(previous)
    )
    for key in changed_keys:
        snapshot = delta.changed[key]
        if snapshot is None:
            del snapshots[key]
        else:
            snapshots[key] = snapshot
    return delta.revision, snapshots, changed_keys
