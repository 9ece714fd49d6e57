"""The Temporal client of the admin endpoints: connected lazily, on first use.

The API serves configs without Temporal; only starting rollouts, signals and live status need it,
and those answer 503 with a clear message while it is unreachable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tempoconf.api.errors import ApiError
from tempoconf.settings import Settings
from tempoconf.temporal.connection import (
    TLS_HINT,
    TemporalConnection,
    TemporalSettingsError,
    temporal_connection,
)

__all__ = ["CONNECT_TIMEOUT", "TemporalConnector", "temporal_unavailable"]

CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a connection to Temporal before answering 503."""
_UNAVAILABLE = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}
)


class TemporalConnector:
    """`await connector.client()`: the Temporal client, connecting on first use; `client` given
    (tests) is used as is."""

    def __init__(self, settings: Settings, client: Client | None = None) -> None:
        self._settings = settings
        self._client = client
        self._lock = asyncio.Lock()
        # Resolved once (it reads the certificate files); unusable settings answer 503 saying why.
        self._connection: TemporalConnection | None = None
        self._settings_error: str | None = None
        try:
            self._connection = temporal_connection(settings)
        except TemporalSettingsError as error:
            self._settings_error = str(error)

    @property
    def where(self) -> str:
        if self._connection is not None:
            return self._connection.where
        s = self._settings
        return f"Temporal at {s.resolved_temporal_address} (namespace {s.temporal_namespace})"

    async def client(self) -> Client:
        """The client; ApiError(503) when Temporal cannot be reached."""
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                connection = self._connection
                if connection is None:
                    raise ApiError(503, f"{self.where} is not usable: {self._settings_error}")
                try:
                    self._client = await asyncio.wait_for(connection.connect(), CONNECT_TIMEOUT)
                except TimeoutError:
                    raise ApiError(
                        503, f"{self.where} is unreachable: no answer within {CONNECT_TIMEOUT:g}s"
                    ) from None
                except Exception as exc:  # any failure to connect is the same answer for the caller
                    reason = connection.redact(str(exc))
                    diagnosis = connection.diagnose(reason)
                    reason = f"{diagnosis} ({reason})" if diagnosis else reason
                    raise ApiError(
                        503, f"{self.where} is unreachable: {reason} ({TLS_HINT})"
                    ) from None
            return self._client


def temporal_unavailable(error: RPCError) -> bool:
    return error.status in _UNAVAILABLE


@contextmanager
def rpc_errors(where: str) -> Iterator[None]:
    """Temporal's unavailability as 503; other RPC errors pass through to the caller."""
    try:
        yield
    except RPCError as error:
        if temporal_unavailable(error):
            raise ApiError(503, f"{where} did not answer: {error.message}") from error
        raise
