"""The pure parts: backoff with full jitter, the hold rule, the client's imports."""

from __future__ import annotations

import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from tempoconf.client import ConfigValue
from tempoconf.client._backoff import Backoff
from tempoconf.client._core import ClientOptions
from tempoconf.client._hold import decide

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
    "api", "cli", "workflows", "activities", "sqlalchemy", "sqlmodel", "temporalio", "starlette",
    "uvicorn", "pydantic", "tempoconf.store", "tempoconf.resolution", "tempoconf.settings",
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
