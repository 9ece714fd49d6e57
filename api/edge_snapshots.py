"""`BundleSnapshots`: an edge relay's config snapshots, fed by its upstream's resolution bundles.

One watch per config a client of the edge asks for: a long-poll on the upstream's
`GET /v1/bundles/{path}` (an origin API or another edge), started on the first request for it and
dropped once nobody has asked for it for `idle_after` seconds. While the upstream is unreachable
the watches retry with backoff and the snapshots held keep being served: leases are in the
snapshot, so resolution still stops serving a stage once its lease ends (by this host's clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import quote

import httpx

from tempoconf.api.snapshots import SnapshotsNotLoadedError
from tempoconf.client._backoff import Backoff
from tempoconf.resolution import ConfigSnapshot
from tempoconf.resolution.bundles import BundleError, parse_bundle_body

__all__ = [
    "BundleSnapshots",
    "DEFAULT_FIRST_ANSWER_TIMEOUT",
    "DEFAULT_IDLE_AFTER",
    "UPSTREAM_WAIT",
    "UpstreamUnavailableError",
]

DEFAULT_FIRST_ANSWER_TIMEOUT = 10.0
"""Seconds a client's first request for a config waits for the upstream's first answer."""
DEFAULT_IDLE_AFTER = 600.0
"""A config nobody asked the edge for during this many seconds is no longer watched."""
UPSTREAM_WAIT = 30
"""Seconds of each upstream long-poll (the API accepts up to 60)."""
ABSENT_RECHECK = 5.0
"""Seconds between two asks for a config the upstream does not know (404): it may be created."""
MAX_WATCHES = 10_000
"""Configs watched at once at most: a client naming ever new paths cannot make the edge open
unbounded connections upstream (the next one is answered 503)."""
PROBE_INTERVAL = 5.0
"""Seconds between two checks of the upstream's /healthz (readiness with no config watched)."""
_HTTP_MARGIN = 15.0
"""An upstream long-poll's read timeout: its wait plus this."""

logger = logging.getLogger(__name__)


class UpstreamUnavailableError(RuntimeError):
    """The upstream has not answered for a config yet (unreachable, or too slow)."""


@dataclass(eq=False)
class _Watch:
    namespace: str
    path: str
    last_used: float
    created_at: float = field(default_factory=time.monotonic)
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by the first answer of the upstream (200, 304 or 404)."""
    task: asyncio.Task[None] | None = None
    failing_since: float | None = None
    confirmed_at: float | None = None
    error: BaseException | None = None


class BundleSnapshots:
    """The `SnapshotSource` of an edge relay (see the module's docstring).

    `ensure(namespace, path)` starts a config's watch (or marks it used) and waits, bounded, for
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
        self._http = http
        self._first_answer_timeout = first_answer_timeout
        self._idle_after = idle_after
        self._upstream_wait = upstream_wait
        self._snapshots: Mapping[tuple[str, str], ConfigSnapshot] = MappingProxyType({})
        self._watches: dict[tuple[str, str], _Watch] = {}
        self._config_events: dict[tuple[str, str], asyncio.Event] = {}
        self._listeners: list[Callable[[Sequence[tuple[str, str]]], None]] = []
        self._revision = 0
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
        """0 while every watch is connected; else seconds since the oldest failing one last had an
        answer (what its clients are served is at most that old)."""
        if not self.loaded:
            return None
        now = time.monotonic()
        ages = [0.0]
        if self._probe_error is not None and self._probe_confirmed_at is not None:
            ages.append(now - self._probe_confirmed_at)
        for watch in self._watches.values():
            if watch.failing_since is not None:
                since = (
                    watch.confirmed_at if watch.confirmed_at is not None else watch.failing_since
                )
                ages.append(now - since)
        return max(ages)

    @property
    def revision(self) -> int | None:
        """How many config snapshots changed since start (the edge has no store revision)."""
        return self._revision if self.loaded else None

    @property
    def last_error(self) -> BaseException | None:
        """Why the upstream could not be read, while it cannot (None when it can)."""
        for watch in self._watches.values():
            if watch.failing_since is not None and watch.error is not None:
                return watch.error
        return self._probe_error

    @property
    def watched(self) -> int:
        """How many configs are watched upstream."""
        return len(self._watches)

    def snapshots(self) -> Mapping[tuple[str, str], ConfigSnapshot]:
        self._require_loaded()
        return self._snapshots

    def get(self, namespace: str, path: str) -> ConfigSnapshot | None:
        self._require_loaded()
        return self._snapshots.get((namespace, path))

    def changed_for(self, namespace: str, path: str) -> asyncio.Event:
        key = (namespace, path)
        event = self._config_events.get(key)
        if event is None:
            event = self._config_events[key] = asyncio.Event()
        return event

    def on_change(self, listener: Callable[[Sequence[tuple[str, str]]], None]) -> None:
        """Call `listener([key])` right after each change of a config's snapshot."""
        self._listeners.append(listener)

    def release_waiters(self) -> None:
        events, self._config_events = self._config_events, {}
        for event in events.values():
            event.set()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[BundleSnapshots]:
        """Probe the upstream and drop idle watches while inside; every watch stops on exit."""
        self._tasks = [
            asyncio.create_task(self._probe(), name="tempoconf-edge-probe"),
            asyncio.create_task(self._drop_idle(), name="tempoconf-edge-idle"),
        ]
        try:
            yield self
        finally:
            tasks = self._tasks + [w.task for w in self._watches.values() if w.task is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._watches.clear()

    # -- watches ---------------------------------------------------------------------------------
    async def ensure(self, namespace: str, path: str) -> None:
        """Watch this config (if not yet) and wait for the upstream's first answer on it, at most
        `first_answer_timeout` seconds; UpstreamUnavailableError if none came."""
        key = (namespace, path)
        watch = self._watches.get(key)
        now = time.monotonic()
        if watch is None:
            if len(self._watches) >= MAX_WATCHES:
                raise UpstreamUnavailableError(
                    f"this edge already watches {MAX_WATCHES} configs: config {path!r} in "
                    f"namespace {namespace!r} cannot be watched until some go idle"
                )
            watch = self._watches[key] = _Watch(namespace, path, last_used=now)
            watch.task = asyncio.create_task(
                self._watch(watch), name=f"tempoconf-edge-watch {namespace}/{path}"
            )
        else:
            watch.last_used = now
        if watch.answered.is_set():
            return
        if watch.error is not None and watch.task is not None and not self._fresh(watch, now):
            # The upstream failed this watch before it ever answered: say so now, rather than
            # hold every request for the bound while the watch backs off.
            raise UpstreamUnavailableError(
                f"the upstream has not answered for config {path!r} in namespace "
                f"{namespace!r} yet: {watch.error}"
            )
        try:
            async with asyncio.timeout(self._first_answer_timeout):
                await watch.answered.wait()
        except TimeoutError:
            reason = f": {watch.error}" if watch.error is not None else ""
            raise UpstreamUnavailableError(
                f"the upstream has not answered for config {path!r} in namespace "
                f"{namespace!r} yet{reason}"
            ) from None

    def _fresh(self, watch: _Watch, now: float) -> bool:
        """The watch started less than the first-answer bound ago (its creator still waits)."""
        return now - watch.created_at < self._first_answer_timeout

    async def _watch(self, watch: _Watch) -> None:
        """Long-poll the config's bundle upstream until cancelled."""
        key = (watch.namespace, watch.path)
        url = f"/v1/bundles/{quote(watch.path)}"
        etag: str | None = None
        backoff = Backoff()
        retried = False
        while True:
            params: dict[str, str | float] = {"namespace": watch.namespace}
            headers = {}
            if etag is not None:
                params["wait"] = self._upstream_wait
                headers["If-None-Match"] = etag
            try:
                response = await self._http.get(
                    url,
                    params=params,
                    headers=headers,
                    timeout=httpx.Timeout(10.0, read=self._upstream_wait + _HTTP_MARGIN),
                )
                if response.status_code == 200:
                    snapshot = parse_bundle_body(response.content)
                    if (snapshot.namespace, snapshot.path) != key:
                        raise BundleError(
                            f"the upstream answered the bundle of {snapshot.path!r} in namespace "
                            f"{snapshot.namespace!r} for {watch.path!r} in {watch.namespace!r}"
                        )
                    etag = response.headers.get("etag")
                    self._set(key, snapshot)
                elif response.status_code == 404:
                    etag = None
                    self._set(key, None)
                elif response.status_code != 304:
                    raise UpstreamUnavailableError(
                        f"the upstream answered {response.status_code} for config "
                        f"{watch.path!r}: {response.text[:200]}"
                    )
            except httpx.RemoteProtocolError as exc:
                # The keep-alive race: the upstream closed the idle connection as this request
                # went out on it. Once, at once, on a new connection; then as any failure.
                if not retried:
                    retried = True
                    continue
                self._failed(watch, exc)
                await asyncio.sleep(backoff.next())
                continue
            except (httpx.HTTPError, UpstreamUnavailableError, BundleError) as exc:
                # BundleError: a malformed bundle (it names the field); keep what is held, as
                # for an unreachable upstream.
                self._failed(watch, exc)
                await asyncio.sleep(backoff.next())
                continue
            retried = False
            if watch.failing_since is not None:
                logger.info("edge: watching %s upstream again", watch.path)
            watch.failing_since = None
            watch.error = None
            watch.confirmed_at = time.monotonic()
            self._loaded = True
            backoff.reset()
            watch.answered.set()
            if response.status_code == 404:
                await asyncio.sleep(ABSENT_RECHECK)

    @staticmethod
    def _failed(watch: _Watch, error: BaseException) -> None:
        if watch.failing_since is None:
            logger.warning("edge: cannot watch %s upstream: %s", watch.path, error)
            watch.failing_since = time.monotonic()
        watch.error = error

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
        event = self._config_events.pop(key, None)
        if event is not None:
            event.set()
        for listener in self._listeners:
            try:
                listener((key,))
            except Exception:  # a bug there must not stop the watches
                logger.exception("a snapshot change listener failed")

    async def _drop_idle(self) -> None:
        while True:
            await asyncio.sleep(max(0.05, min(60.0, self._idle_after / 4)))
            cutoff = time.monotonic() - self._idle_after
            for key, watch in list(self._watches.items()):
                if watch.last_used < cutoff:
                    del self._watches[key]
                    if watch.task is not None:
                        watch.task.cancel()
                    self._set(key, None)

    async def _probe(self) -> None:
        """Whether the upstream answers at all: readiness before any config is watched."""
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
