"""Store spans: one per SQL statement the engine runs inside an open span (an activity, an admin
request), while tracing is on (`tempoconf.tracing`). Outside a span a statement records nothing
(its tracer samples only below a parent); with tracing off the engine carries no listener."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event

from tempoconf.tracing import store_tracer

__all__ = ["trace_engine"]

# Where the statement's span waits between the two cursor events (SQLAlchemy's execution context
# accepts attributes of its users).
_SPAN = "_tempoconf_span"


def trace_engine(engine: Engine) -> None:
    """Give `engine` its statement spans, if tracing is on."""
    tracer = store_tracer()
    if tracer is None:
        return
    # Imported here: OpenTelemetry is an optional extra, present whenever tracing is on.
    from opentelemetry.trace import SpanKind, Status, StatusCode

    system = engine.dialect.name

    def before(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        if context is None:
            return
        words = statement.split(None, 1)
        operation = words[0].upper() if words else "SQL"
        # Statement text, never its parameters: values in the store may be confidential.
        span = tracer.start_span(
            operation,
            kind=SpanKind.CLIENT,
            attributes={
                "db.system.name": system,
                "db.operation.name": operation,
                "db.query.text": statement,
            },
        )
        setattr(context, _SPAN, span)

    def after(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        span = getattr(context, _SPAN, None)
        if span is not None:
            setattr(context, _SPAN, None)
            span.end()

    def failed(exception_context: Any) -> None:
        context = exception_context.execution_context
        span = getattr(context, _SPAN, None) if context is not None else None
        if span is not None:
            setattr(context, _SPAN, None)
            error = exception_context.original_exception
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.end()

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    event.listen(engine, "handle_error", failed)
