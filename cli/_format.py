"""Text helpers of the readable views: aligned tables, UTC times, short durations.

Every time shown to a person says its zone: inline as `2026-12-04 13:55:04 UTC` (`zoned_text`),
in a table's column as `2026-12-04 13:55:04` under a header that ends in `(UTC)` (`utc_text`).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "duration_text",
    "parse_time",
    "relative_text",
    "table",
    "utc_text",
    "value_diff",
    "zoned_text",
]


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, indent: str = ""
) -> list[str]:
    """Rows aligned under their headers (the last column is left ragged)."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        for column, cell in enumerate(row[:-1]):
            widths[column] = max(widths[column], len(cell))
    lines = []
    for row in [list(headers), *cells]:
        padded = [cell.ljust(widths[column]) for column, cell in enumerate(row[:-1])]
        lines.append((indent + "  ".join([*padded, row[-1]])).rstrip())
    return lines


def parse_time(value: str | datetime | None) -> datetime | None:
    """An ISO-8601 string (or datetime) as an aware UTC datetime; None when absent or unreadable."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def utc_text(value: str | datetime | None, *, date: bool = True) -> str:
    """`YYYY-MM-DD HH:MM:SS` UTC (or `HH:MM:SS` with date=False), for a table column whose header
    says `(UTC)`; `-` when absent."""
    moment = parse_time(value)
    if moment is None:
        return "-" if value in (None, "") else str(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")


def zoned_text(value: str | datetime | None, *, date: bool = True) -> str:
    """`YYYY-MM-DD HH:MM:SS UTC` (or `HH:MM:SS UTC` with date=False): a time in running text,
    which no column header qualifies; `-` when absent."""
    moment = parse_time(value)
    if moment is None:
        return "-" if value in (None, "") else str(value)
    return f"{utc_text(moment, date=date)} UTC"


def duration_text(seconds: float) -> str:
    """`4m12s`, `1h05m`, `2d3h`, `0.5s`: short and exact enough for a person."""
    if seconds < 0:
        seconds = -seconds
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f}s"
    total = int(round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs:02d}s" if secs else f"{minutes}m"
    return f"{secs}s"


def relative_text(value: str | datetime | None, *, now: datetime | None = None) -> str:
    """`in 4m12s` or `3s ago` relative to now; `-` when absent."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    return f"in {duration_text(seconds)}" if seconds >= 0 else f"{duration_text(seconds)} ago"


def value_diff(old: Any, new: Any, *, old_name: str, new_name: str) -> list[str]:
    """A unified diff of two values as pretty JSON with sorted keys ([] when equal)."""

    def lines(value: Any) -> list[str]:
        return [] if value is None else json.dumps(value, indent=2, sort_keys=True).splitlines()

    return list(
        difflib.unified_diff(
            lines(old), lines(new), fromfile=old_name, tofile=new_name, lineterm=""
        )
    )
