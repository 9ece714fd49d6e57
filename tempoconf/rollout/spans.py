"""Spans the rollout workflow opens around its steps: prepare, publish, hold, check, promote and
revert, beside the contrib's StartActivity / RunActivity spans (docs/how-to/tracing.md).

The tracer is the replay-safe one `tempoconf.tracing` sets up: a span opened in one workflow task
and closed in a later one (a hold spans many) is opened again with the same id each time the
history replays (starting at the time of the task that first opened it), and recorded once, when
it ends live. While tracing is off there is no tracer and `rollout_step` costs a None check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["rollout_step", "use_tracer"]

_tracer: Tracer | None = None


def use_tracer(tracer: Tracer | None) -> None:
    """The tracer of the steps' spans (`tempoconf.tracing`); None switches them off."""
    global _tracer
    _tracer = tracer


@contextmanager
def rollout_step(
    name: str,
    attributes: Mapping[str, str | int | float] | None = None,
    *,
    ends_ok: tuple[type[BaseException], ...] = (),
) -> Iterator[None]:
    """A span named `name` around the block, its `attributes` as `tempoconf.*` (nothing while
    tracing is off). An exception through it marks it failed, unless one of `ends_ok` (the run
    going on as a new one), and ends it all the same: the contrib's spans are left unended when an
    exception that fails no workflow passes (a halt, an unhealthy check), and the step would be
    lost."""
    tracer = _tracer
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span(
        name,
        attributes={f"tempoconf.{key}": value for key, value in (attributes or {}).items()},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except ends_ok:
            raise
        except BaseException as error:
            # Imported here, not at the top: OpenTelemetry is an optional extra.
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            raise
