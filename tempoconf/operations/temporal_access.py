"""How an operation reaches Temporal: each transport connects its own way (the admin API once per
process, the CLI once per command) and says which Temporal it is in its messages."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from tempoconf.operations.errors import Unavailable

if TYPE_CHECKING:
    # Imported where used: the API-mode CLI imports the operations without the Temporal SDK.
    from temporalio.client import Client
    from temporalio.service import RPCError

__all__ = ["RPC_TIMEOUT", "TemporalAccess", "temporal_calls", "temporal_unavailable"]

RPC_TIMEOUT = timedelta(seconds=15)
"""How long an operation waits for one answer of Temporal's."""


class TemporalAccess(Protocol):
    @property
    def where(self) -> str:
        """Which Temporal, for messages: `Temporal at host:port (namespace n)`."""
        ...

    async def client(self) -> Client:
        """The client, connecting on first use; Unavailable (saying why) when it cannot."""
        ...

    def redact(self, text: str) -> str:
        """`text` without the connection's secrets (an API key in an error message)."""
        ...


TRANSPORT_ERROR = "transport error"
"""The SDK's message when its connection broke under a call (reset, closed): status UNKNOWN, as
if Temporal had answered, though nothing answered (issue 31: the API answered 500)."""


def temporal_unavailable(error: RPCError) -> bool:
    """Temporal did not answer (unreachable, connection lost, timed out, cancelled): not an answer
    of its own."""
    from temporalio.service import RPCStatusCode

    if error.status == RPCStatusCode.UNKNOWN:
        return error.message.startswith(TRANSPORT_ERROR)
    return error.status in (
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.CANCELLED,
    )


@contextmanager
def temporal_calls(where: str) -> Iterator[None]:
    """Temporal's unavailability as Unavailable; other RPC errors pass through to the caller."""
    from temporalio.service import RPCError

    try:
        yield
    except RPCError as error:
        if temporal_unavailable(error):
            raise Unavailable(f"{where} did not answer: {error.message}") from error
        raise
