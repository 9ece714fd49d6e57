"""`ChangeFeed`: which configs changed after a revision (`GET /v1/changes`), so that an edge
relay follows one feed upstream instead of one long-poll per config it serves.

The feed keeps, in memory, the last changes its snapshot source reported (`on_change`: the
revision the source then held, and the keys it swapped in), bounded in entries and in keys. It
knows every change after its `floor`: a caller whose `since` is older (the ring dropped it, or
this process started after it) or newer than the revision held (the origin restarted on another
database, or another replica answered before) is told to `reset`: refetch all it serves.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tempoconf.api.answers import ChangedConfigAnswer, ChangesAnswer
from tempoconf.api.snapshot_source import SnapshotSource

__all__ = [
    "CHANGES_ROUTE",
    "ChangeFeed",
    "ChangeFeedCollector",
    "FeedAnswer",
    "RING_ENTRIES",
    "RING_KEYS",
]

CHANGES_ROUTE = "/v1/changes"
RING_ENTRIES = 4096
"""Changes (one per snapshot refresh that changed something) the feed remembers at most."""
RING_KEYS = 200_000
"""Changed configs, summed over the entries, the feed remembers at most (a refresh may change
every config at once)."""

CATCH_UP = 2.0
"""Seconds a caller whose `since` is ahead of this process waits for it to catch up before it is
told to reset: another replica (or worker) of the same store may have told it a revision this one
loads a moment later; a reset would refetch everything."""
_CATCH_UP_CHECK = 0.05

Key = tuple[str, str]


@dataclass(frozen=True)
class FeedAnswer:
    """What a caller is told: the revision to ask `since` next, and the configs changed after its
    `since` (None: reset, refetch everything served)."""

    revision: int
    changes: tuple[Key, ...] | None

    def body(self) -> dict[str, Any]:
        if self.changes is None:
            return ChangesAnswer(revision=self.revision, reset=True).body()
        changes = [ChangedConfigAnswer(namespace=ns, path=path) for ns, path in self.changes]
        return ChangesAnswer(revision=self.revision, changes=changes, reset=False).body()


class ChangeFeed:
    """The changes `source` reported (see the module's docstring); long-polled by `wait`."""

    def __init__(
        self, source: SnapshotSource, *, entries: int = RING_ENTRIES, keys: int = RING_KEYS
    ) -> None:
        self._source = source
        self._max_entries = entries
        self._max_keys = keys
        self._ring: deque[tuple[int, tuple[Key, ...]]] = deque()
        self._keys_held = 0
        self._floor: int | None = None
        """Every change after this revision is in the ring (None: nothing seen yet)."""
        self._wake = asyncio.Event()
        self._closing = False
        self.waiting = 0
        """Callers waiting for a change right now."""
        self.wakeups = 0
        """Waiting callers woken by a change (answered then, or waiting on: not theirs)."""
        self.catching_up = 0
        """Callers whose `since` is ahead of this process, waiting for it to be reached."""
        source.on_change(self._changed)

    @property
    def floor(self) -> int | None:
        return self._floor

    def _changed(self, keys: Sequence[Key]) -> None:
        revision = self._source.revision
        if revision is None:
            return
        latest = self._ring[-1][0] if self._ring else self._floor
        if latest is None or revision < latest:
            # The first load (nothing to compare it with), or a store that went back in time (a
            # restored backup): what the ring holds is another history.
            self._ring.clear()
            self._keys_held = 0
            self._floor = revision
        else:
            self._ring.append((revision, tuple(keys)))
            self._keys_held += len(keys)
            while len(self._ring) > 1 and (
                len(self._ring) > self._max_entries or self._keys_held > self._max_keys
            ):
                dropped, old = self._ring.popleft()
                self._keys_held -= len(old)
                self._floor = dropped
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def read(self, since: int | None, wants: Callable[[str], bool]) -> FeedAnswer | None:
        """The answer for a caller at `since` who reads the namespaces `wants` says, now; None
        when nothing it reads changed after `since` yet. The source must be loaded."""
        current = self._source.revision
        assert current is not None, "read before the snapshots were loaded"
        if self._floor is None:
            self._floor = current  # from now on every change is recorded
        if since is None or since < self._floor or since > current:
            return FeedAnswer(current, None)
        changed: dict[Key, None] = {}
        for revision, keys in reversed(self._ring):
            if revision <= since:
                break
            for key in keys:
                if wants(key[0]):
                    changed[key] = None
        if not changed:
            return None
        return FeedAnswer(current, tuple(sorted(changed)))

    async def wait(
        self, since: int | None, wants: Callable[[str], bool], seconds: float
    ) -> FeedAnswer:
        """`read`, held up to `seconds` until it has something (then an empty answer at the
        current revision); shutdown (`close`) answers at once. A `since` ahead of this process
        is given up to CATCH_UP seconds (within `seconds`) to be reached before it resets."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        catch_up = min(deadline, loop.time() + CATCH_UP)
        if since is not None and since > (self._source.revision or 0):
            self.catching_up += 1
            try:
                while since > (self._source.revision or 0) and not self._closing:
                    # A revision may move with no config changed (no listener call): checked,
                    # not awaited.
                    if loop.time() >= catch_up:
                        break
                    await asyncio.sleep(_CATCH_UP_CHECK)
            finally:
                self.catching_up -= 1
        while True:
            answer = self.read(since, wants)
            if answer is not None:
                return answer
            remaining = deadline - loop.time()
            if remaining <= 0 or self._closing:
                current = self._source.revision
                assert current is not None
                return FeedAnswer(current, ())
            wake = self._wake
            self.waiting += 1
            try:
                async with asyncio.timeout(remaining):
                    await wake.wait()
                self.wakeups += 1
            except TimeoutError:
                pass
            finally:
                self.waiting -= 1

    def close(self) -> None:
        """Shutting down: every waiting caller answers now, and new ones at once."""
        self._closing = True
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()


class ChangeFeedCollector(Collector):
    """The feed's callers for /metrics."""

    def __init__(self, feed: ChangeFeed) -> None:
        self._feed = feed

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "tempoconf_api_change_feed_waiting",
            "Change feed long-polls (GET /v1/changes) waiting right now",
            value=self._feed.waiting,
        )
        yield CounterMetricFamily(
            "tempoconf_api_change_feed_wakeups",
            "Change feed long-polls woken by a change of the snapshots",
            value=self._feed.wakeups,
        )
