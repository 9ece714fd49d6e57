"""What kind of stage served a value, guessed from its name: only the fallback for an answer
without `stage_kind` (an API older than the field, or a value cached from one and confirmed by a
304 since, as the ETag does not change). Every other answer says the kind: `ConfigValue.stage_kind`.

A stage's default name says it (docs/contract.md: `channel:canary`, `10%`, `labels:region=eu`,
joined by spaces); a stage given a name of its own is read from the client's identity: a client
with neither channel nor labels can only have been matched by a percentile (which is wrong for a
custom-named percentile stage that also names a channel or labels).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from tempoconf.client._model import STABLE

__all__ = ["StageKind", "stage_kind"]

StageKind = Literal["stable", "targeting", "split"]
"""`stable`: no stage applies; `split`: a percentile stage; `targeting`: a channel or labels one."""

_PERCENT = re.compile(r"[0-9]+(\.[0-9]+)?%")
_TARGET = re.compile(r"(channel|labels):\S+")


def stage_kind(stage: str, *, channel: str | None, labels: Mapping[str, str]) -> StageKind:
    """The kind of `stage` as served to a client with this channel and these labels."""
    if stage == STABLE:
        return "stable"
    parts = stage.split(" ")
    if all(_PERCENT.fullmatch(part) or _TARGET.fullmatch(part) for part in parts):
        # A default name: a percentile in it means the client was in the split (and matched the
        # channel or labels named beside it as well).
        return "split" if any(_PERCENT.fullmatch(part) for part in parts) else "targeting"
    return "targeting" if channel or labels else "split"
