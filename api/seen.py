"""Clients seen polling, written to the store so a rollout plan can count who each stage would
reach (`Store.recent_clients`).

`ConfigPolls` remembers each named client's identity in memory (one dict assignment per poll);
`record_seen_clients` takes that dict every few seconds and upserts it in a thread, so the poll
path never waits for the store. Clients whose write failed (the store is down) are kept for the
next flush, within a bound (api/pending.py).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.pending import PendingWrites, flush_every
from tempoconf.api.polls import ConfigPolls, PendingSeen
from tempoconf.resolution import ClientIdentity
from tempoconf.storable import text_problem
from tempoconf.store import SeenClient, Store, refused_data

__all__ = [
    "MAX_CLIENT_ID_LENGTH",
    "SEEN_CLIENT_RETENTION",
    "SEEN_FLUSH_INTERVAL",
    "SEEN_UNWRITTEN_MAX",
    "UnwrittenSeen",
    "flush_seen_clients",
    "record_seen_clients",
    "seen_batches",
    "write_seen_batches",
]

SEEN_FLUSH_INTERVAL = 5.0
"""Seconds between two writes of the clients seen polling."""
SEEN_CLIENT_RETENTION = timedelta(days=7)
"""Clients not seen for this long are forgotten."""
MAX_CLIENT_ID_LENGTH = 255
"""Longest client id the store keeps (a poll's `client` parameter is not limited)."""
REWRITE_AFTER = timedelta(seconds=60)
"""A client whose identity and version have not changed is written again only this often: its
last_seen then lags by at most this much, and a steady fleet costs the store a row a minute per
client instead of one per flush."""
WRITTEN_KEPT = 200_000
"""Clients remembered as written; past that the memory is dropped (and everyone written again)."""
SEEN_UNWRITTEN_MAX = 100_000
"""Clients seen whose write failed (the store is down), kept for a later flush; past that the
oldest are dropped, counted (`tempoconf_api_seen_clients_dropped_total`) and logged."""
WRITE_CHUNK = 500
"""Clients per store call: short transactions, so SQLite's one write lock is never held long
enough to make the worker's stage publish wait out its busy timeout."""

logger = logging.getLogger(__name__)


def seen_batches(
    pending: PendingSeen, at: datetime
) -> tuple[dict[tuple[str, str], list[SeenClient]], int]:
    """`pending` as one list per (namespace, path), every client seen at `at` and listed once
    (a client that polled with several query strings comes once per string); and how many
    clients were left out because the store cannot keep their id."""
    configs: dict[tuple[str, str], dict[str, SeenClient]] = {}
    unstorable = 0
    for query, answer in pending.items():
        identity = query.client
        if len(identity.client_id) > MAX_CLIENT_ID_LENGTH or not _storable(identity):
            unstorable += 1
            continue
        configs.setdefault((query.namespace, query.path), {})[identity.client_id] = SeenClient(
            client=identity.client_id,
            channel=identity.channel,
            labels=dict(identity.labels),
            last_seen=at,
            last_version=answer.version,
        )
    return {config: list(clients.values()) for config, clients in configs.items()}, unstorable


def _storable(identity: ClientIdentity) -> bool:
    # The poll path refuses such identities already (400); checked again here, so that one that
    # got in anyway is dropped and counted instead of failing the write of its whole config.
    texts = [
        identity.client_id,
        identity.channel or "",
        *identity.labels,
        *identity.labels.values(),
    ]
    return all(text_problem(text) is None for text in texts)


WrittenClients = dict[tuple[str, str, str], tuple[object, datetime]]
"""(namespace, path, client) → (what was written: channel, labels, version; when)."""
SeenKey = tuple[str, str, str]
"""(namespace, path, client)."""
UnwrittenSeen = PendingWrites[SeenKey, SeenClient]
"""Clients seen whose write failed, for a later flush."""


async def flush_seen_clients(
    polls: ConfigPolls,
    store: Store,
    metrics: ApiMetrics,
    written: WrittenClients | None = None,
    unwritten: UnwrittenSeen | None = None,
) -> int:
    """Write the clients seen since the last flush; returns how many were written.

    With `unwritten` (kept across flushes by the caller), clients whose write failed (the store
    is down) stay there and are written at a later flush, merged with newer sightings (the
    newest of a client wins); past its limit the oldest are dropped, counted and logged once per
    flush. Without it they are logged and skipped.

    With `written` (kept across flushes by the caller), a client unchanged since it was written
    less than REWRITE_AFTER ago is skipped."""
    pending = polls.take_seen()  # swapped first: polls go on recording into a fresh dict
    if not pending and not unwritten:
        return 0
    # All of it off the event loop: after a rollout's wave thousands of clients changed, and
    # sorting them out here would hold up, for tens of milliseconds at once, the answers the
    # loop writes (in a thread it shares the interpreter in 5 ms turns). `unwritten` is this
    # task's alone, so the thread may use it.
    stored, dropped = await asyncio.to_thread(_flush, pending, store, written, unwritten)
    metrics.seen_clients_dropped += dropped
    return stored


def _flush(
    pending: PendingSeen,
    store: Store,
    written: WrittenClients | None,
    unwritten: UnwrittenSeen | None,
) -> tuple[int, int]:
    """`flush_seen_clients`' work, in a thread: how many were stored, and how many dropped."""
    now = store.now()
    batches, unstorable = seen_batches(pending, now)
    if written is not None:
        batches = _changed_or_due(batches, written, now)
    excess = 0
    if unwritten is not None:
        for (namespace, path), clients in batches.items():
            for seen in clients:
                unwritten.add((namespace, path, seen.client), seen)
        excess = unwritten.newly_dropped()
        if excess:
            logger.warning(
                "dropped the %d oldest clients seen polling not written yet: more than %d "
                "pending while the store is unreachable",
                excess,
                unwritten.limit,
            )
        batch = unwritten.snapshot()
        batches = {}
        for (namespace, path, _), seen in batch.items():
            batches.setdefault((namespace, path), []).append(seen)
    stored, refused, failed = write_seen_batches(store, batches)
    if unwritten is not None:
        unwritten.forget_written({key: seen for key, seen in batch.items() if key not in failed})
    if written is not None:
        for namespace, path, client in [*refused, *failed]:
            written.pop((namespace, path, client), None)
    return stored, unstorable + len(refused) + excess


def _changed_or_due(
    batches: dict[tuple[str, str], list[SeenClient]], written: WrittenClients, now: datetime
) -> dict[tuple[str, str], list[SeenClient]]:
    if len(written) > WRITTEN_KEPT:
        written.clear()
    kept: dict[tuple[str, str], list[SeenClient]] = {}
    for (namespace, path), clients in batches.items():
        for seen in clients:
            key = (namespace, path, seen.client)
            identity = (seen.channel, tuple(sorted(seen.labels.items())), seen.last_version)
            before = written.get(key)
            if before is not None and before[0] == identity and now - before[1] < REWRITE_AFTER:
                continue
            written[key] = (identity, now)
            kept.setdefault((namespace, path), []).append(seen)
    return kept


def write_seen_batches(
    store: Store, batches: dict[tuple[str, str], list[SeenClient]]
) -> tuple[int, list[tuple[str, str, str]], dict[SeenKey, SeenClient]]:
    """Write `batches`; returns how many clients were written, the (namespace, path, client) of
    those the database refused (their rows only: the rest of their chunk is written one by one),
    and those not written because the store failed otherwise (it is down: logged, the other
    configs still tried), for a later flush."""
    written = 0
    refused: list[tuple[str, str, str]] = []
    failed: dict[SeenKey, SeenClient] = {}
    for (namespace, path), clients in batches.items():
        for start in range(0, len(clients), WRITE_CHUNK):
            chunk = clients[start : start + WRITE_CHUNK]
            try:
                store.record_seen_clients(namespace, path, chunk)
            except Exception as exc:  # the store may be down: keep serving, try the next config
                if refused_data(exc):
                    stored, bad, rest = _write_one_by_one(store, namespace, path, chunk)
                    written += stored
                    refused.extend((namespace, path, client) for client in bad)
                    if not rest:
                        continue
                    left = [*rest, *clients[start + WRITE_CHUNK :]]
                else:
                    left = clients[start:]
                logger.warning(
                    "cannot record %d clients seen polling %s/%s (kept for the next try): %s",
                    len(left),
                    namespace,
                    path,
                    exc,
                )
                failed.update(((namespace, path, seen.client), seen) for seen in left)
                break
            written += len(chunk)
    return written, refused, failed


def _write_one_by_one(
    store: Store, namespace: str, path: str, chunk: list[SeenClient]
) -> tuple[int, list[str], list[SeenClient]]:
    """A chunk the database refused, one client at a time: one bad identity never costs the
    others their record. Stops at a failure that is not about the data (the store went down):
    the clients from there on are returned last, not written."""
    written = 0
    refused: list[str] = []
    for position, seen in enumerate(chunk):
        try:
            store.record_seen_clients(namespace, path, [seen])
        except Exception as exc:
            if not refused_data(exc):
                return written, refused, chunk[position:]
            logger.warning(
                "dropped client %r seen polling %s/%s: the store refuses its identity: %s",
                seen.client,
                namespace,
                path,
                exc,
            )
            refused.append(seen.client)
            continue
        written += 1
    return written, refused, []


async def record_seen_clients(
    polls: ConfigPolls,
    store: Store,
    metrics: ApiMetrics,
    *,
    stop: asyncio.Event,
    interval: float = SEEN_FLUSH_INTERVAL,
) -> None:
    """Flush every `interval` seconds until `stop` is set, then once more (api/pending.py)."""
    written: WrittenClients = {}
    unwritten: UnwrittenSeen = PendingWrites(SEEN_UNWRITTEN_MAX)
    await flush_every(
        lambda: flush_seen_clients(polls, store, metrics, written, unwritten),
        stop=stop,
        interval=interval,
        what="clients seen polling",
    )
    if unwritten:
        logger.warning(
            "%d clients seen polling not written: the store is unreachable", len(unwritten)
        )
