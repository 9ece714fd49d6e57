"""Freezes in the store (both backends): one active per namespace, end, until, the list."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from tempoconf.gates.freezes import describe_freeze, parse_until
from tempoconf.store.store import FreezeActiveError, NotFrozenError, Store


def test_start_end_and_list_a_freeze(store: Store) -> None:
    assert store.active_freeze("payments") is None
    until = datetime.now(UTC) + timedelta(hours=2)
    started = store.start_freeze("payments", reason="black friday", by="alice", until=until)
    active = store.active_freeze("payments")
    assert active is not None and active.id == started.id
    assert (active.reason, active.by, active.until) == ("black friday", "alice", until)
    assert active.started_at.tzinfo is not None
    assert store.active_freeze("default") is None  # another namespace is not frozen

    with pytest.raises(FreezeActiveError) as refused:
        store.start_freeze("payments", reason="again", by="bob")
    assert "namespace payments frozen by alice since " in str(refused.value)
    assert ": black friday, until " in str(refused.value)
    assert "end it first" in str(refused.value)

    ended = store.end_freeze("payments", by="bob", reason="sales are over")
    assert ended.ended_by == "bob" and ended.end_reason == "sales are over"
    assert store.active_freeze("payments") is None
    with pytest.raises(NotFrozenError, match="namespace payments is not frozen"):
        store.end_freeze("payments", by="bob")

    second = store.start_freeze("payments", reason="incident", by="carol")
    listed = store.list_freezes()
    assert [freeze.id for freeze in listed] == [second.id, started.id]  # newest first
    assert listed[1].ended_at is not None and listed[1].ended_by == "bob"
    assert listed[0].until is None and listed[0].ended_at is None
    assert [freeze.id for freeze in store.list_freezes("default")] == []


def test_a_freeze_past_its_until_is_over_and_another_may_start(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's clock is stepped by hand: a real 0.3 s `until` raced a loaded CI machine.
    clock = [datetime.now(UTC)]
    monkeypatch.setattr(store, "now", lambda: clock[0])
    store.start_freeze("default", reason="short", by="alice", until=clock[0] + timedelta(minutes=5))
    clock[0] += timedelta(minutes=4, seconds=59)
    assert store.active_freeze("default") is not None
    clock[0] += timedelta(seconds=1)  # `until` itself is the first moment not frozen
    assert store.active_freeze("default") is None
    with pytest.raises(NotFrozenError):
        store.end_freeze("default", by="bob")
    store.start_freeze("default", reason="next", by="bob")
    assert store.active_freeze("default").reason == "next"  # type: ignore[union-attr]


def test_an_until_in_the_past_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="not in the future"):
        store.start_freeze("default", reason="x", by="a", until=datetime.now(UTC) - timedelta(1))
    assert store.list_freezes() == []


def test_concurrent_starts_freeze_once(store: Store) -> None:
    outcomes: list[str] = []
    lock = threading.Lock()

    def start(number: int) -> None:
        try:
            store.start_freeze("race", reason=f"start {number}", by=f"user{number}")
            result = "started"
        except FreezeActiveError:
            result = "refused"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=start, args=(number,)) for number in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 5 + ["started"]
    assert len(store.list_freezes("race")) == 1


def test_parse_until_takes_an_offset_time_or_a_duration() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_until("2h", now=now) == now + timedelta(hours=2)
    assert parse_until("1h30m", now=now) == now + timedelta(minutes=90)
    assert parse_until("2026-12-24T18:00:00+01:00", now=now) == datetime(
        2026, 12, 24, 17, 0, tzinfo=UTC
    )
    assert parse_until("2026-12-24T18:00:00Z", now=now) == datetime(2026, 12, 24, 18, 0, tzinfo=UTC)
    with pytest.raises(ValueError, match="has no UTC offset"):
        parse_until("2026-12-24T18:00:00", now=now)
    with pytest.raises(ValueError, match="not in the future"):
        parse_until("2026-11-30T18:00:00+00:00", now=now)
    with pytest.raises(ValueError, match="not in the future"):
        parse_until("0s", now=now)
    with pytest.raises(ValueError, match="neither an ISO 8601 time with an offset"):
        parse_until("tomorrow", now=now)
    with pytest.raises(ValueError, match="out of range"):
        parse_until("9999-12-31T23:59:59-12:00", now=now)


def test_the_sentence_a_frozen_rollout_shows(store: Store) -> None:
    until = datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
    freeze = store.start_freeze("default", reason="holidays", by="alice", until=until)
    text = describe_freeze(freeze)
    assert text.startswith("namespace default frozen by alice since ")
    assert text.endswith(": holidays, until 2030-01-02 03:04:00 UTC")
