"""How every part of tempoconf connects to Temporal: the CLI's commands, the worker and the API.

Address and namespace come from Settings (flags, then `TEMPORAL_ADDRESS` / `TEMPORAL_NAMESPACE`).
TLS, client certificates and the API key come from the variables the Temporal CLI reads
(`TEMPORAL_TLS_*`, `TEMPORAL_API_KEY`, `TEMPORAL_GRPC_META_*`), parsed by the SDK's own
`temporalio.envconfig`, so a `temporal workflow ...` hint works in the same shell as printed.
The CLI's config file (`TEMPORAL_CONFIG_FILE`, `TEMPORAL_PROFILE`) reaches here as the variables
its profile stands for (`tempoconf.settings.temporal_profile`, read by `Settings.from_env`). A secret is
never printed: the API key is redacted from every message.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tempoconf.settings import Settings

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.runtime import Runtime
    from temporalio.service import TLSConfig

__all__ = [
    "CORE_LOGGER",
    "CoreLogThrottle",
    "TLS_HINT",
    "TemporalConnection",
    "TemporalSettingsError",
    "sdk_metrics_runtime",
    "temporal_connection",
    "use_process_runtime",
    "worker_runtime",
]

TLS_HINT = (
    "a server behind TLS needs TEMPORAL_TLS=true or TEMPORAL_TLS_SERVER_CA_CERT_PATH, mTLS also "
    "TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH, Temporal Cloud with an API "
    "key TEMPORAL_API_KEY (docs/how-to/tls.md)"
)

# The variables of a PEM source: the `_PATH` one names a file, the `_DATA` one holds the PEM.
_CA = "TEMPORAL_TLS_SERVER_CA_CERT"
_CERT = "TEMPORAL_TLS_CLIENT_CERT"
_KEY = "TEMPORAL_TLS_CLIENT_KEY"


class TemporalSettingsError(ValueError):
    """The Temporal connection settings are unusable; the message names the variable."""


@dataclass(frozen=True)
class TemporalConnection:
    """Everything `Client.connect` needs, resolved; `where` describes it without secrets."""

    target_host: str
    namespace: str
    tls: bool | TLSConfig = False
    api_key: str | None = field(default=None, repr=False)
    rpc_metadata: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def security(self) -> str:
        """`no TLS`, `TLS`, `TLS, client certificate`, `TLS, API key` (what, never the secret)."""
        if self.tls is False:
            return "no TLS, API key" if self.api_key else "no TLS"
        parts = ["TLS"]
        if not isinstance(self.tls, bool) and self.tls.client_cert is not None:
            parts.append("client certificate")
        if self.api_key:
            parts.append("API key")
        return ", ".join(parts)

    @property
    def where(self) -> str:
        return f"Temporal at {self.target_host} (namespace {self.namespace}, {self.security})"

    def redact(self, text: str) -> str:
        """`text` with the API key and metadata values replaced: error messages may echo them."""
        for secret in (self.api_key, *self.rpc_metadata.values()):
            if secret:
                text = text.replace(secret, "***")
        return text

    def diagnose(self, error: str) -> str | None:
        """What a failure to connect most likely means, in words, from the SDK's error text."""
        if "UnknownIssuer" in error or "InvalidCertificate" in error:
            return (
                "the server's certificate is not signed by a CA this client trusts: set "
                "TEMPORAL_TLS_SERVER_CA_CERT_PATH to the CA that signed it (and "
                "TEMPORAL_TLS_SERVER_NAME if its name is not the address's host)"
            )
        if any(
            word in error for word in ("401 Unauthorized", "Unauthenticated", "PermissionDenied")
        ):
            return (
                "the server refused the credentials: check TEMPORAL_API_KEY (or the client "
                "certificate) and that it grants access to the namespace"
            )
        if any(
            word in error for word in ("CertificateRequired", "HandshakeFailure", "400 Bad Request")
        ):
            if isinstance(self.tls, bool) or self.tls.client_cert is None:
                return (
                    "the server refused the connection: if it requires a client certificate "
                    "(mTLS), set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH"
                )
            return (
                "the server refused the client certificate: it must be signed by a CA the server "
                "trusts (TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH)"
            )
        if "ConnectionRefused" in error or "Connection refused" in error:
            return "connection refused (nothing listens at that address)"
        if self.tls is False and ("h2 protocol error" in error or "FRAME_SIZE_ERROR" in error):
            return "the server answered as a TLS server would, and this client does not use TLS"
        if self.tls is False and "connection closed" in error:
            # What the server sees first decides the SDK's error: nginx may close before it answers.
            return (
                "the server closed the connection without an answer, as a TLS server does when "
                "the client does not use TLS"
            )
        return None

    async def connect(
        self, *, identity: str | None = None, runtime: Runtime | None = None
    ) -> Client:
        """`Client.connect`; RuntimeError (the SDK's) when the server cannot be reached. While
        tracing is on (tempoconf.tracing) the client, and every worker made from it, traces."""
        from temporalio.client import Client

        from tempoconf.temporal.payloads import DATA_CONVERTER
        from tempoconf.tracing import temporal_plugins

        return await Client.connect(
            self.target_host,
            data_converter=DATA_CONVERTER,
            namespace=self.namespace,
            api_key=self.api_key,
            tls=self.tls,
            rpc_metadata=self.rpc_metadata,
            identity=identity,
            runtime=runtime,
            plugins=temporal_plugins(),
        )


def temporal_connection(settings: Settings) -> TemporalConnection:
    """The connection `settings` describe: its address and namespace, and the TLS / API key
    variables it carries (`Settings.temporal_env`). TemporalSettingsError when they are unusable."""
    from temporalio.envconfig import ClientConfigProfile

    env = dict(settings.temporal_env)
    if env.get("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "").strip().lower() in ("1", "true"):
        raise TemporalSettingsError(
            "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION is not supported by tempoconf (the Temporal "
            "Python SDK always verifies the server's name): set TEMPORAL_TLS_SERVER_NAME to the "
            "name in the server's certificate instead"
        )
    tls_switch = env.get("TEMPORAL_TLS")
    if tls_switch is not None and tls_switch.strip().lower() not in ("1", "0", "true", "false"):
        raise TemporalSettingsError(f"TEMPORAL_TLS is {tls_switch!r}: give true or false")
    try:
        profile = ClientConfigProfile.load(disable_file=True, override_env_vars=env)
    except Exception as error:  # the SDK's ConfigError: a value it cannot parse
        message = str(error)
        if env.get("TEMPORAL_API_KEY"):
            message = message.replace(env["TEMPORAL_API_KEY"], "***")
        raise TemporalSettingsError(f"Temporal connection settings: {message}") from None
    tls: bool | TLSConfig = False
    if profile.tls is not None and profile.tls.disabled is not True:
        tls = _tls_config(
            server_name=profile.tls.server_name,
            ca=_pem(_CA, profile.tls.server_root_ca_cert),
            cert=_pem(_CERT, profile.tls.client_cert),
            key=_pem(_KEY, profile.tls.client_private_key),
        )
    elif profile.tls is None and profile.api_key:
        tls = True  # as the CLI: an API key turns TLS on unless TEMPORAL_TLS=false
    return TemporalConnection(
        target_host=settings.resolved_temporal_address,
        namespace=settings.temporal_namespace,
        tls=tls,
        api_key=profile.api_key or None,
        rpc_metadata=dict(profile.grpc_meta),
    )


def _pem(variable: str, source: Path | str | bytes | None) -> bytes | None:
    if source is None:
        return None
    if isinstance(source, Path):
        try:
            return source.read_bytes()
        except OSError as error:
            raise TemporalSettingsError(
                f"cannot read {variable}_PATH {source}: {error.strerror or error}"
            ) from None
    return source.encode() if isinstance(source, str) else source


def _tls_config(
    *, server_name: str | None, ca: bytes | None, cert: bytes | None, key: bytes | None
) -> TLSConfig:
    from temporalio.service import TLSConfig

    if (cert is None) != (key is None):
        given, missing = (_CERT, _KEY) if key is None else (_KEY, _CERT)
        raise TemporalSettingsError(
            f"{given}_PATH (or _DATA) is set but {missing}_PATH (or _DATA) is not: a client "
            "certificate needs its private key, and the key its certificate"
        )
    return TLSConfig(
        server_root_ca_cert=ca, domain=server_name or None, client_cert=cert, client_private_key=key
    )


CORE_LOGGER = "temporalio.core"
"""The Python logger the SDK's Core (Rust) logs reach in a tempoconf process (`worker_runtime`)."""
CORE_LOG_WINDOW = 60.0
"""Seconds during which a Core message of one kind is logged once (`CoreLogThrottle`)."""


class CoreLogThrottle(logging.Filter):
    """Lets through one record of each kind of Core message (its text with the numbers left out)
    per `window` seconds; the first after a window says how many were left out meanwhile.

    While the server is down, Core logs a warning for every failed poll (about ten a second);
    one of each per minute says as much."""

    _MAX_KINDS = 1000

    def __init__(
        self, window: float = CORE_LOG_WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._window = window
        self._clock = clock
        self._kinds: dict[tuple[str, int, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        core = getattr(record, "temporal_log", None)
        text = str(getattr(core, "message", None) or record.msg)
        kind = (record.name, record.levelno, re.sub(r"\d+", "N", text))
        now = self._clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen[0] < self._window:
            seen[1] += 1
            return False
        if len(self._kinds) >= self._MAX_KINDS:
            self._kinds.clear()
        self._kinds[kind] = [now, 0.0]
        if seen is not None and seen[1]:
            record.msg = f"{record.msg} ({int(seen[1])} more like it in the last {self._window:g}s)"
        return True


@functools.cache
def worker_runtime(metrics_address: str | None = None) -> Runtime:
    """The SDK's runtime of a worker process: Core's logs go to Python's logging (logger
    `CORE_LOGGER`: one format, no colour codes in a log file, `CoreLogThrottle`), and with a
    `metrics_address` it serves the SDK's metrics (`temporal_*`) for Prometheus there.

    One per process and address: each Runtime owns threads and the exporter's socket."""
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        PrometheusConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    core_logger = logging.getLogger(CORE_LOGGER)
    if not any(isinstance(existing, CoreLogThrottle) for existing in core_logger.filters):
        core_logger.addFilter(CoreLogThrottle())
    logs = LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=core_logger, prepend_target_on_message=False),
    )
    try:
        return Runtime(
            telemetry=TelemetryConfig(
                logging=logs,
                metrics=None
                if metrics_address is None
                else PrometheusConfig(bind_address=metrics_address),
            )
        )
    except ValueError as error:
        raise TemporalSettingsError(
            f"SDK metrics address {metrics_address!r} (TEMPOCONF_SDK_METRICS_ADDRESS or "
            f"--sdk-metrics-address): {error}; give IP:PORT, e.g. 127.0.0.1:9465"
        ) from None


def use_process_runtime() -> Runtime:
    """`worker_runtime()` made the SDK's default runtime, for a process whose clients connect
    without naming one (the API's connector, the dev stack's worker and API): Core's logs go
    through Python's logging, throttled, rather than the default runtime's coloured lines, one
    per failed call while Temporal is down. Call it before the first client connects."""
    from temporalio.runtime import Runtime

    runtime = worker_runtime()
    # Not an error when already set: the same runtime, by the cache above.
    Runtime.set_default(runtime, error_if_already_set=False)
    return runtime


def sdk_metrics_runtime(address: str) -> Runtime:
    """The worker's runtime serving the SDK's metrics (`temporal_*`) on `address`
    (`worker_runtime`)."""
    return worker_runtime(address)
