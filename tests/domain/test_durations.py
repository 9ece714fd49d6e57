"""Durations as docs/contract.md accepts them: seconds, strings, protobuf JSON; and their rendering."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tempoconf.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # seconds
        (300, timedelta(seconds=300)),
        (0, timedelta(0)),
        (1.5, timedelta(seconds=1.5)),
        # strings
        ("300", timedelta(seconds=300)),
        ("300s", timedelta(seconds=300)),
        ("15m", timedelta(minutes=15)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("250ms", timedelta(milliseconds=250)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("2h3m4s", timedelta(hours=2, minutes=3, seconds=4)),
        ("1m30.5s", timedelta(seconds=90.5)),
        ("500us", timedelta(microseconds=500)),
        ("  45s ", timedelta(seconds=45)),
        ("0s", timedelta(0)),
        # protobuf JSON
        ({"seconds": 300}, timedelta(seconds=300)),
        ({"seconds": "300"}, timedelta(seconds=300)),
        ({"seconds": "300", "nanos": 5e8}, timedelta(seconds=300.5)),
        ({"seconds": 1, "nanos": 250_000_000}, timedelta(seconds=1.25)),
        ({"nanos": 1000}, timedelta(microseconds=1)),
        # already a timedelta
        (timedelta(minutes=2), timedelta(minutes=2)),
    ],
)
def test_parse_duration_accepts_every_documented_form(raw: object, expected: timedelta) -> None:
    assert parse_duration(raw) == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("abc", "cannot parse"),
        ("5 minutes", "cannot parse"),
        ("10x", "cannot parse"),
        ("1h 30m", "cannot parse"),
        ("s", "cannot parse"),
        ("5m-3s", "cannot parse"),
        ("-", "cannot parse"),
        (-1, "negative"),
        (-0.5, "negative"),
        ("-300", "negative"),
        ("-5m", "negative"),
        ({"seconds": -5}, "negative"),
        (True, "boolean"),
        (False, "boolean"),
        (None, "NoneType"),
        ([300], "list"),
        ({"seconds": 300, "minutes": 5}, "'minutes'"),
        ({"secs": 300}, "'secs'"),
        ({"seconds": "five"}, "integers"),
        ({"seconds": 1.5}, "integers"),
        ({"seconds": True}, "integers"),
        ({"seconds": 1, "nanos": 2_000_000_000}, "nanos"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        ("inf", "finite"),
        pytest.param(10**400, "at most", id="int-beyond-float-range"),
        (10**12, "at most"),
        pytest.param({"seconds": "9" * 400}, "at most", id="protobuf-beyond-float-range"),
        pytest.param({"seconds": -(10**400)}, "negative", id="protobuf-below-float-range"),
        ("99999999999h", "at most"),
    ],
)
def test_parse_duration_refuses_garbage_with_a_message(raw: object, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(raw)
    assert fragment in str(caught.value)


def test_parse_error_message_says_what_is_expected() -> None:
    with pytest.raises(ValueError, match=r"'300s'.*'15m'.*'1h30m'"):
        parse_duration("soon")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0s"),
        (45, "45s"),
        (60, "1m"),
        (61, "1m1s"),
        (300, "5m"),
        (3600, "1h"),
        (5400, "1h30m"),
        (90000, "25h"),
        (0.25, "250ms"),
        (1.5, "1.5s"),
        (90.5, "1m30.5s"),
        (0.0005, "500us"),
        (0.9996, "1s"),
        (-90, "-1m30s"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(milliseconds=250), "250ms"),
    ],
)
def test_format_duration(value: float | timedelta, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize(
    "seconds", [0, 0.001, 0.25, 1, 1.5, 59, 60, 90.5, 300.25, 3599, 3600, 5400, 86400]
)
def test_format_duration_reads_back_as_the_same_duration(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == timedelta(seconds=seconds)
