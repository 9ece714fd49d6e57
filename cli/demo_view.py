"""What `tempoconf demo` shows of the fleet while a rollout runs: a log line whenever the fleet
changes, and on a terminal a table, redrawn in place, of which version each host runs and why
(its stage, in the rollout's order)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from tempoconf.cli._format import relative_text
from tempoconf.cli.fleet import UNSERVED
from tempoconf.resolution import STABLE

__all__ = ["FleetDisplay", "LiveView", "StageOrder", "fleet_table"]

BAR_WIDTH = 40


class LiveView:
    """The fleet table, redrawn in place on a terminal; elsewhere only the log lines are printed
    (one per change), so a log file or a pipe reads as a plain story."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.tty = stream.isatty()
        self._drawn = 0

    def log(self, text: str) -> None:
        """A line that stays (above the live table on a terminal)."""
        self._clear()
        print(text, file=self._stream, flush=True)
        self._drawn = 0

    def draw(self, lines: list[str]) -> None:
        if not self.tty:
            return
        self._clear()
        print("\n".join(lines), file=self._stream, flush=True)
        self._drawn = len(lines)

    def _clear(self) -> None:
        if self.tty and self._drawn:
            # Up to the first line of the table, then erase to the end of the screen.
            self._stream.write(f"\x1b[{self._drawn}F\x1b[J")


class StageOrder:
    """The stages of the rollout on screen, in their order (from its `status` query), so rows
    and counts read canary, 10 %, 50 %, then stable, and each names its stage `1/3`."""

    def __init__(self, progress: Mapping[str, Any] | None = None) -> None:
        stages = (progress or {}).get("stages") or []
        self.names = [str(stage.get("name")) for stage in stages]
        # A rollout that is over serves nobody through a stage: stable means everyone.
        self.live = bool(progress) and not (progress or {}).get("outcome")

    def rank(self, stage: str) -> tuple[int, str]:
        if stage in self.names:
            return self.names.index(stage), ""
        if stage in (STABLE, "-"):
            return len(self.names) + 1, ""
        return len(self.names), stage  # a stage of another rollout: after ours, by name

    def numbered(self, stage: str) -> str:
        if stage in self.names:
            return f"stage {self.names.index(stage) + 1}/{len(self.names)} {stage}"
        return f"stage {stage}"


def _label(
    version: str, stage: str, *, stable: str, new: str | None, new_label: str, order: StageOrder
) -> tuple[str, str, str]:
    """(which version, why it runs here in the table, the same in a log line) of one row."""
    if (version, stage) == UNSERVED:
        return "-", "not served yet", "not served"
    which = new_label if version == new else ("stable" if version == stable else "")
    if stage not in (STABLE, "-"):
        return which, order.numbered(stage), stage
    if version == new:
        return which, "promoted: now the stable one", "promoted, now stable"
    return which, "stable: not reached yet" if order.live else "stable", ""


def _rows(
    counts: Counter[tuple[str, str]], *, new: str | None, stable: str, order: StageOrder
) -> list[tuple[tuple[str, str], int]]:
    """Stage by stage in the rollout's order, stable last; the new version first in a stage."""

    def key(item: tuple[tuple[str, str], int]) -> tuple[Any, ...]:
        (version, stage), _ = item
        unserved = (version, stage) == UNSERVED
        rank = 0 if version == new else (1 if version == stable else 2)
        return (unserved, order.rank(stage), rank, version)

    return sorted(counts.items(), key=key)


def fleet_table(
    counts: Counter[tuple[str, str]],
    *,
    stable: str,
    new: str | None,
    header: str,
    order: StageOrder | None = None,
    new_label: str = "new",
) -> list[str]:
    """One row per (version, stage) with its count and a bar, in stage order: the fleet at a glance."""
    order = order or StageOrder()
    total = sum(counts.values()) or 1
    rows = []
    for (version, stage), n in _rows(counts, new=new, stable=stable, order=order):
        which, why, _ = _label(
            version, stage, stable=stable, new=new, new_label=new_label, order=order
        )
        name = f"{version[:8]} {which}".rstrip() if (version, stage) != UNSERVED else "-"
        bar = "█" * max(1, round(BAR_WIDTH * n / total)) if n else ""
        rows.append(f"  {name:<16} {why:<30} {n:>5}  {bar}")
    return [header, f"  {'VERSION':<16} {'WHY THESE HOSTS RUN IT':<30} {'HOSTS':>5}", *rows]


def _where(progress: Mapping[str, Any]) -> str:
    """The stage a rollout is at, numbered: `stage 2/3 10%`."""
    count = progress.get("stage_count") or 0
    index = progress.get("stage_index", -1)
    if index is not None and index >= 0 and count:
        return f"stage {index + 1}/{count} {progress.get('stage_name')}"
    return "no stage yet"


def _rollout_header(progress: dict[str, Any]) -> str:
    if not progress:
        return "no rollout running"
    hold = ""
    if progress.get("state") == "holding" and progress.get("hold_deadline"):
        hold = f", hold ends {relative_text(progress['hold_deadline'])}"
    target = f" → {progress['version']}" if progress.get("version") else ""
    return f"{progress.get('path')}{target}: {_where(progress)}, {progress.get('state')}{hold}"


def _fleet_text(
    counts: Counter[tuple[str, str]],
    *,
    stable: str,
    new: str | None,
    order: StageOrder,
    new_label: str = "new",
) -> str:
    """The fleet in one line, in stage order: `2 new (channel:canary), 4 new (10%), 34 stable`."""
    parts = []
    for (version, stage), n in _rows(counts, new=new, stable=stable, order=order):
        which, _, where = _label(
            version, stage, stable=stable, new=new, new_label=new_label, order=order
        )
        if (version, stage) == UNSERVED:
            parts.append(f"{n} not served")
            continue
        parts.append(f"{n} {which or version[:8]}" + (f" ({where})" if where else ""))
    return ", ".join(parts)


def _progress_line(progress: dict[str, Any], fleet_text: str) -> str:
    return f"{_where(progress):<28} {progress.get('state', '?'):<17} | {fleet_text}"


@dataclass
class FleetDisplay:
    """One watch of the fleet: a log line (seconds since the watch began) whenever the rollout's
    stage or the fleet's one-line summary changes, and the table redrawn at every look."""

    view: LiveView
    size: int
    new_label: str = "new"
    idle: str | None = None
    """The line's left part while no rollout runs (else its empty stage and state)."""
    footer: str = ""
    """Said after the table's header."""
    _started: float = field(default_factory=time.monotonic, init=False)
    _last_line: str = field(default="", init=False)

    def show(
        self,
        progress: dict[str, Any],
        counts: Counter[tuple[str, str]],
        *,
        stable: str,
        new: str | None,
    ) -> None:
        order = StageOrder(progress)
        text = _fleet_text(counts, stable=stable, new=new, new_label=self.new_label, order=order)
        if self.idle is not None and not progress:
            line = f"{self.idle:<46} | {text}"
        else:
            line = _progress_line(progress, text)
        if line != self._last_line:
            self.view.log(f"[{time.monotonic() - self._started:6.1f}s] {line}")
            self._last_line = line
        self.view.draw(
            fleet_table(
                counts,
                stable=stable,
                new=new,
                new_label=self.new_label,
                order=order,
                header=f"fleet of {self.size}: {_rollout_header(progress)}{self.footer}",
            )
        )
