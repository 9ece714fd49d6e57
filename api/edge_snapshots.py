"""`BundleSnapshots`: an edge relay's config snapshots, fed by its upstream's resolution bundles.

The edge serves the configs its clients ask for. A config asked for the first time is fetched once
(`GET /v1/bundles/{path}` on the upstream: an origin API or another edge) and then kept fresh by
ONE long-poll upstream, the change feed (`GET /v1/changes`, api/change_feed.py): each change that
names a served config fetches that config's bundle again (a few at once at most), and a `reset`
(the upstream restarted, or lost track of this edge's revision) fetches every served config again.
A config nobody asked for during `idle_after` seconds is no longer served. While the upstream is
unreachable the feed and the fetches retry with backoff and the snapshots held keep being served:
leases are in the snapshot, so resolution still stops serving a stage once its lease ends (by this
host's clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

import httpx

from tempoconf.api.change_feed import CHANGES_ROUTE
from tempoconf.api.snapshots import HeldSnapshots, SnapshotsNotLoadedError
from tempoconf.backoff import Backoff
from tempoconf.resolution import ConfigSnapshot
from tempoconf.resolution.bundles import BundleError, parse_bundle_body

__all__ = [
    "BundleSnapshots",
    "DEFAULT_FIRST_ANSWER_TIMEOUT",
    "DEFAULT_IDLE_AFTER",
    "FETCH_CONCURRENCY",
    "UPSTREAM_WAIT",
    "UpstreamUnavailableError",
]

DEFAULT_FIRST_ANSWER_TIMEOUT = 10.0
"""Seconds a client's first request for a config waits for the upstream's first answer."""
DEFAULT_IDLE_AFTER = 600.0
"""A config nobody asked the edge for during this many seconds is no longer served."""
UPSTREAM_WAIT = 30
"""Seconds of each long-poll of the upstream's change feed (the API accepts up to 60)."""
ABSENT_RECHECK = 5.0
"""Seconds between two asks for a config the upstream does not know (404): it may be created."""
MAX_WATCHES = 10_000
"""Configs served at once at most: a client naming ever new paths cannot make the edge fetch and
hold unbounded configs (the next one is answered 503)."""
FETCH_CONCURRENCY = 8
"""Bundle fetches upstream at once at most (a reset refetches every served config)."""
PROBE_INTERVAL = 5.0
"""Seconds between two checks of the upstream's /healthz (readiness with no config served)."""
_FETCH_TIMEOUT = 10.0
_HTTP_MARGIN = 15.0
"""A feed long-poll's read timeout: its wait plus this."""

logger = logging.getLogger(__name__)


class UpstreamUnavailableError(RuntimeError):
    """The upstream has not answered for a config yet (unreachable, or too slow)."""


class ChangeFeedError(ValueError):
    """The upstream's change feed answered something that is not a change feed answer."""


@dataclass(eq=False)
class _Served:
    """A config this edge serves, and how its last fetch went."""

    namespace: str
    path: str
    last_used: float
    created_at: float = field(default_factory=time.monotonic)
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by the first answer of the upstream (200 or 404)."""
    fetching: bool = False
    again: bool = False
    """A change came while a fetch was under way: fetch once more after it."""
    absent: bool = False
    """The upstream's last answer was 404."""
    failing_since: float | None = None
    confirmed_at: float | None = None
    error: BaseException | None = None


@dataclass
class _Feed:
    """The change feed upstream: where it is, and whether it answers."""

    since: int | None = None
    failing_since: float | None = None
    confirmed_at: float | None = None
    error: BaseException | None = None
    resets: int = 0


class BundleSnapshots(HeldSnapshots):
    """The `SnapshotSource` of an edge relay (see the module's docstring).

    `ensure(namespace, path)` serves this config (fetching it, if not yet) and waits, bounded, for
    its first answer; `get` and `snapshots` read only what is held.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        first_answer_timeout: float = DEFAULT_FIRST_ANSWER_TIMEOUT,
        idle_after: float = DEFAULT_IDLE_AFTER,
        upstream_wait: float = UPSTREAM_WAIT,
    ) -> None:
        super().__init__()
        self._http = http
        self._first_answer_timeout = first_answer_timeout
        self._idle_after = idle_after
        self._upstream_wait = upstream_wait
        self._served: dict[tuple[str, str], _Served] = {}
        # Microseconds since the epoch at start, then one more per change: a restarted edge
        # starts above anything it told before, so an edge behind it resets (change feed).
        self._revision = time.time_ns() // 1000
        self._feed = _Feed()
        self._fetch_slots = asyncio.Semaphore(FETCH_CONCURRENCY)
        self._fetches: set[asyncio.Task[None]] = set()
        self.fetch_counts: Counter[str] = Counter()
        """Bundle fetches upstream by outcome: ok, absent (404), failed."""
        self._probe_confirmed_at: float | None = None
        self._probe_error: BaseException | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._loaded = False

    # -- SnapshotSource --------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        """True once the upstream has answered at least once (read on every poll: a flag)."""
        return self._loaded

    @property
    def age(self) -> float | None:
        """0 while the feed and every fetch succeed; else seconds since the oldest failing one last
        had an answer (what its clients are served is at most that old)."""
        if not self.loaded:
            return None
        now = time.monotonic()
        ages = [0.0]
        if self._probe_error is not None and self._probe_confirmed_at is not None:
            ages.append(now - self._probe_confirmed_at)
        upstream: list[_Feed | _Served] = [self._feed, *self._served.values()]
        for part in upstream:
            if part.failing_since is not None:
                since = part.confirmed_at if part.confirmed_at is not None else part.failing_since
                ages.append(now - since)
        return max(ages)

    @property
    def revision(self) -> int | None:
        """Grows by one per config snapshot changed; starts at the microseconds since the epoch
        when the edge started (the edge has no store revision)."""
        return self._revision if self.loaded else None

    @property
    def last_error(self) -> BaseException | None:
        """Why the upstream could not be read, while it cannot (None when it can)."""
        if self._feed.failing_since is not None and self._feed.error is not None:
            return self._feed.error
        for served in self._served.values():
            if served.failing_since is not None and served.error is not None:
                return served.error
        return self._probe_error

    @property
    def watched(self) -> int:
        """How many configs are served (kept fresh by the change feed)."""
        return len(self._served)

    @property
    def feed_resets(self) -> int:
        """How many times the upstream's feed said reset (every served config fetched again)."""
        return self._feed.resets

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[BundleSnapshots]:
        """Follow the upstream's change feed, probe it and drop idle configs while inside; every
        fetch stops on exit."""
        self._tasks = [
            asyncio.create_task(self._follow(), name="tempoconf-edge-feed"),
            asyncio.create_task(self._probe(), name="tempoconf-edge-probe"),
            asyncio.create_task(self._drop_idle(), name="tempoconf-edge-idle"),
            asyncio.create_task(self._recheck_absent(), name="tempoconf-edge-absent"),
        ]
        try:
            yield self
        finally:
            tasks = self._tasks + list(self._fetches)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._served.clear()

    def stop_following(self) -> None:
        """The edge stops: its own watch of the upstream (the change feed's long-poll, the probe,
        the upkeep) ends now, not after the grace: the upstream is not held for an edge that is
        going away. What it holds is still served to the requests being answered."""
        for task in self._tasks:
            task.cancel()

    # -- serving ---------------------------------------------------------------------------------
    async def ensure(self, namespace: str, path: str) -> None:
        """Serve this config (fetch it, if not yet) and wait for the upstream's first answer on
        it, at most `first_answer_timeout` seconds; UpstreamUnavailableError if none came."""
        key = (namespace, path)
        served = self._served.get(key)
        now = time.monotonic()
        if served is None:
            if len(self._served) >= MAX_WATCHES:
                raise UpstreamUnavailableError(
                    f"this edge already serves {MAX_WATCHES} configs: config {path!r} in "
                    f"namespace {namespace!r} cannot be served until some go idle"
                )
            served = self._served[key] = _Served(namespace, path, last_used=now)
            self._fetch(served)
        else:
            served.last_used = now
        if served.answered.is_set():
            return
        if served.error is not None and not self._fresh(served, now):
            # The upstream failed this config before it ever answered: say so now, rather than
            # hold every request for the bound while its fetch backs off.
            raise UpstreamUnavailableError(
                f"the upstream has not answered for config {path!r} in namespace "
                f"{namespace!r} yet: {served.error}"
            )
        try:
            async with asyncio.timeout(self._first_answer_timeout):
                await served.answered.wait()
        except TimeoutError:
            reason = f": {served.error}" if served.error is not None else ""
            raise UpstreamUnavailableError(
                f"the upstream has not answered for config {path!r} in namespace "
                f"{namespace!r} yet{reason}"
            ) from None

    def _fresh(self, served: _Served, now: float) -> bool:
        """The config was first asked for less than the first-answer bound ago (its asker still
        waits)."""
        return now - served.created_at < self._first_answer_timeout

    def _fetch(self, served: _Served) -> None:
        """Fetch the config's bundle (again): at once, or after the fetch under way."""
        if served.fetching:
            served.again = True  # that fetch may have read the bundle before this change
            return
        served.fetching = True
        task = asyncio.create_task(
            self._fetching(served), name=f"tempoconf-edge-fetch {served.namespace}/{served.path}"
        )
        self._fetches.add(task)
        task.add_done_callback(self._fetches.discard)

    async def _fetching(self, served: _Served) -> None:
        """Fetch until one fetch started after the last change asked for has answered."""
        backoff = Backoff()
        try:
            while self._served.get((served.namespace, served.path)) is served:
                served.again = False
                try:
                    async with self._fetch_slots:
                        await self._fetch_once(served)
                except (httpx.HTTPError, UpstreamUnavailableError, BundleError) as exc:
                    # BundleError: a malformed bundle (it names the field); keep what is held,
                    # as for an unreachable upstream.
                    self.fetch_counts["failed"] += 1
                    if served.failing_since is None:
                        logger.warning("edge: cannot fetch %s upstream: %s", served.path, exc)
                        served.failing_since = time.monotonic()
                    served.error = exc
                    await asyncio.sleep(backoff.next())
                    continue
                if not served.again:
                    return
        finally:
            served.fetching = False

    async def _fetch_once(self, served: _Served) -> None:
        key = (served.namespace, served.path)
        url = f"/v1/bundles/{quote(served.path)}"
        response = await self._get(url, {"namespace": served.namespace}, _FETCH_TIMEOUT)
        snapshot: ConfigSnapshot | None = None
        if response.status_code == 200:
            snapshot = parse_bundle_body(response.content)
            if (snapshot.namespace, snapshot.path) != key:
                raise BundleError(
                    f"the upstream answered the bundle of {snapshot.path!r} in namespace "
                    f"{snapshot.namespace!r} for {served.path!r} in {served.namespace!r}"
                )
        elif response.status_code != 404:
            raise UpstreamUnavailableError(
                f"the upstream answered {response.status_code} for config "
                f"{served.path!r}: {response.text[:200]}"
            )
        if self._served.get(key) is not served:
            return  # dropped (idle) while it was fetched: not served any more
        self.fetch_counts["ok" if snapshot is not None else "absent"] += 1
        if served.failing_since is not None:
            logger.info("edge: fetching %s upstream again", served.path)
        served.failing_since = None
        served.error = None
        served.confirmed_at = time.monotonic()
        served.absent = snapshot is None
        self._loaded = True
        self._set(key, snapshot)
        served.answered.set()

    async def _get(self, url: str, params: dict[str, Any], read_timeout: float) -> httpx.Response:
        """GET upstream; once more at once on the keep-alive race (the upstream closed the idle
        connection as this request went out on it)."""
        timeout = httpx.Timeout(10.0, read=read_timeout)
        try:
            return await self._http.get(url, params=params, timeout=timeout)
        except httpx.RemoteProtocolError:
            return await self._http.get(url, params=params, timeout=timeout)

    def _set(self, key: tuple[str, str], snapshot: ConfigSnapshot | None) -> None:
        old = self._snapshots.get(key)
        if old == snapshot:
            return  # the same object stays: what was prepared from it stays valid
        snapshots = dict(self._snapshots)
        if snapshot is None:
            snapshots.pop(key, None)
        else:
            snapshots[key] = snapshot
        self._snapshots = MappingProxyType(snapshots)
        self._revision += 1
        self._changed((key,))

    # -- the change feed -------------------------------------------------------------------------
    async def _follow(self) -> None:
        """Long-poll the upstream's change feed until cancelled; fetch what it names."""
        feed = self._feed
        backoff = Backoff()
        while True:
            params: dict[str, Any] = {"wait": self._upstream_wait}
            if feed.since is not None:
                params["since"] = feed.since
            try:
                response = await self._get(
                    CHANGES_ROUTE, params, self._upstream_wait + _HTTP_MARGIN
                )
                revision, changes = _feed_answer(response)
            except (httpx.HTTPError, UpstreamUnavailableError, ChangeFeedError) as exc:
                if feed.failing_since is None:
                    logger.warning("edge: cannot follow the upstream's change feed: %s", exc)
                    feed.failing_since = time.monotonic()
                feed.error = exc
                await asyncio.sleep(backoff.next())
                continue
            if feed.failing_since is not None:
                logger.info("edge: following the upstream's change feed again")
            backoff.reset()
            feed.failing_since = None
            feed.error = None
            feed.confirmed_at = time.monotonic()
            self._loaded = True
            if changes is None:
                if feed.since is not None:
                    logger.info("edge: the upstream's change feed reset: fetching every config")
                feed.resets += 1
                for served in list(self._served.values()):
                    self._fetch(served)
            else:
                for key in changes:
                    changed = self._served.get(key)
                    if changed is not None:
                        self._fetch(changed)
            feed.since = revision

    # -- upkeep ----------------------------------------------------------------------------------
    async def _drop_idle(self) -> None:
        while True:
            await asyncio.sleep(max(0.05, min(60.0, self._idle_after / 4)))
            cutoff = time.monotonic() - self._idle_after
            for key, served in list(self._served.items()):
                if served.last_used < cutoff:
                    del self._served[key]
                    self._set(key, None)

    async def _recheck_absent(self) -> None:
        """Ask again for the configs the upstream did not know: the feed names a config created
        upstream, this also covers an upstream that does not."""
        while True:
            await asyncio.sleep(ABSENT_RECHECK)
            for served in list(self._served.values()):
                if served.absent and not served.fetching:
                    self._fetch(served)

    async def _probe(self) -> None:
        """Whether the upstream answers at all: readiness before any config is served."""
        backoff = Backoff()
        while True:
            try:
                response = await self._http.get("/healthz", timeout=10.0)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                self._probe_error = exc
                await asyncio.sleep(min(PROBE_INTERVAL, backoff.next()))
                continue
            backoff.reset()
            self._probe_error = None
            self._probe_confirmed_at = time.monotonic()
            self._loaded = True
            await asyncio.sleep(PROBE_INTERVAL)

    def _require_loaded(self) -> None:
        if not self.loaded:
            reason = f": {self.last_error}" if self.last_error is not None else ""
            raise SnapshotsNotLoadedError(f"the edge has not reached its upstream yet{reason}")


def _feed_answer(response: httpx.Response) -> tuple[int, list[tuple[str, str]] | None]:
    """(revision, changed configs) of a change feed answer; None for the changes on a reset."""
    if response.status_code == 404:
        raise UpstreamUnavailableError(
            f"the upstream answered 404 for {CHANGES_ROUTE}: it predates the change feed "
            "(upgrade the origin API before its edges)"
        )
    if response.status_code != 200:
        raise UpstreamUnavailableError(
            f"the upstream answered {response.status_code} for {CHANGES_ROUTE}: "
            f"{response.text[:200]}"
        )
    try:
        body = json.loads(response.content)
    except ValueError as exc:
        raise ChangeFeedError(f"the upstream's change feed answered no JSON: {exc}") from None
    revision = body.get("revision") if isinstance(body, dict) else None
    if not isinstance(revision, int) or isinstance(revision, bool):
        raise ChangeFeedError("the upstream's change feed answer has no integer `revision`")
    if body.get("reset") is True:
        return revision, None
    raw = body.get("changes")
    if not isinstance(raw, list):
        raise ChangeFeedError("the upstream's change feed answer has no `changes` list")
    changes: list[tuple[str, str]] = []
    for index, change in enumerate(raw):
        namespace = change.get("namespace") if isinstance(change, dict) else None
        path = change.get("path") if isinstance(change, dict) else None
        if not isinstance(namespace, str) or not isinstance(path, str):
            raise ChangeFeedError(
                f"the upstream's change feed answer: changes[{index}] needs a string namespace "
                "and path"
            )
        changes.append((namespace, path))
    return revision, changes
