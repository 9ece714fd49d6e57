"""How every part of tempoconf connects to Temporal: the CLI's commands, the worker and the API.

Address and namespace come from Settings (flags, then `TEMPORAL_ADDRESS` / `TEMPORAL_NAMESPACE`).
TLS, client certificates and the API key come from the variables the Temporal CLI reads
(`TEMPORAL_TLS_*`, `TEMPORAL_API_KEY`, `TEMPORAL_GRPC_META_*`), parsed by the SDK's own
`temporalio.envconfig`, so a `temporal workflow ...` hint works in the same shell as printed.
The CLI's config file (`TEMPORAL_CONFIG_FILE`, profiles) is not read: the environment is the one
source both share. A secret is never printed: the API key is redacted from every message.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tempoconf.settings import Settings

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.runtime import Runtime
    from temporalio.service import TLSConfig

__all__ = [
    "TLS_HINT",
    "TemporalConnection",
    "TemporalSettingsError",
    "sdk_metrics_runtime",
    "temporal_connection",
]

TLS_HINT = (
    "a server behind TLS needs TEMPORAL_TLS=true or TEMPORAL_TLS_SERVER_CA_CERT_PATH, mTLS also "
    "TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH, Temporal Cloud with an API "
    "key TEMPORAL_API_KEY (README: Temporal Cloud and TLS)"
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
        """`Client.connect`; RuntimeError (the SDK's) when the server cannot be reached."""
        from temporalio.client import Client

        return await Client.connect(
            self.target_host,
            namespace=self.namespace,
            api_key=self.api_key,
            tls=self.tls,
            rpc_metadata=self.rpc_metadata,
            identity=identity,
            runtime=runtime,
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


@functools.cache
def sdk_metrics_runtime(address: str) -> Runtime:
    """The SDK's runtime serving its metrics (`temporal_*`) for Prometheus on `address`.

    One per process and address: each Runtime owns threads and the exporter's socket."""
    from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

    try:
        return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))
    except ValueError as error:
        raise TemporalSettingsError(
            f"SDK metrics address {address!r} (TEMPOCONF_SDK_METRICS_ADDRESS or "
            f"--sdk-metrics-address): {error}; give IP:PORT, e.g. 127.0.0.1:9465"
        ) from None
