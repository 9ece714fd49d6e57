"""Gates on applied versions: which clients of a stage's cohort applied the rollout's version.

Delivery is not application: a client may be served a version and still run the old one (its
reload failed, its file is not writable). The SDK and `tempoconf agent` report the version they
applied (`POST /v1/reports` with `applied`); a stage with `min_applied` holds after its cooldown
until that share of its cohort reports the stage's version applied.

The ratio: among the clients of the stage's cohort (stages 1..k, matched as the API matches
them: tempoconf.resolution) seen in the last `applied_window` (polling, reporting health or
reporting an apply), the share whose last applied version is the rollout's version. A cohort
with no client seen has no ratio, and the gate is not met: nobody is known to have applied it.

Pure and workflow-safe: plain dataclasses, the store's rows read through Protocols.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Protocol

from tempoconf.resolution import ClientIdentity, StageTarget, stage_matches

__all__ = [
    "APPLY_RECHECK_SECONDS",
    "DEFAULT_APPLIED_WINDOW_SECONDS",
    "MAX_STRAGGLERS_SHOWN",
    "AppliedGate",
    "AppliedRow",
    "ClientRow",
    "SeenRow",
    "Straggler",
    "describe_gate",
    "gate_from_json",
    "straggler_lines",
    "ClientApplied",
    "client_rows",
    "judge_applied",
    "on_version",
]

DEFAULT_APPLIED_WINDOW_SECONDS = 600.0
"""`applied_window` of a stage that names none: clients seen in the last 10 minutes count."""
APPLY_RECHECK_SECONDS = 10.0
"""How often a waiting gate asks the store again (a durable timer between two checks)."""
MAX_STRAGGLERS_SHOWN = 20
"""Stragglers listed by `status` and the Web UI; the rest are counted."""


@dataclass
class ClientApplied:
    """A client of a config as `tempoconf clients` lists it: how it was seen, what it applied."""

    client: str
    channel: str | None
    labels: dict[str, str]
    last_seen: datetime
    last_version: str | None
    """The version it was last served (polls), or reported on."""
    applied_version: str | None = None
    applied_at: datetime | None = None
    apply_error: str | None = None
    apply_error_version: str | None = None


class ClientRow(Protocol):
    """A client as a store row names it: its id, and the channel and labels stages target."""

    @property
    def client(self) -> str: ...
    @property
    def channel(self) -> str | None: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


class SeenRow(ClientRow, Protocol):
    """A client seen polling or reporting (tempoconf.store.SeenClient)."""

    @property
    def last_seen(self) -> datetime: ...
    @property
    def last_version(self) -> str | None: ...


class AppliedRow(ClientRow, Protocol):
    """What a client last reported applying (tempoconf.store.AppliedState)."""

    @property
    def version(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def error_version(self) -> str | None: ...
    @property
    def applied_at(self) -> datetime | None: ...
    @property
    def reported_at(self) -> datetime: ...


@dataclass
class Straggler:
    """A client of the cohort that has not reported the stage's version applied."""

    client: str
    last_seen: str
    """ISO 8601: its last poll, health report or apply report."""
    applied_version: str | None = None
    """The version it last reported applied (None: it never reported one)."""
    error: str | None = None
    """The error of its last failed apply, if that came after its last success."""
    error_version: str | None = None


@dataclass
class AppliedGate:
    """One look at a stage's applied-version gate: the figures, and the first stragglers."""

    stage: str
    version: str
    min_applied: float
    window_seconds: float
    cohort: int = 0
    """Clients of the stage's cohort seen in the window."""
    applied: int = 0
    """Of those, the ones whose last applied version is `version`."""
    met: bool = False
    checked_at: str = ""
    stragglers: list[Straggler] = field(default_factory=list)
    """The first MAX_STRAGGLERS_SHOWN, by client id."""
    straggler_count: int = 0
    deadline: str | None = None
    """When `apply_timeout` ends (ISO 8601), counted from the stage's publish; None: no timeout."""
    timed_out: bool = False
    """The apply timeout passed with the ratio unmet (on_apply_timeout: hold keeps it here)."""

    @property
    def ratio(self) -> float | None:
        return self.applied / self.cohort if self.cohort else None


def _identity(client: str, seen: SeenRow | None, applied: AppliedRow | None) -> ClientIdentity:
    """The identity it polls with, else the one its apply report named."""
    source: ClientRow | None = seen if seen is not None else applied
    if source is None:
        return ClientIdentity(client)
    return ClientIdentity(client, source.channel, dict(source.labels))


@dataclass(frozen=True)
class _Presence:
    """A client seen since some time: its rows (either may be missing) and when it was last seen."""

    client: str
    seen: SeenRow | None
    applied: AppliedRow | None
    last_seen: datetime


def _clients_seen(
    seen: Sequence[SeenRow], applied: Sequence[AppliedRow], *, since: datetime
) -> Iterator[_Presence]:
    """Each client of `seen` and `applied` seen since `since` (a `seen` row is; an apply report
    counts when it came since), by client id."""
    seen_by = {row.client: row for row in seen}
    applied_by = {row.client: row for row in applied}
    for client in sorted(seen_by.keys() | applied_by.keys()):
        seen_row, applied_row = seen_by.get(client), applied_by.get(client)
        if seen_row is None and (applied_row is None or applied_row.reported_at < since):
            continue  # not seen in the window: gone, or not yet there
        times = [row.last_seen for row in (seen_row,) if row is not None]
        times += [row.reported_at for row in (applied_row,) if row is not None]
        yield _Presence(client, seen_row, applied_row, max(times))


def judge_applied(
    *,
    path: str,
    stages: Sequence[StageTarget],
    version: str,
    stage_name: str,
    min_applied: float,
    window_seconds: float,
    seen: Sequence[SeenRow],
    applied: Sequence[AppliedRow],
    now: datetime,
) -> AppliedGate:
    """The gate's verdict. `seen`: the config's clients seen polling or reporting health in the
    window (since now - window); `applied`: what every client of the config last reported
    applying, however long ago (a client that applied an hour ago and polls still is no
    straggler); an apply report in the window counts as being seen. A client is in the cohort
    when it matches any of `stages` (the live stages 1..k)."""
    since = now - timedelta(seconds=window_seconds)
    members: list[tuple[str, datetime, AppliedRow | None]] = []
    for member in _clients_seen(seen, applied, since=since):
        identity = _identity(member.client, member.seen, member.applied)
        if any(stage_matches(stage, path, identity) for stage in stages):
            members.append((member.client, member.last_seen, member.applied))
    done = [m for m in members if m[2] is not None and m[2].version == version]
    late = [m for m in members if m[2] is None or m[2].version != version]
    cohort = len(members)
    return AppliedGate(
        stage=stage_name,
        version=version,
        min_applied=min_applied,
        window_seconds=window_seconds,
        cohort=cohort,
        applied=len(done),
        # compared in whole clients, so 0.95 of 20 is 19 with no float rounding in the way
        met=cohort > 0 and len(done) >= _needed(min_applied, cohort),
        checked_at=now.isoformat(),
        stragglers=[
            Straggler(
                client=client,
                last_seen=last_seen.isoformat(),
                applied_version=row.version if row is not None else None,
                error=row.error if row is not None else None,
                error_version=row.error_version if row is not None else None,
            )
            for client, last_seen, row in late[:MAX_STRAGGLERS_SHOWN]
        ],
        straggler_count=len(late),
    )


def _needed(min_applied: float, cohort: int) -> int:
    """Clients that must have applied: ceil(min_applied × cohort), without float noise."""
    exact = round(min_applied * cohort, 9)
    whole = int(exact)
    return whole if whole == exact else whole + 1


def on_version(
    version: str,
    *,
    served: str | None,
    applied: AppliedRow | None,
    not_applied: bool,
) -> bool:
    """Whether a client belongs to `tempoconf clients PATH --version V [--not-applied]`: it was
    last served V (or reported on it), or it reported V applied or failing; with `not_applied`,
    only those whose last applied version is not V: the stragglers, delivered but not applied."""
    did_apply = applied is not None and applied.version == version
    involved = (
        served == version or did_apply or (applied is not None and applied.error_version == version)
    )
    return involved and not (not_applied and did_apply)


def client_rows(
    seen: Sequence[SeenRow],
    applied: Sequence[AppliedRow],
    *,
    since: datetime,
    version: str | None = None,
    not_applied: bool = False,
) -> list[ClientApplied]:
    """The config's clients seen since `since` (`seen`: polled or reported health then; an apply
    report then counts too), with what each last applied, sorted by client id; with `version`,
    only those `on_version` keeps (`not_applied`: the stragglers of that version)."""
    rows = []
    for member in _clients_seen(seen, applied, since=since):
        seen_row, applied_row = member.seen, member.applied
        served = seen_row.last_version if seen_row is not None else None
        if version is not None and not on_version(
            version, served=served, applied=applied_row, not_applied=not_applied
        ):
            continue
        identity = _identity(member.client, seen_row, applied_row)
        rows.append(
            ClientApplied(
                client=member.client,
                channel=identity.channel,
                labels=dict(identity.labels),
                last_seen=member.last_seen,
                last_version=served,
                applied_version=applied_row.version if applied_row else None,
                applied_at=applied_row.applied_at if applied_row else None,
                apply_error=applied_row.error if applied_row else None,
                apply_error_version=applied_row.error_version if applied_row else None,
            )
        )
    return rows


def _percent(value: float) -> str:
    return f"{value * 100:.4g}%"


def describe_gate(gate: AppliedGate) -> str:
    """E.g. `applied 18/20 (90%) of the cohort seen in the last 10m, needs 95%: 2 straggler(s)`."""
    window = f"{gate.window_seconds:g}s"
    if gate.cohort == 0:
        return (
            f"no client of the cohort seen in the last {window}: nobody is known to have applied "
            f"{gate.version} (needs {_percent(gate.min_applied)})"
        )
    ratio = gate.ratio or 0.0
    verdict = "met" if gate.met else f"{gate.straggler_count} straggler(s)"
    return (
        f"applied {gate.applied}/{gate.cohort} ({_percent(ratio)}) of the cohort seen in the last "
        f"{window}, needs {_percent(gate.min_applied)}: {verdict}"
    )


def _clock(iso: str | None) -> str:
    return f"{iso[:10]} {iso[11:19]} UTC" if iso else "?"


def straggler_lines(gate: AppliedGate) -> list[str]:
    """One line per straggler shown (client, last seen, what it reports), then how many more:
    what `rollout status` and the Web UI's details list."""
    lines = []
    for straggler in gate.stragglers:
        if straggler.error is not None:
            reports = f"apply of {straggler.error_version} failed: {straggler.error}"
            if straggler.applied_version:
                reports += f" (still on {straggler.applied_version})"
        elif straggler.applied_version:
            reports = f"applied {straggler.applied_version}"
        else:
            reports = "reported no apply"
        lines.append(f"{straggler.client}: last seen {_clock(straggler.last_seen)}, {reports}")
    more = gate.straggler_count - len(gate.stragglers)
    if more > 0:
        lines.append(
            f"... and {more} more (`tempoconf clients` with --version {gate.version} "
            "--not-applied lists them all)"
        )
    return lines


def gate_from_json(raw: Mapping[str, Any]) -> AppliedGate:
    """An AppliedGate from the `status` query's JSON (`progress.applied`); unknown keys ignored."""
    names = {item.name for item in fields(AppliedGate)} - {"stragglers"}
    known = {item.name for item in fields(Straggler)}
    return AppliedGate(
        **{key: value for key, value in raw.items() if key in names},
        stragglers=[
            Straggler(**{key: value for key, value in item.items() if key in known})
            for item in raw.get("stragglers") or []
        ],
    )
