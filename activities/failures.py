"""Activity failures a person can read: short, with their cause named (issue 12, hole 8).

An unexpected exception (a store error, say) would reach Temporal as its full text and stack:
SQLAlchemy's message carries the SQL and its parameters, and a failure over Temporal's size limit
is shown as "Failure exceeds size limit." instead of its cause. `ShortFailures` replaces it with an
`ApplicationError` whose type is the exception's class name (retry policies match on it, as
before) and whose message is its first line, truncated: `str()` of it, as the workflow quotes it
in its reasons, reads `IntegrityError: (sqlite3.IntegrityError) ...`. The whole exception stays in
the worker's log: `OriginalErrorLogFilter` makes the SDK's one record of the failure show it.
"""

from __future__ import annotations

import logging
from typing import Any

from temporalio.exceptions import ApplicationError, FailureError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

__all__ = ["MAX_FAILURE_MESSAGE", "OriginalErrorLogFilter", "ShortFailures", "short_message"]

MAX_FAILURE_MESSAGE = 500
"""Characters of an unexpected error's message that reach Temporal."""


def short_message(error: BaseException, *, limit: int = MAX_FAILURE_MESSAGE) -> str:
    """The first line of the error's message (its class name when it has none), at most `limit`
    characters."""
    lines = str(error).strip().splitlines()
    text = lines[0].strip() if lines else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _ShortFailuresInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await self.next.execute_activity(input)
        except FailureError:
            raise  # ours (ApplicationError) or a cancellation: as they are
        except Exception as error:  # (an async completion is a BaseException: passes as it is)
            short = ApplicationError(short_message(error), type=type(error).__name__)
            short.original = error  # type: ignore[attr-defined]  # for OriginalErrorLogFilter
            # `from None`: as its cause or context, the SDK would send the whole error along.
            raise short from None


class OriginalErrorLogFilter(logging.Filter):
    """On the SDK's activity logger: its record of a failure shortened by `ShortFailures` shows
    the original error and its traceback (one record, as for any other failure)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        original = getattr(error, "original", None)
        if isinstance(original, BaseException):
            record.exc_info = (type(original), original, original.__traceback__)
            record.exc_text = None
        return True


class ShortFailures(Interceptor):
    """Worker interceptor: unexpected activity errors reach Temporal short (see the module)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ShortFailuresInbound(next)
