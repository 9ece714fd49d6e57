"""Freezes: a namespace in which no rollout widens or promotes until the freeze ends.

A freeze has who started it and why, when, an optional `until` (it ends by itself then) and, once
ended early, who ended it and why. At most one freeze of a namespace is active at a time; a second
`freeze start` is refused with the active one's who, why and until (end it first, then start the
new one): an extension is a deliberate act, never a side effect of a typo.

Pure: the store keeps freezes, the workflow waits on them, the CLI and API start and end them;
here is what they share (the record, the `until` a person types, the sentence a rollout shows).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from tempoconf.durations import parse_duration

__all__ = [
    "FREEZE_RECHECK_SECONDS",
    "Freeze",
    "FreezeOverride",
    "describe_freeze",
    "parse_until",
]

FREEZE_RECHECK_SECONDS = 30.0
"""How often a frozen rollout looks again (a durable timer; sooner at the freeze's `until`), so an
early `freeze end` is seen within this long."""


class FreezeOverride(BaseModel):
    """`"override_freeze": {"reason": "..."}`: the rollout passes a freeze of its namespace; each
    freeze it passes is written to the audit log with the request's author and this reason."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    reason: str = Field(min_length=1, max_length=2000)
    """Why this rollout may widen while its namespace is frozen (kept in the audit log)."""


@dataclass
class Freeze:
    """One freeze of a namespace (active while `ended_at` is None and `until` has not passed)."""

    id: int
    namespace: str
    reason: str
    by: str
    started_at: datetime
    until: datetime | None = None
    ended_at: datetime | None = None
    ended_by: str | None = None
    end_reason: str = ""

    def active(self, now: datetime) -> bool:
        return self.ended_at is None and (self.until is None or now < self.until)

    def to_json(self) -> dict[str, object]:
        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value is not None else None

        return {
            "id": self.id,
            "namespace": self.namespace,
            "reason": self.reason,
            "by": self.by,
            "started_at": iso(self.started_at),
            "until": iso(self.until),
            "ended_at": iso(self.ended_at),
            "ended_by": self.ended_by,
            "end_reason": self.end_reason,
        }


def _clock(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def describe_freeze(freeze: Freeze) -> str:
    """`namespace N frozen by X since T: REASON, until U` (`until it is ended` without one)."""
    until = f"until {_clock(freeze.until)}" if freeze.until else "until it is ended"
    return (
        f"namespace {freeze.namespace} frozen by {freeze.by} since {_clock(freeze.started_at)}: "
        f"{freeze.reason}, {until}"
    )


def parse_until(text: str, *, now: datetime) -> datetime:
    """`--until`: an ISO 8601 time with an offset (`2026-12-24T18:00:00+01:00`, `...Z`) or a
    duration from now (`2h`, `90m`, `1h30m`); ValueError when it is neither, has no offset, or
    is not in the future."""
    try:
        return _parse_until(text, now=now)
    except OverflowError:
        raise ValueError(f"until {text!r} is out of range") from None


def _parse_until(text: str, *, now: datetime) -> datetime:
    raw = text.strip()
    until: datetime | None = None
    try:
        until = datetime.fromisoformat(raw)
    except ValueError:
        try:
            until = now + parse_duration(raw)
        except ValueError:
            raise ValueError(
                f"until {text!r} is neither an ISO 8601 time with an offset "
                "(2026-12-24T18:00:00+01:00) nor a duration (2h, 90m)"
            ) from None
    if until.tzinfo is None or until.utcoffset() is None:
        raise ValueError(
            f"until {text!r} has no UTC offset: add one (2026-12-24T18:00:00+01:00, or Z for UTC)"
        )
    until = until.astimezone(UTC)
    if until <= now:
        raise ValueError(f"until {text!r} is not in the future (now {_clock(now)})")
    return until
