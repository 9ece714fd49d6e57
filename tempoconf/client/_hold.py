"""The hold rule (docs/contract.md, Leases), as a pure function.

A staged value is held until its `expires_at` against a move to *another staged* version, so a
host is not swept through two in-flight versions within one lease. A move back to stable (halt,
revert, rollback) is applied at once: an emergency always wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tempoconf.client._model import ConfigValue

__all__ = ["HoldDecision", "decide"]


@dataclass(frozen=True)
class HoldDecision:
    apply: bool
    """True: put `incoming` in use now. False: keep the current value until `hold_until`."""
    hold_until: datetime | None = None


_APPLY = HoldDecision(apply=True)


def decide(current: ConfigValue | None, incoming: ConfigValue, now: datetime) -> HoldDecision:
    """Whether `incoming` (what the API serves now) replaces `current` (the value in use) at `now`.

    The lease compared is the one the client last received for `current`: a renewal answered
    with 304 is not seen, so the hold may end earlier than the server's lease, never later.
    """
    if current is None or not incoming.is_staged or not current.is_staged:
        return _APPLY
    if incoming.version == current.version:
        return _APPLY  # same version (another stage name, a renewed lease): nothing to hold
    if current.expires_at is None or current.expires_at <= now:
        return _APPLY
    return HoldDecision(apply=False, hold_until=current.expires_at)
