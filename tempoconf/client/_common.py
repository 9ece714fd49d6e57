"""What both flavours share: construction (the state, its cache, gauge and backoff from the
options) and the read-only properties over the state."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, Unpack

import httpx
from prometheus_client import CollectorRegistry

from tempoconf.backoff import Backoff
from tempoconf.client._cache import DiskCache, identity_key
from tempoconf.client._core import ConfigRequest, WatchState, apply_error_text
from tempoconf.client._metrics import VersionGauge
from tempoconf.client._model import ConfigClientError, ConfigValue, Source
from tempoconf.client._options import ClientOptions, ClientSettings, client_id_of, client_options

__all__ = [
    "ClientBase",
    "StateParts",
    "build_state",
    "get_options",
    "state_parts",
    "subscriber_failed",
]

logger = logging.getLogger("tempoconf.client")


def build_state(api_url: str, path: str, options: ClientOptions) -> WatchState:
    """The state of one config for one identity: its cache file, its gauge, its backoff."""
    cache = None
    if options.cache_dir is not None:
        identity = identity_key(
            options.namespace, path, client_id_of(options), options.channel, options.labels or {}
        )
        cache = DiskCache(Path(options.cache_dir), identity)
    return WatchState(api_url, path, options, cache=cache, **state_parts(options))


def get_options(state: WatchState, request: ConfigRequest) -> dict[str, Any]:
    """httpx's arguments of a config GET after its URL: query, headers and timeouts."""
    timeout = httpx.Timeout(state.options.timeout, read=request.read_timeout)
    return {"params": request.params, "headers": request.headers, "timeout": timeout}


def subscriber_failed(callback: object, value: ConfigValue, error: Exception) -> str:
    """Log a subscriber's exception (called in its `except`); what the apply report says of it."""
    logger.exception("config subscriber %r failed on version %s", callback, value.version)
    return apply_error_text(error)


def state_parts(options: ClientOptions) -> StateParts:
    """The gauge and backoff `options` ask for."""
    # A private registry by default: two clients in one process must not collide in the global one.
    registry = options.registry if options.registry is not None else CollectorRegistry()
    return {
        "gauge": VersionGauge(registry),
        "backoff": Backoff(base=options.backoff_base, cap=options.backoff_cap),
    }


class StateParts(TypedDict):
    gauge: VersionGauge
    backoff: Backoff


class ClientBase:
    """What both flavours of the client share: construction from the options, and the reads they
    answer from their state alone, without a request."""

    _build_state = staticmethod(build_state)
    """What builds the state (local evaluation's watcher builds a bundle's)."""

    def __init__(
        self,
        api_url: str,
        path: str,
        *,
        options: ClientOptions | None = None,
        **overrides: Unpack[ClientSettings],
    ) -> None:
        options = client_options(options, overrides)
        self._state = self._build_state(api_url, path, options)
        self._report_applied = options.report_applied
        self._open(options)

    def _open(self, options: ClientOptions) -> None:
        """The flavour's own: its HTTP client, its locks, its watcher's slots."""
        raise NotImplementedError

    @property
    def registry(self) -> CollectorRegistry:
        """The registry holding `tempoconf_agent_config_version` (see the package docstring)."""
        return self._state.registry

    @property
    def client_id(self) -> str:
        """The id this client polls as (it decides its percentile bucket)."""
        return self._state.client_id

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
