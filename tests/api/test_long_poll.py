"""Long-polls (`wait` with If-None-Match): they answer as soon as what *this* client resolves to
changes, and only then; else 304 at the deadline. A wake-up is told from an answer at the
deadline by the API's own count (`tempoconf_api_long_poll_wakeups_total`), not by the clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx

from tempoconf.api.snapshots import SnapshotCache
from tempoconf.store.records import StageLease
from tempoconf.store.store import Store
from tests.api.helpers import (
    client_in,
    long_polls_waiting,
    make_stable,
    publish,
    sample,
    start_rollout,
)

PATH = "myproject/server_config"
URL = f"/v1/configs/{PATH}"
STABLE_VALUE = {"max_connections": 1000}
NEW_VALUE = {"max_connections": 2000}
WAIT = 20.0
"""Long enough that an answer at the deadline would stand out (the wake-up count tells them apart)."""


async def etag_of(http: httpx.AsyncClient, **params: str) -> str:
    response = await http.get(URL, params=params)
    assert response.status_code == 200, response.text
    return response.headers["etag"]


async def long_poll(
    http: httpx.AsyncClient, etag: str, *, wait: float = WAIT, **params: str
) -> tuple[httpx.Response, float]:
    loop = asyncio.get_running_loop()
    began = loop.time()
    response = await http.get(
        URL, params={**params, "wait": str(wait)}, headers={"If-None-Match": etag}
    )
    return response, loop.time() - began


async def wakeups(http: httpx.AsyncClient) -> float | None:
    """Long-polls the API woke before their deadline (by a change of their answer)."""
    return sample((await http.get("/metrics")).text, "tempoconf_api_long_poll_wakeups_total")


async def parked_waits(http: httpx.AsyncClient) -> float | None:
    """Long-polls that waited at all (answered at once: not counted)."""
    text = (await http.get("/metrics")).text
    return sample(text, "tempoconf_api_long_poll_wait_seconds_count")


async def test_wakes_on_a_stage_that_matches_this_client(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    host = client_in(PATH, 50, inside=True)
    await cache.refresh()
    etag = await etag_of(client, client=host)
    poll = asyncio.create_task(long_poll(client, etag, client=host))
    await long_polls_waiting(client, 1)

    publish(api_store, PATH, index=0, name="50%", percentile=50)
    response, _ = await poll

    assert response.status_code == 200
    assert (response.json()["version"], response.json()["stage"]) == (staged.version, "50%")
    assert response.headers["etag"] != etag
    assert await wakeups(client) == 1  # woken by the change, not answered at its deadline
    assert await parked_waits(client) == 1
    await long_polls_waiting(client, 0)


async def test_a_change_that_does_not_reach_this_client_does_not_wake_it(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    start_rollout(api_store, PATH, NEW_VALUE)
    host = client_in(PATH, 10, inside=False)
    await cache.refresh()
    etag = await etag_of(client, client=host)
    poll = asyncio.create_task(long_poll(client, etag, wait=60, client=host))
    await long_polls_waiting(client, 1)

    # Stages that match other clients: the snapshot changes (loaded below), this client's
    # answer does not: it was not woken, and waits on.
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    publish(api_store, PATH, index=1, name="10%", percentile=10)
    await cache.refresh()
    assert await wakeups(client) == 0
    await long_polls_waiting(client, 1)
    assert not poll.done()

    # A stage that reaches it ends the wait.
    publish(api_store, PATH, index=2, name="all", percentile=100)
    response, _ = await poll
    assert (response.status_code, response.json()["stage"]) == (200, "all")
    assert await wakeups(client) == 1


async def test_an_unchanged_answer_is_a_304_at_the_deadline(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    await cache.refresh()
    etag = await etag_of(client, client="host-1")

    response, took = await long_poll(client, etag, wait=1.5, client="host-1")

    assert response.status_code == 304
    assert response.headers["etag"] == etag
    assert response.content == b""
    assert took >= 1.4
    assert await wakeups(client) == 0


async def test_wakes_on_a_revert(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    await cache.refresh()
    etag = await etag_of(client, client="host-1", channel="canary")
    poll = asyncio.create_task(long_poll(client, etag, client="host-1", channel="canary"))
    await long_polls_waiting(client, 1)

    api_store.revert(
        "default",
        PATH,
        run_id="run-1",
        workflow_id=f"rollout:default/{PATH}",
        actor="tests",
        reason="halted",
        outcome="halted",
        event_key="revert-1",
    )
    response, _ = await poll

    assert response.status_code == 200
    assert (response.json()["version"], response.json()["stage"]) == (stable.version, "stable")
    assert await wakeups(client) == 1


async def test_wakes_on_a_promotion(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    await cache.refresh()
    etag = await etag_of(client, client="host-1")
    poll = asyncio.create_task(long_poll(client, etag, client="host-1"))
    await long_polls_waiting(client, 1)

    api_store.promote(
        "default",
        PATH,
        run_id="run-1",
        workflow_id=f"rollout:default/{PATH}",
        version=staged.version,
        actor="tests",
        reason="done",
        event_key="promote-1",
    )
    response, _ = await poll

    assert response.status_code == 200
    assert (response.json()["version"], response.json()["stage"]) == (staged.version, "stable")


async def test_wakes_when_the_lease_of_its_stage_expires(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="all", percentile=100, expires_in=timedelta(hours=1))
    await cache.refresh()
    staged_response = await client.get(URL, params={"client": "host-1"})
    assert staged_response.json()["version"] == staged.version
    poll = asyncio.create_task(
        long_poll(client, staged_response.headers["etag"], wait=60, client="host-1")
    )
    await long_polls_waiting(client, 1)

    # The lease cut short once the long-poll waits (however slow the machine was to get it
    # there); then nothing is written to the store: only the lease's end changes the answer.
    soon = datetime.now(UTC) + timedelta(seconds=1)
    api_store.renew_leases(
        "default", PATH, run_id="run-1", leases=[StageLease(index=0, expires_at=soon)]
    )
    response, _ = await poll

    assert response.status_code == 200
    assert (response.json()["version"], response.json()["stage"]) == (stable.version, "stable")
    assert await wakeups(client) == 1


async def test_without_if_none_match_it_answers_at_once(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    await cache.refresh()

    response = await client.get(URL, params={"wait": "60"})

    assert response.status_code == 200
    assert await parked_waits(client) == 0  # answered without waiting


async def test_a_stale_etag_is_answered_at_once(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    await cache.refresh()

    response, _ = await long_poll(client, 'W/"0000000000000000.old"', wait=60, client="host-1")

    assert response.status_code == 200
    assert await parked_waits(client) == 0  # answered without waiting


async def test_many_waiting_clients_each_get_their_own_answer(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    inside = [client_in(PATH, 50, inside=True, prefix=f"in{n}-") for n in range(5)]
    outside = [client_in(PATH, 50, inside=False, prefix=f"out{n}-") for n in range(5)]
    await cache.refresh()
    etags = {host: await etag_of(client, client=host) for host in inside + outside}
    polls = {
        host: asyncio.create_task(long_poll(client, etags[host], wait=60, client=host))
        for host in inside + outside
    }
    await long_polls_waiting(client, 10)

    publish(api_store, PATH, index=0, name="50%", percentile=50)
    await cache.refresh()
    results = {host: (await polls[host])[0] for host in inside}
    assert all(results[host].status_code == 200 for host in inside)
    assert all(results[host].json()["stage"] == "50%" for host in inside)
    assert all(results[host].json()["version"] == staged.version for host in inside)
    # The others were not woken: they wait on, until a stage reaches them too.
    assert await wakeups(client) == 5
    await long_polls_waiting(client, 5)
    assert not any(polls[host].done() for host in outside)

    publish(api_store, PATH, index=1, name="all", percentile=100)
    results = {host: (await polls[host])[0] for host in outside}
    assert all(results[host].status_code == 200 for host in outside)
    assert all(results[host].json()["stage"] == "all" for host in outside)
    assert await wakeups(client) == 10


async def test_a_change_wakes_only_the_waiters_whose_answer_it_changes(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    cohort = client_in(PATH, 50, inside=True)
    other = client_in(PATH, 50, inside=False)
    await cache.refresh()
    etags = {host: await etag_of(client, client=host) for host in (cohort, other)}
    polls = {
        host: asyncio.create_task(long_poll(client, etags[host], wait=60, client=host))
        for host in (cohort, other)
    }
    await long_polls_waiting(client, 2)

    # The snapshot changes, but neither client's answer: both still wait, and nobody woke.
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    await cache.refresh()
    assert await wakeups(client) == 0
    await long_polls_waiting(client, 2)

    # A stage of one client's cohort: it gets the stage, the other one keeps waiting.
    publish(api_store, PATH, index=1, name="50%", percentile=50)
    await cache.refresh()
    response, _ = await polls[cohort]
    assert (response.status_code, response.json()["stage"]) == (200, "50%")
    assert response.json()["version"] == staged.version
    assert await wakeups(client) == 1
    await long_polls_waiting(client, 1)
    assert not polls[other].done()
    # A stage for everyone: the other one's turn.
    publish(api_store, PATH, index=2, name="all", percentile=100)
    left, _ = await polls[other]
    assert (left.status_code, left.json()["stage"]) == (200, "all")
    assert await wakeups(client) == 2


async def test_a_revert_answers_every_changed_group_with_the_same_body(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    publish(api_store, PATH, index=1, name="50%", percentile=50)
    canaries = [{"client": f"canary-{n}", "channel": "canary"} for n in range(3)]
    cohort = [{"client": client_in(PATH, 50, inside=True, prefix=f"in{n}-")} for n in range(3)]
    await cache.refresh()
    polls = []
    for params in canaries + cohort:
        etag = await etag_of(client, **params)
        polls.append(asyncio.create_task(long_poll(client, etag, **params)))
    await long_polls_waiting(client, 6)

    api_store.revert(
        "default",
        PATH,
        run_id="run-1",
        workflow_id=f"rollout:default/{PATH}",
        actor="tests",
        reason="halted",
        outcome="halted",
        event_key="revert-1",
    )
    responses = [(await poll)[0] for poll in polls]

    assert {response.status_code for response in responses} == {200}
    assert len({response.content for response in responses}) == 1  # one body for all
    assert responses[0].json()["version"] == stable.version
    assert await wakeups(client) == 6
