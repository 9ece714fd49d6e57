"""Durations as DESIGN.md accepts them: seconds, Go-style strings, or protobuf JSON."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

__all__ = ["parse_duration", "format_duration"]

_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|us|µs|ns|h|m|s)")


def parse_duration(raw: Any) -> timedelta:
    """Parse `300`, `"300s"`, `"15m"`, `"1h30m"`, `"250ms"` or `{"seconds": 300, "nanos": 0}`.

    Raises ValueError with a message that says what was expected.
    """
    if isinstance(raw, timedelta):
        seconds = raw.total_seconds()
    elif isinstance(raw, bool):
        raise ValueError("a duration must be a number of seconds or a string like '300s', not a boolean")
    elif isinstance(raw, int | float):
        seconds = float(raw)
    elif isinstance(raw, str):
        seconds = _parse_duration_string(raw)
    elif isinstance(raw, dict):
        seconds = _parse_protobuf_duration(raw)
    else:
        raise ValueError(
            f"a duration must be seconds (300), a string ('300s', '15m', '1h30m') "
            f"or {{'seconds': N}}, not {type(raw).__name__}"
        )
    if not math.isfinite(seconds):
        raise ValueError("a duration must be finite")
    if seconds < 0:
        raise ValueError(f"a duration must not be negative (got {raw!r})")
    return timedelta(seconds=seconds)


def _parse_duration_string(text: str) -> float:
    stripped = text.strip()
    if not stripped:
        raise ValueError("a duration must not be empty")
    try:
        return float(stripped)  # "300" means seconds, as a bare number does
    except ValueError:
        pass
    position = 0
    total = 0.0
    while position < len(stripped):
        match = _PART.match(stripped, position)
        if match is None:
            raise ValueError(
                f"cannot parse duration {text!r}: expected numbers with units h, m, s, ms, us, ns "
                f"such as '300s', '15m' or '1h30m'"
            )
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return total


def _parse_protobuf_duration(raw: dict[str, Any]) -> float:
    unknown = set(raw) - {"seconds", "nanos"}
    if unknown:
        raise ValueError(f"a protobuf duration has only 'seconds' and 'nanos', not {sorted(unknown)}")
    seconds = raw.get("seconds", 0)
    nanos = raw.get("nanos", 0)
    # protobuf JSON encodes int64 seconds as a string; accept both
    try:
        return float(int(seconds)) + int(nanos) / 1e9
    except (TypeError, ValueError):
        raise ValueError(f"cannot parse protobuf duration {raw!r}: seconds and nanos must be integers") from None


def format_duration(value: timedelta | float) -> str:
    """Render a duration compactly, e.g. `1h30m`, `45s`, `250ms`."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 1 and seconds > 0:
        return f"{round(seconds * 1000)}ms"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"
