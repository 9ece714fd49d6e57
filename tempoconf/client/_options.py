"""`ClientOptions`: every setting of the SDK's constructors, defined once.

Every constructor (ConfigClient, AsyncConfigClient, LocalConfig, AsyncLocalConfig, the OpenFeature
providers) takes `options=ClientOptions(...)`, keyword arguments of the same names, or both (a
keyword overrides the field of `options`): `ConfigClient(url, path, channel="canary")` and
`ConfigClient(url, path, options=ClientOptions(channel="canary"))` are one client.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TypedDict

from prometheus_client import CollectorRegistry

from tempoconf.backoff import DEFAULT_BACKOFF_CAP

__all__ = [
    "IDENTITY_AND_REPORTING",
    "MAX_LONG_POLL_SECONDS",
    "ClientOptions",
    "ClientSettings",
    "WatchSettings",
    "check_path",
    "client_id_of",
    "client_options",
]

MAX_LONG_POLL_SECONDS = 60
"""The API holds a poll at most this long."""


class WatchSettings(TypedDict, total=False):
    """The keyword arguments of every constructor: how to watch (ClientOptions' fields)."""

    namespace: str
    token: str | None
    cache_dir: str | os.PathLike[str] | None
    long_poll_seconds: float
    poll_interval: float
    min_interval: float
    timeout: float
    backoff_base: float
    backoff_cap: float


class ClientSettings(WatchSettings, total=False):
    """The keyword arguments of the clients and providers: WatchSettings, and who asks and how it
    reports (local evaluation takes the identity per `get`, and reports nothing)."""

    client_id: str | None
    channel: str | None
    labels: Mapping[str, str] | None
    registry: CollectorRegistry | None
    report_applied: bool


IDENTITY_AND_REPORTING = frozenset(ClientSettings.__annotations__) - frozenset(
    WatchSettings.__annotations__
)
"""The settings local evaluation does not take."""


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """How a client watches its config, and as whom (the same for every config of a provider)."""

    namespace: str = "default"
    client_id: str | None = None
    """Default the hostname: it decides the percentile bucket."""
    channel: str | None = None
    labels: Mapping[str, str] | None = None
    """With `channel`, the rest of the identity a stage may target."""
    token: str | None = None
    """Bearer token, when the API requires one."""
    cache_dir: str | os.PathLike[str] | None = None
    """Where the last good value is kept (None: memory only)."""
    long_poll_seconds: float = 30.0
    """0 polls instead."""
    poll_interval: float = 5.0
    """The pause after an answer that came back at once, so an API that does not hold polls is not
    hammered."""
    min_interval: float = 0.5
    """The least time between two requests after a change."""
    timeout: float = 10.0
    """Seconds, on top of the long-poll."""
    backoff_base: float = 0.5
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    """Exponential backoff with full jitter after failures, from `backoff_base` up to this."""
    registry: CollectorRegistry | None = None
    """Where `tempoconf_agent_config_version` is (default a private one: see tempoconf.client)."""
    report_applied: bool = True
    """After the subscribers handled a new value, report it applied, or the first subscriber's
    exception as the apply error."""

    def __post_init__(self) -> None:
        if not 0 <= self.long_poll_seconds <= MAX_LONG_POLL_SECONDS:
            raise ValueError(
                f"long_poll_seconds must be 0 (off) to {MAX_LONG_POLL_SECONDS}, "
                f"not {self.long_poll_seconds}"
            )
        if self.poll_interval <= 0 or self.min_interval <= 0 or self.timeout <= 0:
            raise ValueError("poll_interval, min_interval and timeout must be positive")
        for key in self.labels or {}:
            if not key or "=" in key:
                raise ValueError(f"a label key must be non-empty and without '=', not {key!r}")
        # An empty channel or token is none (a command line's unset variable, say).
        object.__setattr__(self, "channel", self.channel or None)
        object.__setattr__(self, "token", self.token or None)


def client_options(
    options: ClientOptions | None,
    overrides: ClientSettings | WatchSettings,
    *,
    refused: Collection[str] = (),
    owner: str = "",
) -> ClientOptions:
    """`options` (default ClientOptions()) with the keyword arguments `overrides` over it.

    `refused`: settings `owner` does not take as keywords (a TypeError, as for any unknown one).
    """
    for name in overrides:
        if name in refused:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
    options = options if options is not None else ClientOptions()
    return dataclasses.replace(options, **overrides) if overrides else options


def client_id_of(options: ClientOptions) -> str:
    """The id a client polls as: `client_id`, default the hostname."""
    return socket.gethostname() if options.client_id is None else options.client_id


def check_path(path: str) -> None:
    if not path or path.startswith("/"):
        raise ValueError(f"a config path like 'myproject/server_config' is needed, not {path!r}")
