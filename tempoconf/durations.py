"""Durations as the contract accepts them (docs/contract.md, Durations): seconds, Go-style strings, or protobuf JSON."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

__all__ = ["DURATION_JSON_SCHEMA", "parse_duration", "format_duration"]

_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|us|µs|ns|h|m|s)", re.ASCII)
# 100 years: longer than any hold or lease, and far inside what timedelta can hold
_MAX_SECONDS = 100 * 365 * 86400.0
_NUMBER = r"(\d+(\.\d+)?|\.\d+)"

DURATION_JSON_SCHEMA: dict[str, Any] = {
    "description": (
        'A duration: seconds (300), a string of numbers with units h, m, s, ms, us, ns ("300s", '
        '"15m", "1h30m", "250ms"; a bare "300" is seconds) or protobuf JSON ({"seconds": 300, '
        '"nanos": 0}). At most 100 years.'
    ),
    "oneOf": [
        {"description": "seconds", "type": "number", "minimum": 0, "maximum": _MAX_SECONDS},
        {
            "description": 'numbers with units h, m, s, ms, us, ns ("300s", "1h30m"), or seconds ("300")',
            "type": "string",
            # What parse_duration reads: a plain number of seconds, or numbers with units.
            "pattern": rf"^\s*\+?({_NUMBER}|({_NUMBER}(ms|us|µs|ns|h|m|s))+)\s*$",
        },
        {
            "description": "protobuf JSON",
            "type": "object",
            "properties": {
                # int64 seconds may be a string in protobuf JSON; negative ones make a negative duration
                "seconds": {
                    "type": ["integer", "string"],
                    "minimum": 0,
                    "pattern": r"^\s*\+?\d+\s*$",
                },
                "nanos": {"type": "integer", "minimum": -999_999_999, "maximum": 999_999_999},
            },
            "additionalProperties": False,
        },
    ],
    "examples": [300, "300s", "1h30m", "250ms", {"seconds": 300}],
}
"""The JSON Schema of a duration as `parse_duration` reads it, for the published schemas."""


def parse_duration(raw: Any) -> timedelta:
    """Parse `300`, `"300s"`, `"15m"`, `"1h30m"`, `"250ms"` or `{"seconds": 300, "nanos": 0}`.

    Raises ValueError with a message that says what was expected.
    """
    if isinstance(raw, timedelta):
        seconds = raw.total_seconds()
    elif isinstance(raw, bool):
        raise ValueError(
            "a duration must be a number of seconds or a string like '300s', not a boolean"
        )
    elif isinstance(raw, int | float):
        try:
            seconds = float(raw)
        except OverflowError:  # an int beyond float range
            raise ValueError(f"a duration must be at most {_MAX_SECONDS:.0f} seconds") from None
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
    if seconds > _MAX_SECONDS:
        raise ValueError(f"a duration must be at most {_MAX_SECONDS:.0f} seconds (got {raw!r})")
    return timedelta(seconds=seconds)


def _parse_duration_string(text: str) -> float:
    stripped = text.strip()
    if not stripped:
        raise ValueError("a duration must not be empty")
    try:
        return float(stripped)  # "300" means seconds, as a bare number does
    except ValueError:
        pass
    # a leading sign is read so that "-5m" is refused as negative rather than as unparseable
    sign = -1.0 if stripped[0] == "-" else 1.0
    position = 1 if stripped[0] in "+-" else 0
    if position == len(stripped):
        raise ValueError(
            f"cannot parse duration {text!r}: expected a number with a unit such as '300s'"
        )
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
    return sign * total


def _parse_protobuf_duration(raw: dict[str, Any]) -> float:
    unknown = set(raw) - {"seconds", "nanos"}
    if unknown:
        raise ValueError(
            f"a protobuf duration has only 'seconds' and 'nanos', not {sorted(unknown)}"
        )
    seconds = _protobuf_integer(raw.get("seconds", 0), raw)
    nanos = _protobuf_integer(raw.get("nanos", 0), raw)
    if not -999_999_999 <= nanos <= 999_999_999:
        raise ValueError(f"cannot parse protobuf duration {raw!r}: nanos must be within ±999999999")
    # Clamped before float(), which raises OverflowError past its range: the caller's range checks
    # then refuse it as negative or too long, as they do a number of seconds.
    bound = int(_MAX_SECONDS) + 1
    return float(max(-bound, min(seconds, bound))) + nanos / 1e9


def _protobuf_integer(field: Any, raw: dict[str, Any]) -> int:
    # protobuf JSON encodes int64 seconds as a string; accept both, and integral floats such as 5e8,
    # but never truncate 1.5 to 1 nor read a boolean as 1
    if isinstance(field, bool):
        field = None
    elif isinstance(field, float) and field.is_integer():
        return int(field)
    elif isinstance(field, int):
        return field
    elif isinstance(field, str):
        try:
            return int(field.strip(), 10)
        except ValueError:
            pass
    raise ValueError(f"cannot parse protobuf duration {raw!r}: seconds and nanos must be integers")


def format_duration(value: timedelta | float) -> str:
    """Render a duration compactly, e.g. `1h30m`, `45s`, `1.5s`, `250ms`; parse_duration reads it back."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds < 0:
        return "-" + format_duration(-seconds)
    millis = round(seconds * 1000)
    if millis == 0 and round(seconds * 1e6) > 0:
        return f"{round(seconds * 1e6)}us"
    if millis < 1000 and millis > 0:
        return f"{millis}ms"
    whole, rest_millis = divmod(millis, 1000)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if rest_millis:
        secs_text = f"{secs}.{rest_millis:03d}".rstrip("0") + "s"
    else:
        secs_text = f"{secs}s" if secs else ""
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", secs_text]
    return "".join(parts) or "0s"
