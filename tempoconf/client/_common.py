"""What both flavours share: construction (options, cache, gauge and backoff from keyword
arguments) and the read-only properties over the state."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry

from tempoconf.client._backoff import Backoff
from tempoconf.client._cache import DiskCache, identity_key
from tempoconf.client._core import ClientOptions, WatchState
from tempoconf.client._metrics import VersionGauge
from tempoconf.client._model import ConfigClientError, ConfigValue, Source

__all__ = ["StateReads", "build_state"]


def build_state(
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
    options = ClientOptions(
        api_url=api_url,
        path=path,
        namespace=namespace,
        client_id=socket.gethostname() if client_id is None else client_id,
        channel=channel or None,
        labels=dict(labels or {}),
        token=token or None,
        long_poll_seconds=long_poll_seconds,
        poll_interval=poll_interval,
        min_interval=min_interval,
        timeout=timeout,
    )
    cache = None
    if cache_dir is not None:
        identity = identity_key(namespace, path, options.client_id, options.channel, options.labels)
        cache = DiskCache(Path(cache_dir), identity)
    # A private registry by default: two clients in one process must not collide in the global one.
    gauge = VersionGauge(registry if registry is not None else CollectorRegistry())
    return WatchState(
        options, cache=cache, gauge=gauge, backoff=Backoff(base=backoff_base, cap=backoff_cap)
    )


class StateReads:
    """The reads both clients answer from their state alone, without a request."""

    _state: WatchState

    @property
    def registry(self) -> CollectorRegistry:
        """The registry holding `tempoconf_agent_config_version` (see the package docstring)."""
        return self._state.registry

    @property
    def client_id(self) -> str:
        """The id this client polls as (it decides its percentile bucket)."""
        return self._state.options.client_id

    @property
    def last_error(self) -> ConfigClientError | None:
        """The error of the last failed request; None once one succeeds."""
        return self._state.last_error

    @property
    def current(self) -> ConfigValue | None:
        """The value in use now (no request), or None before any is known."""
        return self._state.current()

    @property
    def pending(self) -> ConfigValue | None:
        """The value the API serves that the hold rule keeps back, if any."""
        return self._state.pending

    def on_source_change(self, callback: Callable[[Source], None]) -> Callable[[], None]:
        """Call `callback("cache")` when the API stops answering (the value in use now comes from
        the last good value) and `callback("api")` when it answers again: once per flip, from the
        thread (or task) that made the request, so it must not block. The first answer after a
        start counts as a flip to "api"; a start on an unreachable API flips nothing. Returns a
        function that removes the callback."""
        return self._state.add_source_listener(callback)
