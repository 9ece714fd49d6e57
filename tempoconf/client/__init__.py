"""`tempoconf.client`: read a config as the distribution API serves it to this host.

Depends on httpx and prometheus-client only (it runs on fleet hosts). Blocking::

    from tempoconf.client import ConfigClient

    client = ConfigClient("http://tempoconf:8080", "myproject/server_config",
                          cache_dir="/var/cache/tempoconf")
    config = client.get()                  # API, else the last good value on disk
    client.subscribe(lambda value: apply(value.value))
    client.start()                         # long-polls in a thread; client.close() ends it
    client.report(ok=980, failed=3)

asyncio: `AsyncConfigClient`, same arguments; `await client.get()`, and
`async with client:` runs the watch task.

Behaviour (docs/contract.md, Leases; docs/how-to/clients.md): long-poll with ETag (304 keeps
the value), one request in flight per config, exponential backoff with full jitter on errors; the
last good value is written atomically to `cache_dir` and served at start and while the API is
unreachable, with `source == "cache"` and its `age_seconds`; the hold rule (a staged value is kept
until its `expires_at` against another staged version; a move back to stable applies at once).

Metrics: `tempoconf_agent_config_version{config_path, stage, version, commit, author}` is 1 for the
value in use, the previous series removed. Each client has a private CollectorRegistry unless
given one, so clients never collide. To expose it::

    prometheus_client.start_http_server(9464, addr="127.0.0.1", registry=client.registry)

or pass `registry=prometheus_client.REGISTRY` to every client to share the process's default
registry (one series per config path).

Local evaluation: `LocalConfig(api_url, path)` (and `AsyncLocalConfig`) watches the config's
resolution bundle once and resolves any number of identities in-process, `config.get(client_id,
channel=None, labels=None)`, with the API's own resolution (docs/how-to/clients.md).

OpenFeature: `tempoconf.client.openfeature.TempoconfProvider` (and `AsyncTempoconfProvider`)
resolves flags `path` and `path#/json/pointer` over these clients; it needs the extra
`tempoconf[openfeature]`, which this package never imports (docs/how-to/openfeature.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tempoconf.client._async import AsyncConfigClient
from tempoconf.client._cache import write_file_atomically
from tempoconf.client._metrics import METRIC_NAME
from tempoconf.client._model import (
    STABLE,
    ConfigClientError,
    ConfigRequestError,
    ConfigResponseError,
    ConfigUnavailableError,
    ConfigValue,
)
from tempoconf.client._sync import ConfigClient

if TYPE_CHECKING:
    from tempoconf.client._local import AsyncLocalConfig, LocalConfig

__all__ = [
    "METRIC_NAME",
    "STABLE",
    "AsyncConfigClient",
    "AsyncLocalConfig",
    "ConfigClient",
    "ConfigClientError",
    "ConfigRequestError",
    "ConfigResponseError",
    "ConfigUnavailableError",
    "ConfigValue",
    "LocalConfig",
    "write_file_atomically",
]


def __getattr__(name: str) -> Any:
    # Local evaluation loads the domain's resolution (tempoconf.resolution, tempoconf.resolution.bundles):
    # imported on first use, so a host that only polls its own value loads none of it.
    if name in ("LocalConfig", "AsyncLocalConfig"):
        from tempoconf.client import _local

        return getattr(_local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
