"""Change windows: the local hours in which a rollout may widen (docs/contract.md, Change windows).

A window is a set of weekdays, a local `from`–`to` time and an IANA time zone. It opens on each
listed day at `from`; it closes at `to` the same day, or, when `to` is not after `from` (say
22:00–06:00), at `to` the next day: an overnight window belongs to the day it opens on. `to` may
be `24:00` (the end of the day).

Local times are turned into instants with `zoneinfo`, so daylight saving time is the tz
database's: a local time that a spring-forward skips is shifted forward by the gap (02:30 on the
day Berlin jumps from 02:00 to 03:00 is 03:30 CEST, as RFC 5545 does it), and a local time that
a fall-back repeats means its first occurrence (02:30 CEST, not 02:30 CET).

Pure and deterministic: the workflow passes its own clock (`workflow.now()`), so a replay computes
the same openings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "DAYS",
    "ChangeWindow",
    "Opening",
    "WindowSpec",
    "is_open",
    "next_opening",
    "window_from_spec",
]

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
"""Day names as a window lists them, Monday first (`date.weekday()` order)."""
_CLOCK = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$|^24:00$")
# How far ahead an opening is looked for: every listed weekday comes round within a week, and a
# day whose window DST makes empty (02:00-03:00 on a spring-forward day) is one more day.
_LOOKAHEAD_DAYS = 9


def _zone_problem(name: str) -> str | None:
    """Why `name` is no time zone zoneinfo knows (None: it is one)."""
    if not name or name != name.strip() or name.startswith("/") or ".." in name:
        return f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder, such as Europe
        return f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
    return None


class WindowSpec(BaseModel):
    """A change window as the request gives it: weekdays, local `from`–`to`, IANA time zone."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )

    days: list[str] = Field(
        min_length=1,
        max_length=7,
        json_schema_extra={"items": {"enum": list(DAYS)}, "uniqueItems": True},
    )
    """The days the window opens on: mon, tue, wed, thu, fri, sat, sun."""
    start: str = Field(alias="from", json_schema_extra={"pattern": _CLOCK.pattern})
    """Local opening time, HH:MM (24-hour)."""
    end: str = Field(alias="to", json_schema_extra={"pattern": _CLOCK.pattern})
    """Local closing time, HH:MM or 24:00; not after `from`: the window closes the next day."""
    timezone: str = Field(min_length=1, max_length=64)
    """An IANA time zone, e.g. Europe/Berlin, America/New_York, UTC."""

    @field_validator("days")
    @classmethod
    def _known_days(cls, value: list[str]) -> list[str]:
        unknown = [day for day in value if day not in DAYS]
        if unknown:
            raise ValueError(f"unknown day(s) {unknown}; known: {list(DAYS)}")
        if len(set(value)) != len(value):
            raise ValueError("a day is listed twice")
        return value

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str) -> str:
        if not _CLOCK.match(value):
            raise ValueError(f"{value!r} is not a local time HH:MM (00:00 to 23:59, or 24:00)")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        problem = _zone_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> WindowSpec:
        if self.start == "24:00":
            raise ValueError("'from' is a time of day, 00:00 to 23:59 (24:00 is only for 'to')")
        if self.start == self.end:
            raise ValueError(
                "'from' and 'to' are the same time: give a window of some length "
                "(00:00 to 24:00 for the whole day)"
            )
        return self


@dataclass
class ChangeWindow:
    """A validated window as the plan carries it (plain fields: it crosses the Temporal boundary)."""

    days: list[str]
    start: str
    """HH:MM, local."""
    end: str
    """HH:MM or 24:00, local; not after `start`: the next day."""
    timezone: str

    def describe(self) -> str:
        """`mon-fri 09:00-17:00 Europe/Berlin`."""
        return f"{_days_text(self.days)} {self.start}-{self.end} {self.timezone}"


@dataclass(frozen=True)
class Opening:
    """When a window next opens: the instant (UTC) and how a person reads it in the window's zone."""

    at: datetime
    window: ChangeWindow = field(compare=False)

    def label(self) -> str:
        """`Mon 09:00 Europe/Berlin`: the opening in the window's own zone."""
        local = self.at.astimezone(ZoneInfo(self.window.timezone))
        return f"{local.strftime('%a')} {local.strftime('%H:%M')} {self.window.timezone}"


def window_from_spec(spec: WindowSpec) -> ChangeWindow:
    return ChangeWindow(
        days=list(spec.days), start=spec.start, end=spec.end, timezone=spec.timezone
    )


def _days_text(days: Sequence[str]) -> str:
    ordered = sorted(days, key=DAYS.index)
    indices = [DAYS.index(day) for day in ordered]
    if len(indices) > 2 and indices == list(range(indices[0], indices[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(ordered)


def _local_instant(day: date, clock: str, zone: ZoneInfo) -> datetime:
    """The instant (UTC) of local `clock` on `day` in `zone`; 24:00 is the next day's 00:00.

    fold=0: a skipped local time is shifted forward by the gap, a repeated one is its first
    occurrence (module docstring).
    """
    if clock == "24:00":
        day, clock = day + timedelta(days=1), "00:00"
    hours, minutes = (int(part) for part in clock.split(":"))
    local = datetime.combine(day, time(hours, minutes), tzinfo=zone)
    return local.astimezone(UTC)


def _intervals(window: ChangeWindow, around: datetime) -> list[tuple[datetime, datetime]]:
    """The window's open spans [start, end) from the local day before `around` up to the lookahead."""
    zone = ZoneInfo(window.timezone)
    today = around.astimezone(zone).date()
    overnight = window.end != "24:00" and window.end <= window.start
    spans = []
    for offset in range(-1, _LOOKAHEAD_DAYS):
        day = today + timedelta(days=offset)
        if DAYS[day.weekday()] not in window.days:
            continue
        start = _local_instant(day, window.start, zone)
        end = _local_instant(day + timedelta(days=1) if overnight else day, window.end, zone)
        if end > start:  # DST can empty a window (02:00-03:00 on a spring-forward day)
            spans.append((start, end))
    return spans


def _aware(instant: datetime) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"a naive datetime {instant!r}: windows take timezone-aware instants")
    return instant.astimezone(UTC)


def is_open(windows: Sequence[ChangeWindow], instant: datetime) -> bool:
    """True when `instant` is inside one of `windows` (no windows: always open)."""
    if not windows:
        return True
    now = _aware(instant)
    return any(start <= now < end for window in windows for start, end in _intervals(window, now))


def next_opening(windows: Sequence[ChangeWindow], instant: datetime) -> Opening | None:
    """The first moment at or after `instant` when one of `windows` is open (that moment itself
    when one is open now); None when there are no windows (nothing to wait for)."""
    if not windows:
        return None
    now = _aware(instant)
    best: Opening | None = None
    for window in windows:
        for start, end in _intervals(window, now):
            if end <= now:
                continue
            candidate = Opening(at=max(start, now), window=window)
            if best is None or candidate.at < best.at:
                best = candidate
    if best is None:  # cannot happen: a listed weekday comes round within the lookahead
        raise ValueError("no change window opens within the next week")
    return best
