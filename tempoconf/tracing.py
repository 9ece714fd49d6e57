"""OpenTelemetry traces of a tempoconf process, switched on by the standard `OTEL_*` variables.

Off unless spans have somewhere to go: `OTEL_TRACES_EXPORTER` (`console`, `otlp`, both
comma-separated; `none` is off) or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: `otlp`, the specification's default exporter, is implied).
`OTEL_SDK_DISABLED=true` wins over both. Off, nothing of OpenTelemetry is even imported: no tracer
provider, no Temporal plugin, no instrumentation.

On (`setup_tracing`, once per process, before it connects to Temporal or opens the store):
- a replay-safe tracer provider (`temporalio.contrib.opentelemetry.create_tracer_provider`: span
  ids drawn from the workflow's deterministic random, ends skipped while a history replays), set
  as the global one; resource from `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES`, the service
  name defaulting to the process's (`tempoconf-worker`, `tempoconf-api`, ...);
- `temporal_plugins()`: the contrib's `OpenTelemetryPlugin` for `Client.connect`, which traces
  StartWorkflow / RunWorkflow / StartActivity / RunActivity, carries the context in Temporal
  headers and passes `opentelemetry` through the workflow sandbox;
- the rollout's own step spans (`tempoconf.rollout.spans`), store spans (`store_tracer`, used by
  the store's engine) and httpx spans (Prometheus queries, webhooks, with `traceparent`), the last
  two only inside a span already open (an activity, an admin request), never as traces of their
  own: a poll, a snapshot reload or the client SDK's requests make none.
Everything else the SDK reads from the environment itself (`OTEL_EXPORTER_OTLP_*` headers,
timeouts, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`). `shutdown_tracing()` flushes at exit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Tracer
    from temporalio.plugin import SimplePlugin

__all__ = [
    "EXPORTERS",
    "OTEL_EXTRA_HINT",
    "TracingConfig",
    "TracingSettingsError",
    "admin_tracer",
    "setup_tracing",
    "shutdown_tracing",
    "store_tracer",
    "temporal_plugins",
    "tracing_config",
    "tracing_enabled",
]

EXPORTERS = ("console", "otlp", "none")
"""What `OTEL_TRACES_EXPORTER` may name (comma-separated)."""
OTEL_EXTRA_HINT = "install tempoconf with its `otel` extra: pip install 'tempoconf[otel]'"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class TracingSettingsError(ValueError):
    """The `OTEL_*` variables ask for something tempoconf cannot do; the message names them."""


@dataclass(frozen=True)
class TracingConfig:
    """Where spans go: no exporter means tracing is off."""

    exporters: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.exporters)


def tracing_config(environ: Mapping[str, str]) -> TracingConfig:
    """What the `OTEL_*` variables in `environ` switch on; TracingSettingsError for a value that
    cannot be used."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TracingConfig()
    named = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if not named:
        # The specification's default exporter is otlp: an endpoint given says where it sends.
        endpoint = any(environ.get(variable, "").strip() for variable in _ENDPOINTS)
        return TracingConfig(("otlp",) if endpoint else ())
    exporters = tuple(dict.fromkeys(part.strip().lower() for part in named.split(",")))
    unknown = [name for name in exporters if name not in EXPORTERS]
    if unknown or not all(exporters):
        raise TracingSettingsError(
            f"OTEL_TRACES_EXPORTER is {named!r}: give console, otlp or none (comma-separated)"
        )
    exporters = tuple(name for name in exporters if name != "none")
    if "otlp" in exporters:
        for variable in _PROTOCOLS:
            protocol = environ.get(variable, "").strip()
            if protocol and protocol != "http/protobuf":
                raise TracingSettingsError(
                    f"{variable} is {protocol!r}: tempoconf exports OTLP over HTTP only; set it "
                    "to http/protobuf or leave it unset (and point the endpoint at the "
                    "collector's HTTP port, 4318 by default)"
                )
    return TracingConfig(exporters)


@dataclass
class _Tracing:
    provider: Any  # the ReplaySafeTracerProvider (typed loosely: it is no SDK TracerProvider)
    gated: TracerProvider
    plugins: list[SimplePlugin]


_active: _Tracing | None = None


def tracing_enabled() -> bool:
    """True once `setup_tracing` switched tracing on in this process."""
    return _active is not None


def setup_tracing(service: str, environ: Mapping[str, str] | None = None) -> bool:
    """Switch tracing on as the `OTEL_*` variables (of `environ`, default the process's) say;
    True when on. `service` is the service name unless the variables give one. Once per process:
    a second call changes nothing. TracingSettingsError for unusable variables or a missing
    OpenTelemetry (the `otel` extra)."""
    global _active
    environ = os.environ if environ is None else environ
    config = tracing_config(environ)
    if _active is not None or not config.enabled:
        return _active is not None
    try:
        import opentelemetry.trace
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
        from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, create_tracer_provider
    except ImportError as error:
        raise TracingSettingsError(
            f"{_switch(environ, config)} asks for traces, but OpenTelemetry is not installed "
            f"({error.name} is missing): {OTEL_EXTRA_HINT}"
        ) from None

    from tempoconf.rollout import spans as rollout_spans

    processors = [_processor(name) for name in config.exporters]
    given = "OTEL_SERVICE_NAME" in environ or f"{SERVICE_NAME}=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if given else {SERVICE_NAME: service})
    provider = create_tracer_provider(resource=resource, shutdown_on_exit=False)
    # Store and HTTP spans only below a span already open: sampled with their parent, and never
    # as roots (the API's snapshot reloads and the client SDK's polls would each be a trace).
    gated = TracerProvider(
        resource=resource, sampler=ParentBased(root=ALWAYS_OFF), shutdown_on_exit=False
    )
    for processor in processors:
        provider.add_span_processor(processor)
        gated.add_span_processor(processor)
    opentelemetry.trace.set_tracer_provider(provider)
    HTTPXClientInstrumentor().instrument(tracer_provider=gated)
    rollout_spans.use_tracer(provider.get_tracer(rollout_spans.__name__))
    _active = _Tracing(
        provider=provider,
        gated=gated,
        plugins=[OpenTelemetryPlugin(add_temporal_spans=True)],
    )
    return True


def _switch(environ: Mapping[str, str], config: TracingConfig) -> str:
    """The variable that switched tracing on, for messages."""
    if environ.get("OTEL_TRACES_EXPORTER", "").strip():
        return f"OTEL_TRACES_EXPORTER={environ['OTEL_TRACES_EXPORTER'].strip()}"
    return next(f"{name} (otlp)" for name in _ENDPOINTS if environ.get(name, "").strip())


def _processor(exporter: str) -> SpanProcessor:
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    if exporter == "console":
        # Each span as it ends, to standard output: nothing waits in a buffer for a crash to lose.
        return SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as error:
        raise TracingSettingsError(
            f"OTEL_TRACES_EXPORTER=otlp needs the OTLP/HTTP exporter ({error.name} is missing): "
            f"{OTEL_EXTRA_HINT}"
        ) from None
    return BatchSpanProcessor(OTLPSpanExporter())


def temporal_plugins() -> list[SimplePlugin]:
    """The plugins for `Client.connect`: the contrib's OpenTelemetry plugin while tracing is on,
    none otherwise. Workers made from such a client trace too (and must not be given it again)."""
    return list(_active.plugins) if _active is not None else []


def store_tracer() -> Tracer | None:
    """The tracer of store spans (only below an open span), None while tracing is off."""
    return _active.gated.get_tracer("tempoconf.store") if _active is not None else None


def admin_tracer() -> Tracer | None:
    """The tracer of the API's admin requests, None while tracing is off."""
    if _active is None:
        return None
    tracer: Tracer = _active.provider.get_tracer("tempoconf.api")
    return tracer


def shutdown_tracing() -> None:
    """Export what is still buffered and stop the exporters (at the process's end); a no-op while
    tracing is off."""
    global _active
    tracing, _active = _active, None
    if tracing is None:
        return
    from tempoconf.rollout import spans as rollout_spans

    rollout_spans.use_tracer(None)
    # The processors are shared: shutting down the main provider flushes and stops them all.
    tracing.provider.shutdown()
