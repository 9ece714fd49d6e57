"""Push of store changes across processes: PostgreSQL LISTEN/NOTIFY.

The store sends `NOTIFY tempoconf_changes, '<revision>'` in the transaction of every revision
bump; `ChangeListener` holds a LISTEN connection and tells the SnapshotCache at once. While it
listens, the cache's revision poll slows to a fallback; while it is down, the poll is fast again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from tempoconf.api.snapshots import SnapshotCache
from tempoconf.store.store import CHANGE_CHANNEL

__all__ = ["ChangeListener", "LISTEN_FALLBACK_POLL_INTERVAL"]

LISTEN_FALLBACK_POLL_INTERVAL = 1.0
"""Seconds between revision checks while LISTEN works (a notification can still be lost)."""
_KEEPALIVE = 15.0
"""Seconds without a notification after which the connection is checked with a query."""
_RECONNECT_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)

logger = logging.getLogger(__name__)


class ChangeListener:
    """LISTEN on `conninfo` and call `cache.notify(revision)` for each notification; reconnects
    with backoff after any loss, and catches up (one check) after every (re)connect."""

    def __init__(
        self,
        conninfo: str,
        cache: SnapshotCache,
        *,
        fallback_poll_interval: float = LISTEN_FALLBACK_POLL_INTERVAL,
    ) -> None:
        self._conninfo = conninfo
        self._cache = cache
        self._fast_poll_interval = cache.poll_interval
        self._fallback_poll_interval = fallback_poll_interval
        self.listening = asyncio.Event()
        """Set while a LISTEN connection is up."""
        self.connections = 0
        """LISTEN connections made so far (reconnects included)."""

    async def run(self) -> None:
        """Listen until cancelled."""
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, connect_timeout=10
                ) as conn:
                    await conn.execute(f"LISTEN {CHANGE_CHANNEL}")
                    if failures:
                        logger.info("listening for store changes again")
                    failures = 0
                    self.connections += 1
                    self._up()
                    await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database may be away for a while: keep trying
                if failures == 0:
                    logger.warning(
                        "LISTEN %s failed, polling the store instead: %s", CHANGE_CHANNEL, exc
                    )
                failures += 1
            finally:
                self._down()
            await asyncio.sleep(_RECONNECT_DELAYS[min(failures, len(_RECONNECT_DELAYS)) - 1])

    async def _listen(self, conn: psycopg.AsyncConnection[object]) -> None:
        while True:
            async for notify in conn.notifies(timeout=_KEEPALIVE):
                revision: int | None = None
                with contextlib.suppress(ValueError):
                    revision = int(notify.payload)
                self._cache.notify(revision)
            # Quiet for a while: make sure the connection is still there (raises if not).
            await conn.execute("SELECT 1")

    def _up(self) -> None:
        self._cache.poll_interval = self._fallback_poll_interval
        self._cache.notify()  # changes made while nobody listened
        self.listening.set()

    def _down(self) -> None:
        self._cache.poll_interval = self._fast_poll_interval
        self._cache.notify()
        self.listening.clear()
