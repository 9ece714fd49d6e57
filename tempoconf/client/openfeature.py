"""An OpenFeature provider over the SDK's clients (`pip install 'tempoconf[openfeature]'`).

`TempoconfProvider` (blocking: one `ConfigClient` per config, each long-polling in its thread) and
`AsyncTempoconfProvider` (one `AsyncConfigClient` per config, watch tasks in the program's event
loop). Both keep what the clients do: long-poll with ETag, the last good value on disk, the hold
rule. A flag is a config, or one field of it:

- `myproject/flags` resolves the whole value (an object flag);
- `myproject/flags#/checkout/new_flow` resolves the field that JSON Pointer (RFC 6901, its JSON
  string form: `~1` for a `/` inside a name, `~0` for `~`) names in it.

Resolution (docs/how-to/openfeature.md): `variant` is the version id; `reason` is STATIC on
stable, TARGETING_MATCH on a channel or labels stage, SPLIT on a percentile stage, CACHED while
the value comes from the disk cache (the API unreachable); `flag_metadata` carries `stage`,
`version`, `commit` and `author`. Errors: FLAG_NOT_FOUND for a config this provider was not given,
one the API does not know (404), or a pointer that names nothing; TYPE_MISMATCH (a boolean is not
an integer; an integer is a float); PARSE_ERROR for a key that is not `path` or `path#/pointer`;
PROVIDER_NOT_READY while a config has no value; INVALID_CONTEXT for a `targetingKey` other than
the provider's client id (a host has one identity, given at construction: a service that resolves
per request for many identities uses the API's OFREP endpoints instead).

Events: READY once every config has a value from the API; STALE when one comes from the disk cache
because the API is unreachable (at start, or later); READY again when the API answers; ERROR when
initialisation finds a config with neither; CONFIGURATION_CHANGED on every new version in use,
`flags_changed` listing the config's path and each `path#pointer` key evaluated so far whose value
differs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Literal, TypeVar, Unpack

from prometheus_client import CollectorRegistry

from tempoconf.client._async import AsyncConfigClient
from tempoconf.client._flagkeys import (
    MISSING,
    FlagKey,
    FlagKeyError,
    json_text,
    lookup,
    parse_flag_key,
)
from tempoconf.client._flagvalues import FlagType, flag_metadata, json_type, short, typed
from tempoconf.client._lifecycle import AsyncClosing
from tempoconf.client._model import (
    STABLE,
    ConfigClientError,
    ConfigRequestError,
    ConfigValue,
    Source,
)
from tempoconf.client._options import ClientOptions, ClientSettings, client_options
from tempoconf.client._stagekind import stage_kind
from tempoconf.client._sync import ConfigClient

try:
    from openfeature import api as openfeature_api
    from openfeature.evaluation_context import EvaluationContext
    from openfeature.event import EventDetails, ProviderEvent, ProviderEventDetails
    from openfeature.exception import ErrorCode, ProviderFatalError, ProviderNotReadyError
    from openfeature.flag_evaluation import FlagResolutionDetails, FlagValueType, Reason
    from openfeature.provider import AbstractProvider, Metadata
except ImportError as exc:  # pragma: no cover - the extra is installed in dev and CI
    if (exc.name or "").split(".")[0] != "openfeature":
        raise
    raise ImportError(
        "tempoconf.client.openfeature needs the OpenFeature SDK: "
        "pip install 'tempoconf[openfeature]' (openfeature-sdk>=0.10)"
    ) from exc

__all__ = ["PROVIDER_NAME", "AsyncTempoconfProvider", "TempoconfProvider"]

logger = logging.getLogger("tempoconf.client")

PROVIDER_NAME = "tempoconf"
"""`get_metadata().name`, what OpenFeature's events and hooks name this provider by."""

Status = Literal["not_ready", "ready", "stale", "error"]
ObjectValue = Sequence[FlagValueType] | Mapping[str, FlagValueType]
_T = TypeVar("_T")
_Client = TypeVar("_Client", ConfigClient, AsyncConfigClient)

_REASONS = {"stable": Reason.STATIC, "targeting": Reason.TARGETING_MATCH, "split": Reason.SPLIT}


class _NotReadyError(ProviderNotReadyError):
    """PROVIDER_NOT_READY whose str() is its message (the SDK's ERROR event quotes str())."""

    def __str__(self) -> str:
        return self.error_message or "provider not ready"


class _FatalError(ProviderFatalError):
    def __str__(self) -> str:
        return self.error_message or "provider fatal error"


class _ProviderBase(AbstractProvider, Generic[_Client]):
    """Resolution and events over one client per config; the flavours add the lifecycle.

    Settings as ConfigClient's (`options`, a ClientOptions, and its fields as keyword arguments),
    the same for every config.
    """

    def __init__(
        self,
        api_url: str,
        paths: Sequence[str],
        *,
        options: ClientOptions | None = None,
        **overrides: Unpack[ClientSettings],
    ) -> None:
        unique = _check_paths(paths)
        options = client_options(options, overrides)
        # One registry (default a private one) for the series of every config.
        registry = options.registry if options.registry is not None else CollectorRegistry()
        options = dataclasses.replace(options, registry=registry)
        self._clients: dict[str, _Client] = {
            path: self._client(api_url, path, options) for path in unique
        }
        self.registry = registry
        """The registry holding `tempoconf_agent_config_version` for every config."""
        super().__init__()
        self._paths = unique
        self._namespace = options.namespace
        self._client_id: str = self._clients[unique[0]].client_id
        self._channel = options.channel
        self._labels = dict(options.labels or {})
        # Re-entrant: an event emitted under it may run a handler of ours in the same thread.
        self._lock = threading.RLock()
        self._last: dict[str, ConfigValue] = {}
        """The value in use per path, as last delivered (to tell a new version from the old)."""
        self._evaluated: dict[str, dict[str, FlagKey]] = {path: {} for path in self._paths}
        """The keys evaluated so far per path: what CONFIGURATION_CHANGED compares."""
        self._initialized = False
        self._closed = False
        self._announced: Status = "not_ready"
        """The status the SDK was last told (READY by the SDK itself when initialize returns)."""
        self._removers: list[Callable[[], None]] = []
        self._ready_handler_added = False
        self._lifecycle = threading.Lock()
        """Held by the blocking flavour's initialize and shutdown (initialize does I/O under it)."""

    def _client(self, api_url: str, path: str, options: ClientOptions) -> _Client:
        """The client of one config (the flavour's)."""
        raise NotImplementedError

    # -- OpenFeature ---------------------------------------------------------------------------
    def get_metadata(self) -> Metadata:
        return Metadata(name=PROVIDER_NAME)

    def resolve_boolean_details(
        self,
        flag_key: str,
        default_value: bool,
        evaluation_context: EvaluationContext | None = None,
    ) -> FlagResolutionDetails[bool]:
        return self._resolve(flag_key, default_value, evaluation_context, "boolean")

    def resolve_string_details(
        self,
        flag_key: str,
        default_value: str,
        evaluation_context: EvaluationContext | None = None,
    ) -> FlagResolutionDetails[str]:
        return self._resolve(flag_key, default_value, evaluation_context, "string")

    def resolve_integer_details(
        self,
        flag_key: str,
        default_value: int,
        evaluation_context: EvaluationContext | None = None,
    ) -> FlagResolutionDetails[int]:
        return self._resolve(flag_key, default_value, evaluation_context, "integer")

    def resolve_float_details(
        self,
        flag_key: str,
        default_value: float,
        evaluation_context: EvaluationContext | None = None,
    ) -> FlagResolutionDetails[float]:
        return self._resolve(flag_key, default_value, evaluation_context, "float")

    def resolve_object_details(
        self,
        flag_key: str,
        default_value: ObjectValue,
        evaluation_context: EvaluationContext | None = None,
    ) -> FlagResolutionDetails[ObjectValue]:
        return self._resolve(flag_key, default_value, evaluation_context, "object")

    # The *_async variants are AbstractProvider's: they call the above, which read the clients'
    # state only (no I/O), so they never block an event loop.

    # -- reading -------------------------------------------------------------------------------
    @property
    def paths(self) -> tuple[str, ...]:
        """The configs this provider watches (a flag key of any other path is FLAG_NOT_FOUND)."""
        return self._paths

    @property
    def client_id(self) -> str:
        """The id every config is resolved for (it decides the percentile buckets)."""
        return self._client_id

    def config(self, path: str) -> ConfigValue | None:
        """The value in use for `path` (None before any), as the flags of that path resolve it."""
        client = self._clients.get(path)
        return client.current if client is not None else None

    # -- resolution ----------------------------------------------------------------------------
    def _resolve(
        self,
        flag_key: str,
        default: _T,
        context: EvaluationContext | None,
        flag_type: FlagType,
    ) -> FlagResolutionDetails[_T]:
        try:
            key = parse_flag_key(flag_key)
        except FlagKeyError as exc:
            return _error(default, ErrorCode.PARSE_ERROR, str(exc))
        if context is not None and context.targeting_key not in (None, "", self._client_id):
            return _error(
                default,
                ErrorCode.INVALID_CONTEXT,
                f"targetingKey {context.targeting_key!r}: this provider resolves every flag for "
                f"client {self._client_id!r}, the identity it was built with (a service that "
                "resolves for many identities uses the API's OFREP endpoints)",
            )
        client = self._clients.get(key.path)
        if client is None:
            return _error(
                default,
                ErrorCode.FLAG_NOT_FOUND,
                f"config {key.path!r} is not one this provider watches "
                f"(give it in paths: {', '.join(self._paths)})",
            )
        with self._lock:
            self._evaluated[key.path].setdefault(key.text, key)
        value = client.current
        if value is None:
            return self._no_value(key, client.last_error, default)
        found = lookup(value.value, key.tokens)
        if found is MISSING:
            return _error(
                default,
                ErrorCode.FLAG_NOT_FOUND,
                f"{key.pointer!r} names nothing in {self._namespace}/{key.path} "
                f"version {value.version}",
            )
        flag_value = typed(found, flag_type)
        if flag_value is MISSING:
            return _error(
                default,
                ErrorCode.TYPE_MISMATCH,
                f"{key.text} is {json_type(found)} {short(found)}, not {flag_type} "
                f"(version {value.version})",
            )
        return FlagResolutionDetails(
            value=flag_value,
            reason=self._reason(value),
            variant=value.version,
            flag_metadata=flag_metadata(value),
        )

    def _no_value(
        self, key: FlagKey, error: ConfigClientError | None, default: _T
    ) -> FlagResolutionDetails[_T]:
        where = f"{self._namespace}/{key.path}"
        if isinstance(error, ConfigRequestError) and error.status == 404:
            return _error(default, ErrorCode.FLAG_NOT_FOUND, f"the API knows no config {where}")
        why = error or ("not initialised yet" if not self._initialized else "no answer yet")
        return _error(
            default, ErrorCode.PROVIDER_NOT_READY, f"no value for {where}, none cached: {why}"
        )

    def _reason(self, value: ConfigValue) -> Reason:
        if value.source == "cache":
            return Reason.CACHED
        if value.stage == STABLE:
            return Reason.STATIC
        if value.stage_kind is not None:
            return _REASONS[value.stage_kind]
        # An answer without `stage_kind` (an older API, or a value cached from one and since
        # confirmed by a 304): the kind is guessed from the stage's name.
        return _REASONS[stage_kind(value.stage, channel=self._channel, labels=self._labels)]

    # -- events --------------------------------------------------------------------------------
    def _watch(self, path: str, client: _Client) -> None:
        """Track the value in use of `path` and the API's reachability (before watching starts)."""
        with self._lock:
            current = client.current
            if current is not None:
                self._last[path] = current
            self._removers.append(client.on_source_change(self._on_source))

    def _on_value(self, path: str, value: ConfigValue) -> None:
        """A client's subscriber: on a new version in use, CONFIGURATION_CHANGED with the keys."""
        with self._lock:
            previous = self._last.get(path)
            self._last[path] = value
            if previous is None or previous.version == value.version:
                return  # the first value (READY says it), or the same version again
            if not self._initialized or self._closed:
                return
            changed = {path: None}
            for key in self._evaluated[path].values():
                if json_text(lookup(previous.value, key.tokens)) != json_text(
                    lookup(value.value, key.tokens)
                ):
                    changed[key.text] = None
            self.emit_provider_configuration_changed(
                ProviderEventDetails(
                    flags_changed=list(changed),
                    message=(
                        f"{self._namespace}/{path}: version {value.version} in use "
                        f"(stage {value.stage}), was {previous.version}"
                    ),
                    metadata={"path": path, "version": value.version, "stage": value.stage},
                )
            )

    def _on_source(self, source: Source) -> None:
        """A client's source flipped: tell the SDK when the provider's status changes with it."""
        with self._lock:
            if not self._initialized or self._closed:
                return
            status = self._status()
            # ERROR stays until every config has a value (a value, once had, is never lost).
            if (status == "ready" or status == "stale") and status != self._announced:
                self._announce(status)

    def _after_sdk_ready(self, details: EventDetails) -> None:
        """A READY event: the SDK emits one when initialize returns, whatever the cache said.
        While a value comes from the cache, say STALE after it (an event emitted from inside
        initialize would be overwritten by that READY)."""
        if details.provider_name != PROVIDER_NAME:
            return
        with self._lock:
            if self._closed or not self._initialized or self._status() != "stale":
                return
            self._announce("stale")

    def _announce(self, status: Literal["ready", "stale"]) -> None:
        """Emit READY or STALE (called with the lock held, so events keep their order)."""
        self._announced = status
        if status == "ready":
            message = "the API answers for every config"
            self.emit_provider_ready(ProviderEventDetails(message=message))
        else:
            message = self._stale_message()
            self.emit_provider_stale(ProviderEventDetails(message=message))
        logger.info("OpenFeature provider %s: %s", status.upper(), message)

    def _finish_initialize(self) -> None:
        """READY (the SDK says it when this returns), STALE after it, or ERROR (raises)."""
        with self._lock:
            self._initialized = True
            status = self._status()
            if status == "error":
                self._announced = "error"
                raise _NotReadyError(self._missing_message())
            self._announced = "ready"
            add_handler = status == "stale" and not self._ready_handler_added
            self._ready_handler_added = self._ready_handler_added or add_handler
        if add_handler:
            # Outside our lock: the SDK runs the handler at once if READY is already its status.
            openfeature_api.add_handler(ProviderEvent.PROVIDER_READY, self._after_sdk_ready)

    def _end(self) -> None:
        """No more events (shutdown): listeners removed, the READY handler too."""
        with self._lock:
            self._closed = True
            removers, self._removers = self._removers, []
            handler_added, self._ready_handler_added = self._ready_handler_added, False
        for remove in removers:
            remove()
        if handler_added:
            with contextlib.suppress(ValueError):  # openfeature's api.shutdown() cleared it
                openfeature_api.remove_handler(ProviderEvent.PROVIDER_READY, self._after_sdk_ready)

    def _status(self) -> Status:
        values = [client.current for client in self._clients.values()]
        if any(value is None for value in values):
            return "error"
        if any(value is not None and value.source == "cache" for value in values):
            return "stale"
        return "ready"

    def _stale_message(self) -> str:
        parts = []
        for path, client in self._clients.items():
            value = client.current
            if value is not None and value.source == "cache":
                parts.append(
                    f"{path} version {value.version}, confirmed {value.age_seconds:.0f}s ago "
                    f"({client.last_error or 'not confirmed yet'})"
                )
        return "served from the disk cache, the API unreachable: " + "; ".join(parts)

    def _missing_message(self) -> str:
        missing = [
            f"{self._namespace}/{path}: {client.last_error or 'no answer'}"
            for path, client in self._clients.items()
            if client.current is None
        ]
        return "no value from the API and none cached for " + "; ".join(missing)


class TempoconfProvider(_ProviderBase[ConfigClient]):
    """The blocking flavour: one `ConfigClient` per config of `paths`, watching in its thread.

    `openfeature.api.set_provider(provider)` (or `set_provider_and_wait`) calls `initialize()`:
    it asks the API for every config at once (each up to `timeout`), falls back on the disk cache
    for those it cannot get, and starts watching them all. `shutdown()` (openfeature's
    `api.shutdown()`) stops the watchers and closes the connections; a provider is initialised
    once.

    The identity (`client_id`, default the hostname; `channel`; `labels`) and the other settings
    (`options`, a ClientOptions, and its fields as keyword arguments) are `ConfigClient`'s, the
    same for every config. One `registry` (default a private one) holds the
    `tempoconf_agent_config_version` series of all of them.
    """

    def _client(self, api_url: str, path: str, options: ClientOptions) -> ConfigClient:
        return ConfigClient(api_url, path, options=options)

    _started = False

    def initialize(self, evaluation_context: EvaluationContext) -> None:
        """Get every config (API, else disk cache), start watching; raises (the SDK says ERROR)
        when one has neither: its watcher keeps trying, and READY follows once it has a value."""
        with self._lifecycle:
            if self._closed:
                raise _FatalError("this provider was shut down: make a new one")
            if not self._started:
                # A get() per config, in parallel: a host that cannot reach the API waits one
                # timeout, not one per config.
                with concurrent.futures.ThreadPoolExecutor(
                    max_workers=len(self._paths), thread_name_prefix="tempoconf-provider-init"
                ) as pool:
                    list(pool.map(_first_value, self._clients.values()))
                for path, client in self._clients.items():
                    self._watch(path, client)
                    client.subscribe(_bind(self._on_value, path))
                    client.start()
                self._started = True
        self._finish_initialize()

    def shutdown(self) -> None:
        """Stop watching, close the HTTP connections, remove the gauge series (idempotent)."""
        with self._lifecycle:
            self._end()
            for client in self._clients.values():
                client.close()


class AsyncTempoconfProvider(_ProviderBase[AsyncConfigClient], AsyncClosing):
    """The asyncio flavour: one `AsyncConfigClient` per config, watch tasks in your event loop.

    OpenFeature initialises a provider from a thread of its own, outside any loop, so the watch
    starts first, in your loop; then the SDK's `initialize()` reads what it found::

        async with AsyncTempoconfProvider(api_url, ["myproject/flags"]) as provider:
            api.set_provider_and_wait(provider)  # no I/O: READY, STALE (disk cache) or ERROR
            value = await api.get_client().get_boolean_value_async("myproject/flags#/on", False)

    `start()` / `aclose()` do what `async with` does. Same arguments as `TempoconfProvider`.
    """

    def _client(self, api_url: str, path: str, options: ClientOptions) -> AsyncConfigClient:
        return AsyncConfigClient(api_url, path, options=options)

    _loop: asyncio.AbstractEventLoop | None = None
    _closing: asyncio.Future[None] | concurrent.futures.Future[None] | None = None
    """The closing of the clients, once shutdown() or aclose() started it."""

    async def start(self) -> None:
        """Get every config (API, else disk cache) at once, then start the watch tasks in the
        running loop (idempotent)."""
        if self._closed:
            raise _FatalError("this provider was shut down: make a new one")
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        await asyncio.gather(*(_first_value_async(c) for c in self._clients.values()))
        for path, client in self._clients.items():
            self._watch(path, client)
            client.subscribe(_bind(self._on_value, path))
            client.start()

    def initialize(self, evaluation_context: EvaluationContext) -> None:
        """What `start()` found: READY, STALE (disk cache) or ERROR (raises; the watch tasks
        keep trying, and READY follows once every config has a value)."""
        if self._closed:
            raise _FatalError("this provider was shut down: make a new one")
        if self._loop is None:
            raise _NotReadyError(
                "AsyncTempoconfProvider watches in your event loop: `await provider.start()` "
                "(or `async with provider:`) before openfeature's set_provider"
            )
        self._finish_initialize()

    def shutdown(self) -> None:
        """Stop the watch tasks and close the connections (from any thread; idempotent).
        From async code, `await provider.aclose()` also waits until that is done."""
        self._end()
        loop = self._loop
        if loop is None or loop.is_closed() or self._closing is not None:
            return
        running: asyncio.AbstractEventLoop | None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # a thread of openfeature's, outside any loop
            running = None
        if running is loop:
            self._closing = loop.create_task(self._close_clients())
        else:
            with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile
                self._closing = asyncio.run_coroutine_threadsafe(self._close_clients(), loop)

    async def aclose(self) -> None:
        """Stop the watch tasks, close the connections, remove the gauge series (idempotent)."""
        self._end()
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close_clients())
        if isinstance(self._closing, concurrent.futures.Future):
            await asyncio.wrap_future(self._closing)
        else:
            await self._closing

    async def _close_clients(self) -> None:
        for client in self._clients.values():
            await client.aclose()

    async def __aenter__(self) -> AsyncTempoconfProvider:
        await self.start()
        return self


# -- helpers ----------------------------------------------------------------------------------
def _check_paths(paths: Sequence[str]) -> tuple[str, ...]:
    if isinstance(paths, str):
        raise TypeError(f"paths is a list of config paths, not the string {paths!r}")
    unique = tuple(dict.fromkeys(paths))
    if not unique:
        raise ValueError("paths names no config: give the config paths whose flags to resolve")
    for path in unique:
        if "#" in path:
            raise ValueError(f"{path!r} is a flag key, not a config path (no '#' in a path)")
    return unique


def _first_value(client: ConfigClient) -> None:
    with contextlib.suppress(ConfigClientError):  # recorded: last_error, and current stays None
        client.get()


async def _first_value_async(client: AsyncConfigClient) -> None:
    with contextlib.suppress(ConfigClientError):
        await client.get()


def _bind(callback: Callable[[str, ConfigValue], None], path: str) -> Callable[[ConfigValue], None]:
    return lambda value: callback(path, value)


def _error(default: _T, code: ErrorCode, message: str) -> FlagResolutionDetails[_T]:
    return FlagResolutionDetails(
        value=default, reason=Reason.ERROR, error_code=code, error_message=message
    )
