"""Writers in threads of one process (the worker's activities) queue for SQLite's one write lock
in the store, handed it as soon as it is free, instead of each polling SQLite's busy handler (whose
sleeps grow to 100 ms): with a busy timeout too short for any wait at all, none of them fails."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tempoconf.store import engine
from tempoconf.store.store import Store

THREADS = 8
WRITES = 25


def test_concurrent_writers_in_one_process_never_meet_sqlite_busy(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1 ms: a writer left to SQLite's lock fails with "database is locked" at the first wait.
    monkeypatch.setattr(engine, "_SQLITE_BUSY_TIMEOUT_MS", 1)
    store = Store(sqlite_url, migrate=True)
    try:

        def write(thread: int) -> None:
            for n in range(WRITES):
                store.record_event(
                    "default",
                    f"writers/{thread}",
                    action="rollout.command",
                    actor="test",
                    event_key=f"{thread}:{n}",
                )

        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(write, range(THREADS)))
        for thread in range(THREADS):
            assert len(store.history("default", f"writers/{thread}", limit=100)) == WRITES
    finally:
        store.close()
