"""The API's own store goes away for 20 s under polling, reporting and apply-reporting clients
(issue 31): PostgreSQL refusing every connection (the API reaches it through the stack's proxy,
which the test cuts) or SQLite locked by another connection (as test_store_outage.py does to the
worker).

Afterwards nothing the API accepted is lost: every client seen polling during the outage is
recorded (each polls once, as a cron job or an agent started once would: before the fix a failed
flush dropped its batch and 29 of 99 were recorded), every accepted health report and apply
report is in the store; every poll during the outage was answered from memory; and a change
published after the store returns reaches a long-polling client within 2 s. The figures are
printed at the end of the fault run."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.faults.stack import Stack, unique_path

pytestmark = pytest.mark.faults

OUTAGE_SECONDS = 20.0
RARE_POLLERS = 99
"""Clients that poll once, during the outage."""
STEADY_POLLERS = 5
"""Clients that poll every STEADY_EVERY seconds throughout."""
STEADY_EVERY = 0.5
REPORTERS = 40
APPLIERS = 40
RESEND_ATTEMPTS = 10
"""A report refused with 503 is sent again after its Retry-After, at most this often."""
KEPT_TIMEOUT_SECONDS = 60.0
"""A bound, not a goal: the flushes run every 5 s; on SQLite each waits out a 5 s busy timeout."""
PROPAGATION_BOUND_SECONDS = 2.0


@dataclass
class Traffic:
    """What the clients saw during the outage."""

    polls: int = 0
    polls_served: int = 0
    """Answered 200 with the stable version."""
    unexpected: list[str] = field(default_factory=list)
    """Answers that were neither a served poll nor a report accepted or refused for later."""
    reports_accepted: set[str] = field(default_factory=set)
    applies_accepted: set[str] = field(default_factory=set)
    resent: int = 0


async def _poll(
    http: httpx.AsyncClient, path: str, client: str, stable: str, seen: Traffic
) -> None:
    seen.polls += 1
    try:
        answer = await http.get(f"/v1/configs/{path}", params={"client": client})
    except httpx.HTTPError as exc:
        seen.unexpected.append(f"poll {client}: {type(exc).__name__}")
        return
    if answer.status_code == 200 and answer.json()["version"] == stable:
        seen.polls_served += 1
    else:
        seen.unexpected.append(f"poll {client}: {answer.status_code} {answer.text[:200]}")


async def _report(
    http: httpx.AsyncClient, body: dict[str, object], accepted: set[str], seen: Traffic
) -> None:
    """POST one report; a 503 is sent again after its Retry-After (as the SDK and agent do)."""
    for _ in range(RESEND_ATTEMPTS):
        try:
            answer = await http.post("/v1/reports", json=body)
        except httpx.HTTPError as exc:  # not answered in time: neither accepted nor refused
            seen.unexpected.append(f"report {body['client']}: {type(exc).__name__}")
            return
        if answer.status_code == 202:
            accepted.add(str(body["client"]))
            return
        if answer.status_code != 503 or "retry-after" not in answer.headers:
            seen.unexpected.append(f"report {body['client']}: {answer.status_code} {answer.text}")
            return
        seen.resent += 1
        await asyncio.sleep(float(answer.headers["retry-after"]))
    seen.unexpected.append(f"report {body['client']}: still refused after {RESEND_ATTEMPTS}")


async def _clients_during_outage(
    http: httpx.AsyncClient, path: str, stable: str, outage: float
) -> Traffic:
    seen = Traffic()
    rng = random.Random(31)
    end = time.monotonic() + outage

    async def at(delay: float, work: Callable[[], object]) -> None:
        await asyncio.sleep(delay)
        await work()  # type: ignore[misc]

    async def steady(client: str) -> None:
        while time.monotonic() < end:
            await _poll(http, path, client, stable, seen)
            await asyncio.sleep(STEADY_EVERY)

    def spread() -> float:  # within the outage, leaving a second for the answer
        return rng.uniform(0.2, outage - 1.0)

    def report(number: int) -> dict[str, object]:
        return {"path": path, "client": f"reporter-{number:02d}", "version": stable}

    tasks = [steady(f"steady-{n}") for n in range(STEADY_POLLERS)]
    tasks += [
        at(spread(), lambda n=n: _poll(http, path, f"rare-{n:02d}", stable, seen))
        for n in range(RARE_POLLERS)
    ]
    tasks += [
        at(
            spread(),
            lambda n=n: _report(
                http, {**report(n), "ok": 10, "failed": n % 2}, seen.reports_accepted, seen
            ),
        )
        for n in range(REPORTERS)
    ]
    tasks += [
        at(
            spread(),
            lambda n=n: _report(
                http,
                {**report(n), "client": f"applier-{n:02d}", "ok": 0, "failed": 0, "applied": True},
                seen.applies_accepted,
                seen,
            ),
        )
        for n in range(APPLIERS)
    ]
    await asyncio.gather(*tasks)
    return seen


@dataclass
class Kept:
    seen: set[str]
    reports: set[str]
    applies: set[str]


def _kept(store: Store, path: str, since: datetime) -> Kept:
    return Kept(
        seen={c.client for c in store.recent_clients("default", path, since=since)},
        reports={row.client for row in store.report_totals("default", path, since=since)},
        applies={state.client for state in store.applied_states("default", path)},
    )


async def _propagation(http: httpx.AsyncClient, store: Store, path: str) -> tuple[float, str]:
    """Seconds from a change's publish (a new stable version, written as the worker's promote
    writes it) to a long-polling client's answer; and the version it got."""
    current = await http.get(f"/v1/configs/{path}", params={"client": "watcher"})
    assert current.status_code == 200, current.text
    waiting = asyncio.create_task(
        http.get(
            f"/v1/configs/{path}",
            params={"client": "watcher", "wait": "30"},
            headers={"If-None-Match": current.headers["etag"]},
        )
    )
    await asyncio.sleep(0.3)  # the long-poll is waiting
    published_at = time.monotonic()
    version = await asyncio.to_thread(lambda: make_stable(store, path, {"generation": 2}).version)
    answer = await waiting
    elapsed = time.monotonic() - published_at
    assert answer.status_code == 200, answer.text
    assert answer.json()["version"] == version
    return elapsed, version


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_api_store_outage_loses_nothing_the_api_accepted(
    stack: Stack, store: Store, backend: str, figure: Callable[[str], None]
) -> None:
    path = unique_path("api-store")
    stable = make_stable(store, path, {"generation": 1}).version
    holder: sqlite3.Connection | None = None
    if backend == "postgresql":
        assert stack.proxy is not None
        stack.api_database_url = stack.worker_database_url  # through the proxy
        cut, restore, what = stack.proxy.cut, stack.proxy.restore, "PostgreSQL refusing connections"
    else:
        database = Path(make_url(stack.database_url).database or "")
        holder = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        sqlite_holder = holder

        def cut() -> None:
            sqlite_holder.execute("BEGIN EXCLUSIVE")

        def restore() -> None:
            sqlite_holder.execute("ROLLBACK")

        what = "SQLite locked"
    stack.start_api()
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as http:
            first = await http.get(f"/v1/configs/{path}", params={"client": "before"})
            assert first.status_code == 200 and first.json()["version"] == stable, first.text
            since = datetime.now(UTC) - timedelta(seconds=1)
            cut()
            cut_at = time.monotonic()
            traffic = await _clients_during_outage(http, path, stable, OUTAGE_SECONDS)
            ready = (await http.get("/readyz", params={"max_age": "10"})).status_code
            healthz = (await http.get("/healthz")).status_code
            restore()
            back_at = time.monotonic()
            elapsed, _ = await _propagation(http, store, path)

            rare = {f"rare-{n:02d}" for n in range(RARE_POLLERS)}
            wanted_seen = rare | {f"steady-{n}" for n in range(STEADY_POLLERS)}
            deadline = back_at + KEPT_TIMEOUT_SECONDS
            while True:
                kept = await asyncio.to_thread(_kept, store, path, since)
                complete = (
                    wanted_seen <= kept.seen
                    and traffic.reports_accepted <= kept.reports
                    and traffic.applies_accepted <= kept.applies
                )
                if complete or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            kept_after = time.monotonic() - back_at
    finally:
        if holder is not None:
            holder.close()

    seen_rare = len(rare & kept.seen)
    reports_kept = len(traffic.reports_accepted & kept.reports)
    applies_kept = len(traffic.applies_accepted & kept.applies)
    figure(
        f"API store cut ({what}) for {back_at - cut_at:.1f}s: "
        f"polls {traffic.polls_served}/{traffic.polls} served from memory; "
        f"seen {seen_rare}/{RARE_POLLERS} kept; "
        f"reports {len(traffic.reports_accepted)}/{REPORTERS} accepted "
        f"({traffic.resent} resent), {reports_kept} kept; "
        f"apply reports {len(traffic.applies_accepted)}/{APPLIERS} accepted, {applies_kept} kept; "
        + (f"all kept {kept_after:.1f}s after the store came back; " if complete else "")
        + f"a change after the store returned reached a long-poll in {elapsed:.2f}s"
    )
    assert seen_rare == RARE_POLLERS, f"clients seen polling lost: {sorted(rare - kept.seen)}"
    assert wanted_seen <= kept.seen
    assert traffic.unexpected == [], traffic.unexpected
    assert traffic.polls_served == traffic.polls
    assert len(traffic.reports_accepted) == REPORTERS
    assert reports_kept == REPORTERS, sorted(traffic.reports_accepted - kept.reports)
    assert len(traffic.applies_accepted) == APPLIERS
    assert applies_kept == APPLIERS, sorted(traffic.applies_accepted - kept.applies)
    assert healthz == 200  # a store outage does not make a serving API unhealthy
    if backend == "postgresql":  # SQLite's lock lets reads through: the snapshots stay current
        assert ready == 503, "readyz?max_age=10 did not say the snapshots were stale"
    assert elapsed < PROPAGATION_BOUND_SECONDS, f"the change took {elapsed:.2f}s to reach a client"
