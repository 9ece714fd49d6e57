"""The hold rule against a live API: staged A → staged B waits for A's lease; → stable is at once."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tempoconf.client import ConfigClient, ConfigValue
from tests.api.helpers import publish, start_rollout
from tests.client.helpers import PATH, revert, stable_served
from tests.client.live_api import LiveApi
from tests.fixtures.waiting import eventually_sync

LEASE = timedelta(seconds=3)


def stage_a_then_b(live_api: LiveApi, client: ConfigClient) -> tuple[ConfigValue, ConfigValue]:
    """The client runs staged A (lease LEASE); then the API serves staged B to it (a new rollout
    after A's was reverted, which the client did not see: it was not polling meanwhile)."""
    store = live_api.store
    a = start_rollout(store, PATH, {"v": "A"}, run_id="run-a")
    publish(store, PATH, index=0, name="canary", channel="canary", expires_in=LEASE, run_id="run-a")
    live_api.wait_served(PATH, a.version, channel="canary")
    held = client.get()
    assert (held.version, held.stage) == (a.version, "canary")

    revert(store, run_id="run-a")
    b = start_rollout(store, PATH, {"v": "B"}, run_id="run-b")
    publish(store, PATH, index=0, name="canary", channel="canary", run_id="run-b")
    live_api.wait_served(PATH, b.version, channel="canary")
    still = client.get()
    return held, still


def test_a_staged_value_is_held_against_another_staged_version(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": "S"})
    # Long intervals: if B is applied on time, it is the hold deadline that woke the watcher.
    client = ConfigClient(
        live_api.url, PATH, client_id="h1", channel="canary", poll_interval=30, long_poll_seconds=30
    )
    try:
        held, still = stage_a_then_b(live_api, client)
        assert held.expires_at is not None
        assert still.version == held.version  # B is served, A is kept
        assert client.pending is not None and client.pending.value == {"v": "B"}
        assert datetime.now(UTC) < held.expires_at

        changes: list[tuple[ConfigValue, float]] = []
        client.subscribe(lambda value: changes.append((value, time.time())))
        client.start()
        eventually_sync(
            lambda: len(changes) == 2,
            what="the change back at the lease's end",
            timeout=LEASE.total_seconds() + 10,
        )
    finally:
        client.close()

    (first, _), (applied, applied_at) = changes
    assert first.version == held.version  # the value in use when watching started
    assert applied.value == {"v": "B"} and applied.stage == "canary"
    assert applied_at >= held.expires_at.timestamp()  # not before A's lease ended
    assert applied_at < held.expires_at.timestamp() + 2  # and woke for it, not a poll 30 s later
    assert client.pending is None


def test_a_move_back_to_stable_is_applied_at_once(live_api: LiveApi) -> None:
    stable = stable_served(live_api, {"v": "S"})
    store = live_api.store
    client = ConfigClient(live_api.url, PATH, client_id="h1", channel="canary")
    try:
        staged = start_rollout(store, PATH, {"v": "A"})
        publish(
            store, PATH, index=0, name="canary", channel="canary", expires_in=timedelta(hours=1)
        )
        live_api.wait_served(PATH, staged.version, channel="canary")
        in_stage = client.get()
        assert in_stage.is_staged and in_stage.expires_at is not None

        revert(store)  # halt: an emergency wins over the hour-long lease
        live_api.wait_served(PATH, stable.version, channel="canary")
        after = client.get()
    finally:
        client.close()
    assert datetime.now(UTC) < in_stage.expires_at
    assert (after.version, after.stage, after.value) == (stable.version, "stable", {"v": "S"})
    assert client.pending is None


def test_stable_to_staged_is_not_held(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": "S"})
    client = ConfigClient(live_api.url, PATH, client_id="h1", channel="canary")
    try:
        assert client.get().stage == "stable"
        staged = start_rollout(live_api.store, PATH, {"v": "A"})
        publish(live_api.store, PATH, index=0, name="canary", channel="canary")
        live_api.wait_served(PATH, staged.version, channel="canary")
        assert client.get().version == staged.version
    finally:
        client.close()


def test_the_hold_survives_a_restart_through_the_cache(live_api: LiveApi, tmp_path: Path) -> None:
    stable_served(live_api, {"v": "S"})
    first = ConfigClient(live_api.url, PATH, client_id="h1", channel="canary", cache_dir=tmp_path)
    try:
        held, _ = stage_a_then_b(live_api, first)
    finally:
        first.close()
    restarted = ConfigClient(
        live_api.url, PATH, client_id="h1", channel="canary", cache_dir=tmp_path
    )
    try:
        assert restarted.get().version == held.version  # A from the cache, B held back
        assert restarted.pending is not None and restarted.pending.value == {"v": "B"}
    finally:
        restarted.close()
