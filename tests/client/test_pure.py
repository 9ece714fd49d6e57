"""The pure parts: backoff with full jitter, the hold rule, the client's imports."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from tempoconf.client import ConfigResponseError, ConfigUnavailableError, ConfigValue
from tempoconf.client._backoff import Backoff
from tempoconf.client._core import ClientOptions, WatchState
from tempoconf.client._hold import decide
from tempoconf.client._metrics import VersionGauge

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def value(version: str, stage: str, expires_in: float | None = None) -> ConfigValue:
    expires_at = None if expires_in is None else NOW + timedelta(seconds=expires_in)
    return ConfigValue("default", "p", version, stage, {}, expires_at)


def test_backoff_is_full_jitter_doubling_to_a_cap() -> None:
    backoff = Backoff(base=0.5, cap=30, rng=random.Random(7))
    ceilings = []
    for _ in range(12):
        ceiling = backoff.ceiling()
        delay = backoff.next()
        assert 0 <= delay <= ceiling
        ceilings.append(ceiling)
    assert ceilings[:7] == [0.5, 1, 2, 4, 8, 16, 30]
    assert set(ceilings[6:]) == {30}
    for _ in range(2000):  # never overflows, however long the outage
        backoff.next()
    assert backoff.ceiling() == 30
    backoff.reset()
    assert backoff.ceiling() == 0.5


def test_default_backoff_retries_within_5_seconds_however_long_the_outage() -> None:
    # Issue 12, hole 6: capped at 30 s, an agent down for 24 s took 16 s to see the API again.
    backoff = Backoff(rng=random.Random(5))
    delays = [backoff.next() for _ in range(500)]
    assert max(delays) <= 5.0
    assert max(delays[10:]) > 4  # still the whole jittered range, not a fixed short pause


def test_backoff_spreads_delays() -> None:
    backoff = Backoff(base=8, cap=8, rng=random.Random(1))
    delays = [backoff.next() for _ in range(200)]
    assert min(delays) < 1 and max(delays) > 7  # full jitter: the whole range, not ±10 %


@pytest.mark.parametrize(
    ("current", "incoming", "apply"),
    [
        (None, value("B", "canary", 60), True),
        (value("S", "stable"), value("B", "canary", 60), True),
        (value("A", "canary", 60), value("S", "stable"), True),  # back to stable: at once
        (value("A", "canary", 60), value("A", "10%", 90), True),  # same version, other stage
        (value("A", "canary", 60), value("B", "canary", 60), False),  # held
        (value("A", "canary", -1), value("B", "canary", 60), True),  # A's lease is over
        (value("A", "canary", 0), value("B", "canary", 60), True),
    ],
)
def test_hold_rule(current: ConfigValue | None, incoming: ConfigValue, apply: bool) -> None:
    decision = decide(current, incoming, NOW)
    assert decision.apply is apply
    if not apply:
        assert current is not None and decision.hold_until == current.expires_at


def test_options_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="long_poll_seconds"):
        ClientOptions(api_url="http://x", path="p", long_poll_seconds=61)
    with pytest.raises(ValueError, match="config path"):
        ClientOptions(api_url="http://x", path="")
    with pytest.raises(ValueError, match="label key"):
        ClientOptions(api_url="http://x", path="p", labels={"a=b": "c"})


FORBIDDEN = (
    "api",
    "cli",
    "workflows",
    "activities",
    "sqlalchemy",
    "sqlmodel",
    "temporalio",
    "starlette",
    "uvicorn",
    "pydantic",
    "tempoconf.store",
    "tempoconf.resolution",
    "tempoconf.settings",
)


def test_the_client_imports_httpx_and_prometheus_only() -> None:
    # A fresh interpreter: the test process has imported everything already.
    code = "import sys, tempoconf.client; print('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = result.stdout.split()
    assert "httpx" in loaded and "prometheus_client" in loaded
    bad = [m for m in loaded if any(m == f or m.startswith(f"{f}.") for f in FORBIDDEN)]
    assert bad == []


def test_local_evaluation_adds_the_resolution_and_nothing_heavy() -> None:
    code = "import sys; from tempoconf.client import LocalConfig; print('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = result.stdout.split()
    assert "tempoconf.resolution" in loaded and "tempoconf.resolution.bundles" in loaded
    heavy = [f for f in FORBIDDEN if f not in ("tempoconf.resolution",)]
    bad = [m for m in loaded if any(m == f or m.startswith(f"{f}.") for f in heavy)]
    assert bad == []


class Clock:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = NOW.timestamp()

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def body(version: str, stage: str = "stable", expires_in: float | None = None) -> bytes:
    expires_at = None if expires_in is None else (NOW + timedelta(seconds=expires_in)).isoformat()
    return json.dumps(
        {
            "namespace": "default",
            "path": "p",
            "version": version,
            "stage": stage,
            "value": {"v": version},
            "expires_at": expires_at,
            "metadata": {},
        }
    ).encode()


def make_state(clock: Clock) -> WatchState:
    options = ClientOptions(
        api_url="http://api",
        path="p",
        client_id="h1",
        long_poll_seconds=30,
        poll_interval=5,
        min_interval=0.5,
    )
    return WatchState(
        options,
        cache=None,
        gauge=VersionGauge(CollectorRegistry()),
        backoff=Backoff(base=0.5, cap=30, rng=random.Random(3)),
        wall=lambda: clock.wall,
        monotonic=lambda: clock.mono,
    )


def answer(
    state: WatchState,
    clock: Clock,
    status: int,
    content: bytes = b"",
    *,
    took: float = 0.0,
    etag: str = 'W/"x"',
) -> ConfigValue | None:
    request = state.config_request(long_poll=True)
    started = clock.mono
    clock.advance(took)
    return state.on_response(request, status, {"etag": etag}, content, started=started)


def test_schedule_never_spins_and_follows_held_polls_at_once() -> None:
    clock = Clock()
    state = make_state(clock)
    first = state.config_request(long_poll=True)
    assert first.wait == 0 and "If-None-Match" not in first.headers  # nothing to long-poll on yet
    assert answer(state, clock, 200, body("A"), etag='W/"a"') is not None
    assert state.delay() == pytest.approx(0.5)  # min_interval after a change

    clock.advance(0.5)
    request = state.config_request(long_poll=True)
    assert request.wait == 30 and request.headers["If-None-Match"] == 'W/"a"'
    answer(state, clock, 304, took=30)  # held to its deadline: ask again at once
    assert state.delay() == 0
    answer(state, clock, 304, took=0.01)  # answered at once: wait out poll_interval
    assert state.delay() == pytest.approx(5 - 0.01)


def test_schedule_backs_off_on_errors() -> None:
    clock = Clock()
    state = make_state(clock)
    answer(state, clock, 200, body("A"), etag='W/"a"')
    delays = []
    for _ in range(8):
        with pytest.raises(ConfigUnavailableError):
            answer(state, clock, 503, b'{"error": "down"}')
        delays.append(state.delay())
        current = state.current()
        assert current is not None and current.source == "cache"  # last good value, marked
    assert all(0 <= d <= 30 for d in delays) and max(delays) > 2  # grows, capped
    answer(state, clock, 304)
    assert state.last_error is None and state.current().source == "api"  # type: ignore[union-attr]


def test_schedule_wakes_when_a_hold_ends() -> None:
    clock = Clock()
    state = make_state(clock)
    answer(state, clock, 200, body("A", "canary", expires_in=10), etag='W/"a"')
    held = answer(state, clock, 200, body("B", "canary", expires_in=600), etag='W/"b"')
    assert held is None and state.pending is not None
    clock.advance(1)
    request = state.config_request(long_poll=True)
    # The long-poll ends with the hold, and asks about B (not A: that would be answered 200).
    assert request.wait == 9 and request.headers["If-None-Match"] == 'W/"b"'
    answer(state, clock, 304, took=0.01)  # t=1.01; the hold ends at t=10
    assert state.delay() == pytest.approx(5 - 0.01)  # the poll interval comes first
    clock.advance(5 - 0.01)
    answer(state, clock, 304, took=0.01)  # t=6.01: the next poll would be at t=11
    assert state.tick() is None and state.delay() == pytest.approx(3.99)  # woken by the hold
    clock.advance(3.99)
    assert state.delay() == 0
    applied = state.tick()
    assert applied is not None and applied.version == "B" and state.pending is None


def test_after_a_failure_the_next_request_is_answered_at_once() -> None:
    clock = Clock()
    state = make_state(clock)
    answer(state, clock, 200, body("A"), etag='W/"a"')
    with pytest.raises(ConfigUnavailableError):
        answer(state, clock, 503, b'{"error": "down"}')
    # Is the API back? A held poll would say so only when its 30 s run out: ask at once.
    probe = state.config_request(long_poll=True)
    assert (probe.wait, probe.probe, probe.headers["If-None-Match"]) == (0, True, 'W/"a"')
    answer(state, clock, 304, took=0.01)
    current = state.current()
    assert current is not None and current.source == "api"
    assert state.delay() == pytest.approx(0.5 - 0.01)  # min_interval, then long-polls again
    clock.advance(0.5)
    again = state.config_request(long_poll=True)
    assert (again.wait, again.probe) == (30, False)


def answer_body(**fields: object) -> dict[str, object]:
    body: dict[str, object] = {
        "namespace": "default",
        "path": "p",
        "version": "v2",
        "stage": "wave-1",
        "value": {"x": 1},
        "expires_at": None,
        "metadata": {},
    }
    body.update(fields)
    return body


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({"stage_kind": "split"}, "split"),
        ({"stage_kind": "targeting"}, "targeting"),
        ({"stage": "stable", "stage_kind": None}, None),
        ({}, None),  # an API older than the field, or a cache file written from one
        ({"stage_kind": "cohort"}, None),  # a kind newer than this client: as if absent
    ],
)
def test_the_stage_kind_is_read_and_kept_in_the_cache_body(
    fields: dict[str, object], kind: str | None
) -> None:
    read = ConfigValue.from_body(answer_body(**fields), source="api", confirmed_at=0, etag=None)

    assert read.stage_kind == kind
    assert read.body()["stage_kind"] == kind
    again = ConfigValue.from_body(read.body(), source="cache", confirmed_at=0, etag=None)
    assert again.stage_kind == kind


def test_a_stage_kind_that_is_not_text_is_refused() -> None:
    with pytest.raises(ConfigResponseError, match=r"field 'stage_kind' is not a string or null"):
        ConfigValue.from_body(answer_body(stage_kind=1), source="api", confirmed_at=0, etag=None)
