"""Local evaluation: one watch per config on its resolution bundle (`GET /v1/bundles/{path}`),
and any number of client identities resolved in-process (docs/how-to/clients.md).

The watch is the SDK's own machinery (WatchState, the watch loop, the sync watcher thread): long-
poll with ETag, backoff, the disk cache and the "cache" source while the API is unreachable. Only
what is fetched differs: `BundleState` asks for the bundle and reads it as one `ConfigValue`
whose `value` is the bundle (its `version` the bundle's digest, so every change of it is one).
`LocalResolver` turns that into each identity's ConfigValue with tempoconf.resolution.resolve, the
function the API resolves with, and applies the hold rule across bundles.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType, TracebackType

from prometheus_client import CollectorRegistry

from tempoconf.client._async import AsyncConfigClient
from tempoconf.client._backoff import DEFAULT_BACKOFF_CAP, Backoff
from tempoconf.client._cache import DiskCache, identity_key
from tempoconf.client._core import ClientOptions, ConfigRequest, WatchState
from tempoconf.client._hold import decide
from tempoconf.client._metrics import VersionGauge
from tempoconf.client._model import (
    STABLE,
    ConfigClientError,
    ConfigRequestError,
    ConfigResponseError,
    ConfigValue,
    Source,
)
from tempoconf.client._sync import ConfigClient
from tempoconf.resolution import ClientIdentity, ConfigSnapshot, resolve, stage_kind
from tempoconf.resolution.bundles import (
    BUNDLES_PREFIX,
    BundleError,
    bundle_body,
    bundle_etag,
    bundle_from_snapshot,
    parse_bundle_body,
    snapshot_from_bundle,
)

__all__ = ["AsyncLocalConfig", "LocalConfig", "LocalResolver"]


class BundleState(WatchState):
    """A WatchState that fetches the config's bundle instead of one identity's answer."""

    def config_request(self, *, long_poll: bool) -> ConfigRequest:
        request = super().config_request(long_poll=long_poll)
        options = self.options
        # The bundle is the same for everyone: no identity in the request, only where and how long.
        params = tuple(
            (name, value) for name, value in request.params if name in ("namespace", "wait")
        )
        url = f"{options.api_url.rstrip('/')}{BUNDLES_PREFIX}{options.path}"
        return dataclasses.replace(request, url=url, params=params)

    def _parse(self, content: bytes, headers: Mapping[str, str], now: float) -> ConfigValue:
        try:
            snapshot = parse_bundle_body(content)
        except BundleError as exc:
            raise self._failed(ConfigResponseError(str(exc))) from None
        if (snapshot.namespace, snapshot.path) != (self.options.namespace, self.options.path):
            raise self._failed(
                ConfigResponseError(f"bundle is for {snapshot.namespace}/{snapshot.path}")
            )
        return bundle_value(snapshot, source="api", confirmed_at=now, etag=headers.get("etag"))


def bundle_value(
    snapshot: ConfigSnapshot, *, source: Source, confirmed_at: float, etag: str | None
) -> ConfigValue:
    """The bundle as the watch machinery holds it: stage "stable" (the hold rule applies per
    identity, in LocalResolver, not to the bundle), version the digest of its canonical body."""
    bundle = bundle_from_snapshot(snapshot)
    return ConfigValue(
        namespace=snapshot.namespace,
        path=snapshot.path,
        version=bundle_etag(bundle_body(bundle)).strip('"'),
        stage=STABLE,
        value=bundle,
        expires_at=None,
        source=source,
        confirmed_at=confirmed_at,
        etag=etag,
    )


def build_bundle_state(
    api_url: str,
    path: str,
    *,
    namespace: str,
    client_id: str | None,
    channel: str | None,
    labels: Mapping[str, str] | None,
    token: str | None,
    cache_dir: str | os.PathLike[str] | None,
    long_poll_seconds: float,
    poll_interval: float,
    min_interval: float,
    timeout: float,
    backoff_base: float,
    backoff_cap: float,
    registry: CollectorRegistry | None,
) -> WatchState:
    """`build_state` for a bundle: no identity (the bundle is everyone's), its own cache file."""
    options = ClientOptions(
        api_url=api_url,
        path=path,
        namespace=namespace,
        token=token or None,
        long_poll_seconds=long_poll_seconds,
        poll_interval=poll_interval,
        min_interval=min_interval,
        timeout=timeout,
    )
    cache = None
    if cache_dir is not None:
        # "bundle" in the identity: never the file of a ConfigClient of the same config.
        identity = {**identity_key(namespace, path, "", None, {}), "bundle": True}
        cache = DiskCache(Path(cache_dir), identity)
    # A private registry: the agent's version gauge would show the bundle's digest, not a version.
    gauge = VersionGauge(registry if registry is not None else CollectorRegistry())
    return BundleState(
        options, cache=cache, gauge=gauge, backoff=Backoff(base=backoff_base, cap=backoff_cap)
    )


class _BundleWatcher(ConfigClient):
    _build_state = staticmethod(build_bundle_state)


class _AsyncBundleWatcher(AsyncConfigClient):
    _build_state = staticmethod(build_bundle_state)


_ValueKey = tuple[str, str, datetime | None]
"""(version, stage, lease): what a resolution gives, and so the ConfigValue it is served as."""


class LocalResolver:
    """Each identity's ConfigValue from the bundle in use, with the hold rule.

    The hold rule (docs/contract.md, Leases) across bundles: when a bundle stages another version
    than the one before, the one before is kept while its stages' leases run, and an identity in
    one of its stages keeps that staged value until the lease ends (a move to stable applies at
    once). One remembered snapshot, not one per identity: "any number of identities".

    The ConfigValues are built once per bundle (and source, and confirmation time) and shared:
    an evaluation is a resolution and a dict lookup.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version: str | None = None
        self._snapshot: ConfigSnapshot | None = None
        self._held: ConfigSnapshot | None = None
        self._values: dict[_ValueKey, ConfigValue] = {}
        self._values_for: tuple[str, Source, float] | None = None

    @property
    def snapshot(self) -> ConfigSnapshot | None:
        """The bundle in use, parsed (None before the first)."""
        return self._snapshot

    def take(
        self, bundle: ConfigValue
    ) -> tuple[ConfigSnapshot, ConfigSnapshot | None, dict[_ValueKey, ConfigValue]]:
        """Put `bundle` in use (parsed once per version); returns it, the snapshot held back and
        the values built so far for it."""
        with self._lock:
            if bundle.version != self._version or self._snapshot is None:
                self._replace(bundle)
            served_as = (bundle.version, bundle.source, bundle.confirmed_at)
            if served_as != self._values_for:
                self._values, self._values_for = {}, served_as
            assert self._snapshot is not None
            return self._snapshot, self._held, self._values

    def _replace(self, bundle: ConfigValue) -> None:
        try:
            snapshot = snapshot_from_bundle(bundle.value)
        except BundleError as exc:  # a cache file edited by hand: the API's were checked
            raise ConfigResponseError(str(exc)) from exc
        previous = self._snapshot
        if snapshot.staged is None:
            self._held = None  # halt, revert, promotion: stable applies at once
        elif (
            previous is not None
            and previous.staged is not None
            and previous.staged.version != snapshot.staged.version
        ):
            self._held = previous
        self._snapshot, self._version = snapshot, bundle.version

    def value_for(
        self, bundle: ConfigValue, identity: ClientIdentity, now: datetime, *, url: str
    ) -> ConfigValue:
        """What `identity` gets at `now` from `bundle`; ConfigRequestError(404) when nothing
        serves it (no stable and no stage applies), as the API would answer."""
        snapshot, held, values = self.take(bundle)
        value = _resolved(snapshot, identity, now, bundle, values)
        if held is not None:
            before = _resolved(held, identity, now, bundle, values)
            if before is not None and value is not None and not decide(before, value, now).apply:
                return before
        if value is None:
            raise ConfigRequestError(
                404,
                f"config {snapshot.path!r} in namespace {snapshot.namespace!r} has no stable "
                "version yet, and no stage of its rollout applies to this client",
                url=url,
            )
        return value


def _resolved(
    snapshot: ConfigSnapshot,
    identity: ClientIdentity,
    now: datetime,
    bundle: ConfigValue,
    values: dict[_ValueKey, ConfigValue],
) -> ConfigValue | None:
    if not identity.client_id:
        # As the API: every anonymous client would share one bucket, so a percentile would take
        # all or none of them; anonymous clients never match percentile stages.
        stages = tuple(stage for stage in snapshot.stages if stage.percentile is None)
        snapshot = dataclasses.replace(snapshot, stages=stages)
    resolution = resolve(snapshot, identity, now)
    if resolution is None:
        return None
    record = resolution.record
    key = (record.version, resolution.stage, resolution.expires_at)
    value = values.get(key)
    if value is not None:
        return value
    published = next(
        (
            stage
            for stage in snapshot.stages
            if stage.name == resolution.stage and stage.expires_at == resolution.expires_at
        ),
        None,
    )
    value = values[key] = ConfigValue(
        namespace=snapshot.namespace,
        path=snapshot.path,
        version=record.version,
        stage=resolution.stage,
        value=record.value,
        expires_at=resolution.expires_at,
        metadata=MappingProxyType(record.metadata()),
        stage_kind=stage_kind(published) if resolution.stage != STABLE else None,
        source=bundle.source,
        confirmed_at=bundle.confirmed_at,
    )
    return value


def _identity(
    client_id: str, channel: str | None, labels: Mapping[str, str] | None
) -> ClientIdentity:
    if not isinstance(client_id, str):
        raise TypeError(f"client_id must be a string, not {client_id!r}")
    return ClientIdentity(client_id=client_id, channel=channel or None, labels=dict(labels or {}))


class LocalConfig:
    """One config for any number of client identities, resolved in this process
    (docs/how-to/clients.md): for a server-side application that serves many users or tenants
    from one process, where a ConfigClient per identity would be a watch (and a long-poll) per
    identity.

    - `get(client_id, channel=None, labels=None)`: the ConfigValue that identity gets, exactly
      what `GET /v1/configs/{path}` answers it (the same resolution, the same bucketing), from
      the bundle in use: no request while watching, one bundle request otherwise.
    - `start()` (or `with config:`): a background thread long-polls the bundle.
    - `snapshot`: the bundle in use, as a tempoconf.resolution.ConfigSnapshot.

    Arguments as ConfigClient's, less the identity (`client_id`, `channel`, `labels` are given
    to `get`) and reporting: `namespace`, `token`, `cache_dir` (the last good bundle, so a start
    while the API is unreachable serves every identity, `source == "cache"`),
    `long_poll_seconds`, `poll_interval`, `min_interval`, `timeout`, `backoff_base`,
    `backoff_cap`.
    """

    def __init__(
        self,
        api_url: str,
        path: str,
        *,
        namespace: str = "default",
        token: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        long_poll_seconds: float = 30.0,
        poll_interval: float = 5.0,
        min_interval: float = 0.5,
        timeout: float = 10.0,
        backoff_base: float = 0.5,
        backoff_cap: float = DEFAULT_BACKOFF_CAP,
    ) -> None:
        self._watcher = _BundleWatcher(
            api_url,
            path,
            namespace=namespace,
            client_id="",
            token=token,
            cache_dir=cache_dir,
            long_poll_seconds=long_poll_seconds,
            poll_interval=poll_interval,
            min_interval=min_interval,
            timeout=timeout,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            report_applied=False,
        )
        self._resolver = LocalResolver()
        # Every bundle the watcher takes, not only those a get() sees: the hold rule needs each.
        self._watcher.subscribe(self._take)
        self._url = f"{api_url.rstrip('/')}{BUNDLES_PREFIX}{path}"

    def get(
        self, client_id: str, channel: str | None = None, labels: Mapping[str, str] | None = None
    ) -> ConfigValue:
        """The value `client_id` (with `channel`, `labels`) gets now; from the last good bundle
        (`source == "cache"`) while the API is unreachable. Raises ConfigRequestError (4xx, and
        404 when nothing serves this identity), ConfigUnavailableError (no bundle known)."""
        identity = _identity(client_id, channel, labels)
        # While watching, the bundle in use is current: read it without get()'s request lock.
        bundle = self._watcher.current if self._watcher.watching else None
        if bundle is None:
            bundle = self._watcher.get()
        return self._resolver.value_for(bundle, identity, datetime.now(UTC), url=self._url)

    @property
    def snapshot(self) -> ConfigSnapshot | None:
        """The bundle in use (None before the first one)."""
        current = self._watcher.current
        if current is None:
            return None
        return self._resolver.take(current)[0]

    @property
    def last_error(self) -> ConfigClientError | None:
        """The error of the last failed request; None once one succeeds."""
        return self._watcher.last_error

    def on_source_change(self, callback: Callable[[Source], None]) -> Callable[[], None]:
        """Call `callback("cache")` when the API stops answering (every identity is then resolved
        from the last good bundle) and `callback("api")` when it answers again, as
        ConfigClient.on_source_change. Returns a function that removes it."""
        return self._watcher.on_source_change(callback)

    @property
    def watching(self) -> bool:
        return self._watcher.watching

    def start(self) -> None:
        """Start the watcher thread (idempotent)."""
        self._watcher.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the watcher and wait for its thread (idempotent)."""
        self._watcher.stop(timeout)

    def close(self) -> None:
        """Stop watching and close the HTTP connections."""
        self._watcher.close()

    def __enter__(self) -> LocalConfig:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _take(self, bundle: ConfigValue) -> None:
        self._resolver.take(bundle)


class AsyncLocalConfig:
    """LocalConfig for asyncio programs: `await get(client_id, ...)`; `async with config:` (or
    `start()` / `aclose()`) runs the watch task. Same arguments as LocalConfig."""

    def __init__(
        self,
        api_url: str,
        path: str,
        *,
        namespace: str = "default",
        token: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        long_poll_seconds: float = 30.0,
        poll_interval: float = 5.0,
        min_interval: float = 0.5,
        timeout: float = 10.0,
        backoff_base: float = 0.5,
        backoff_cap: float = DEFAULT_BACKOFF_CAP,
    ) -> None:
        self._watcher = _AsyncBundleWatcher(
            api_url,
            path,
            namespace=namespace,
            client_id="",
            token=token,
            cache_dir=cache_dir,
            long_poll_seconds=long_poll_seconds,
            poll_interval=poll_interval,
            min_interval=min_interval,
            timeout=timeout,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            report_applied=False,
        )
        self._resolver = LocalResolver()
        self._watcher.subscribe(self._take)
        self._url = f"{api_url.rstrip('/')}{BUNDLES_PREFIX}{path}"

    async def get(
        self, client_id: str, channel: str | None = None, labels: Mapping[str, str] | None = None
    ) -> ConfigValue:
        """As LocalConfig.get."""
        identity = _identity(client_id, channel, labels)
        bundle = self._watcher.current if self._watcher.watching else None
        if bundle is None:
            bundle = await self._watcher.get()
        return self._resolver.value_for(bundle, identity, datetime.now(UTC), url=self._url)

    @property
    def snapshot(self) -> ConfigSnapshot | None:
        """The bundle in use (None before the first one)."""
        current = self._watcher.current
        if current is None:
            return None
        return self._resolver.take(current)[0]

    @property
    def last_error(self) -> ConfigClientError | None:
        return self._watcher.last_error

    def on_source_change(self, callback: Callable[[Source], None]) -> Callable[[], None]:
        """Call `callback("cache")` when the API stops answering (every identity is then resolved
        from the last good bundle) and `callback("api")` when it answers again, as
        ConfigClient.on_source_change. Returns a function that removes it."""
        return self._watcher.on_source_change(callback)

    @property
    def watching(self) -> bool:
        return self._watcher.watching

    def start(self) -> None:
        """Start the watch task (idempotent); needs a running event loop."""
        self._watcher.start()

    async def stop(self) -> None:
        await self._watcher.stop()

    async def aclose(self) -> None:
        """Stop watching and close the HTTP connections."""
        await self._watcher.aclose()

    async def __aenter__(self) -> AsyncLocalConfig:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _take(self, bundle: ConfigValue) -> None:
        self._resolver.take(bundle)
