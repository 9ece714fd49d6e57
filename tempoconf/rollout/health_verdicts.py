"""Judging a stage's health: figures in, a verdict out (pure; the activities fetch the figures).

Verdicts: `healthy`, `unhealthy` (with the figures and the bound that failed) or `no_data`.
During a hold, no data is not a failure (the cohort may not have reported yet); at the end of the
hold the check's `on_no_data` policy decides.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from tempoconf.durations import format_duration
from tempoconf.resolution import ClientIdentity, StageTarget, stage_matches
from tempoconf.rollout.health_specs import PrometheusCheckSpec, ReportsCheckSpec
from tempoconf.rollout.plan import PlannedStage, RolloutPlan
from tempoconf.rollout.progress import CheckResult, Verdict
from tempoconf.rollout.sequential import RatioSums
from tempoconf.rollout.sequential_verdicts import GroupSums, judge_sequential

__all__ = [
    "HEALTHY",
    "INCONCLUSIVE",
    "NO_DATA",
    "UNHEALTHY",
    "ClientReports",
    "ReportEvidence",
    "ReportTally",
    "apply_no_data_policy",
    "cohort_stages",
    "describe_evidence",
    "evidence_since",
    "evidence_window",
    "gather_evidence",
    "judge_reports",
    "judge_samples",
    "reporting_identity",
    "summarize",
]

HEALTHY = Verdict.HEALTHY
UNHEALTHY = Verdict.UNHEALTHY
NO_DATA = Verdict.NO_DATA
INCONCLUSIVE = Verdict.INCONCLUSIVE


@dataclass(frozen=True)
class ReportTally:
    """Health reports added up: distinct clients, operations, reports."""

    clients: int = 0
    ok: int = 0
    failed: int = 0
    reports: int = 0
    # Derived from the same reports: two tallies of them are equal whatever their sums' rounding.
    per_client: GroupSums = field(default=GroupSums(RatioSums(), RatioSums()), compare=False)
    """Each client's failed over operations, and latency over timed operations, as the sums a
    sequential judge needs (tempoconf.rollout.sequential)."""

    @property
    def error_ratio(self) -> float | None:
        """failed / (ok + failed); None when no operation was reported."""
        operations = self.ok + self.failed
        return self.failed / operations if operations else None


class ClientReports(Protocol):
    """One client's reports on one version under one identity (the store's ReportTotals)."""

    @property
    def client(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def ok(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def reports(self) -> int: ...
    @property
    def latency_count(self) -> int: ...
    @property
    def latency_sum_ms(self) -> float: ...
    @property
    def channel(self) -> str | None: ...
    @property
    def labels(self) -> Mapping[str, str] | None: ...
    @property
    def seen_channel(self) -> str | None: ...
    @property
    def seen_labels(self) -> Mapping[str, str] | None: ...


@dataclass(frozen=True)
class ReportEvidence:
    """The reports a `reports` check judges, split by who sent them, and since when."""

    since: datetime
    since_reason: str
    """Why `since`: "stage published", or "window 5m" when the window is the shorter span."""
    cohort: ReportTally
    """Clients in the stage's cohort, on the rollout's version: the evidence."""
    outside: ReportTally
    """Clients outside the cohort on the rollout's version: left out (they say nothing of the stage)."""
    baseline: ReportTally
    """Clients outside the cohort on other versions: what `max_baseline_factor` compares with."""


def evidence_since(
    published_at: datetime | None, now: datetime, window: timedelta | None
) -> tuple[datetime, str]:
    """Where a stage's evidence starts: its publish time, or `now - window` when that is later
    (or the publish time is unknown: then the window, 5 minutes when None). Earlier reports are
    about another stage, or another rollout."""
    if window is None:
        if published_at is not None:
            return published_at, "stage published"
        window = _UNKNOWN_PUBLISH_WINDOW
    windowed = now - window
    if published_at is None or windowed > published_at:
        return windowed, f"window {format_duration(window)}"
    return published_at, "stage published"


_UNKNOWN_PUBLISH_WINDOW = timedelta(minutes=5)


def evidence_window(spec: ReportsCheckSpec) -> timedelta | None:
    """How far back a reports check looks: its `window`, or (None) everything since the stage's
    publish for a judge, whose interval is over all the evidence."""
    return None if spec.judge is not None else spec.window


def cohort_stages(plan: RolloutPlan, stage: PlannedStage) -> list[PlannedStage]:
    """The stages live while `stage` holds: stages are cumulative, so 1..k (widening keeps the canaries)."""
    return [planned for planned in plan.stages if planned.index <= stage.index]


def reporting_identity(reports: ClientReports) -> ClientIdentity:
    """Who sent these reports: the identity they named, else the one the client polls with, else
    a bare client id (which only percentile stages can match)."""
    if reports.labels is not None:
        return ClientIdentity(reports.client, reports.channel, dict(reports.labels))
    if reports.seen_labels is not None:
        return ClientIdentity(reports.client, reports.seen_channel, dict(reports.seen_labels))
    return ClientIdentity(reports.client)


def gather_evidence(
    totals: Iterable[ClientReports],
    *,
    path: str,
    version: str | Collection[str],
    stages: Sequence[StageTarget],
    since: datetime,
    since_reason: str,
) -> ReportEvidence:
    """Split a config's reports since `since` into the cohort's, the left-out ones and the baseline.

    A client is in the cohort when it matches any of `stages` (cohort_stages). Reports of cohort
    clients on other versions (before they picked the rollout up) are in none of the three. A
    changeset's evidence is the reports of all its configs, each on its own new `version`, the
    cohort bucketed by the changeset's key (`path`): a client is counted once however many of its
    configs it reports on.
    """
    rolled_out = {version} if isinstance(version, str) else set(version)
    cohort: list[ClientReports] = []
    outside: list[ClientReports] = []
    baseline: list[ClientReports] = []
    for reports in totals:
        identity = reporting_identity(reports)
        member = any(stage_matches(stage, path, identity) for stage in stages)
        if reports.version in rolled_out:
            (cohort if member else outside).append(reports)
        elif not member:
            baseline.append(reports)
    return ReportEvidence(
        since=since,
        since_reason=since_reason,
        cohort=_tally(cohort),
        outside=_tally(outside),
        baseline=_tally(baseline),
    )


def _tally(totals: Sequence[ClientReports]) -> ReportTally:
    # A client's reports under several identities or versions are one client's evidence.
    rates: dict[str, list[float]] = {}
    latency: dict[str, list[float]] = {}
    for reports in totals:
        rate = rates.setdefault(reports.client, [0.0, 0.0])
        rate[0] += reports.failed
        rate[1] += reports.ok + reports.failed
        timed = latency.setdefault(reports.client, [0.0, 0.0])
        timed[0] += reports.latency_sum_ms
        timed[1] += reports.latency_count
    return ReportTally(
        clients=len(rates),
        ok=sum(reports.ok for reports in totals),
        failed=sum(reports.failed for reports in totals),
        reports=sum(reports.reports for reports in totals),
        per_client=GroupSums(
            rates=RatioSums.of((x, d) for x, d in rates.values()),
            latency=RatioSums.of((x, d) for x, d in latency.values()),
        ),
    )


def _clock(at: datetime, now: datetime) -> str:
    at, now = at.astimezone(UTC), now.astimezone(UTC)
    return at.strftime("%H:%M:%S UTC" if at.date() == now.date() else "%Y-%m-%d %H:%M:%S UTC")


def describe_evidence(evidence: ReportEvidence, now: datetime) -> str:
    """E.g. `3 cohort client(s) since 12:00:03 UTC (stage published); 40 report(s) from 4
    client(s) outside the cohort left out`."""
    text = (
        f"{evidence.cohort.clients} cohort client(s) since {_clock(evidence.since, now)} "
        f"({evidence.since_reason})"
    )
    if evidence.outside.reports:
        text += (
            f"; {evidence.outside.reports} report(s) from {evidence.outside.clients} client(s) "
            "outside the cohort left out"
        )
    return text


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def judge_reports(
    spec: ReportsCheckSpec, evidence: ReportEvidence, *, now: datetime
) -> tuple[Verdict, str, dict[str, Any]]:
    """Judge the cohort's reports on the rollout's version: against its thresholds, then (with a
    `judge`) against the baseline with confidence. The one function the health activity calls."""
    cohort, baseline = evidence.cohort, evidence.baseline
    figures: dict[str, Any] = {
        "clients": cohort.clients,
        "ok": cohort.ok,
        "failed": cohort.failed,
        "error_ratio": cohort.error_ratio,
        "since": evidence.since.astimezone(UTC).isoformat(timespec="seconds"),
        "left_out_clients": evidence.outside.clients,
        "left_out_reports": evidence.outside.reports,
    }
    if spec.max_baseline_factor is not None:
        figures["baseline_clients"] = baseline.clients
        figures["baseline_error_ratio"] = baseline.error_ratio
    source = f"evidence: {describe_evidence(evidence, now)}"
    judged = spec.judge is not None
    if cohort.clients < spec.min_clients or (cohort.error_ratio is None and not judged):
        return (
            NO_DATA,
            f"{cohort.clients} client(s) of the cohort reported operations on this version; "
            f"min_clients is {spec.min_clients}; {source}",
            figures,
        )
    thresholds = spec.max_error_ratio is not None or spec.max_baseline_factor is not None
    if thresholds and cohort.error_ratio is not None:
        verdict, summary = _judge_thresholds(spec, evidence, figures, source)
        if spec.judge is None or verdict == UNHEALTHY:
            return verdict, summary, figures
    assert spec.judge is not None  # a check without thresholds has a judge (its validator)
    verdict, summary, sequential = judge_sequential(
        spec.judge.sequential, cohort.per_client, baseline.per_client
    )
    return verdict, f"{summary}; {source}", {**figures, **sequential}


def _judge_thresholds(
    spec: ReportsCheckSpec, evidence: ReportEvidence, figures: dict[str, Any], source: str
) -> tuple[Verdict, str]:
    """The thresholds: `max_error_ratio`, and `max_baseline_factor` times the baseline's ratio
    (the bound that failed is added to `figures`)."""
    cohort, baseline = evidence.cohort, evidence.baseline
    assert cohort.error_ratio is not None  # judge_reports calls this only then
    described = (
        f"error ratio {_ratio(cohort.error_ratio)} ({cohort.failed} failed of {cohort.ok + cohort.failed} "
        f"operations, {cohort.clients} client(s))"
    )
    if spec.max_error_ratio is not None and cohort.error_ratio > spec.max_error_ratio:
        figures["bound"] = {"max_error_ratio": spec.max_error_ratio}
        return (
            UNHEALTHY,
            f"{described} exceeds max_error_ratio {spec.max_error_ratio:g}; {source}",
        )
    if spec.max_baseline_factor is not None:
        if baseline.error_ratio is None:
            return (
                HEALTHY,
                f"{described}; no baseline reports from clients outside the cohort; {source}",
            )
        # A flawless baseline (ratio 0) would make any single error fatal; 0.1% keeps the factor meaningful.
        threshold = max(baseline.error_ratio, 0.001) * spec.max_baseline_factor
        baseline_text = (
            f"the baseline's {_ratio(baseline.error_ratio)} ({baseline.clients} client(s) outside the "
            "cohort, on other versions)"
        )
        if cohort.error_ratio > threshold:
            figures["bound"] = {
                "max_baseline_factor": spec.max_baseline_factor,
                "threshold": threshold,
            }
            return (
                UNHEALTHY,
                f"{described} is more than {spec.max_baseline_factor:g}x {baseline_text} "
                f"(threshold {threshold:.4g}); {source}",
            )
        return HEALTHY, f"{described}; {baseline_text}; {source}"
    return (
        HEALTHY,
        f"{described} within max_error_ratio {spec.max_error_ratio:g}; {source}",
    )


def judge_samples(
    spec: PrometheusCheckSpec, samples: Sequence[float]
) -> tuple[Verdict, str, dict[str, Any]]:
    """Judge a query's samples: every sample must satisfy the bounds; the worst one is reported."""
    values = [value for value in samples if not math.isnan(value)]
    figures: dict[str, Any] = {"samples": len(values), "max": spec.max, "min": spec.min}
    if not values:
        return NO_DATA, "the query returned no data", figures
    highest, lowest = max(values), min(values)
    figures.update(highest=highest, lowest=lowest)
    if spec.max is not None and highest > spec.max:
        return UNHEALTHY, f"query value {highest:g} is above max {spec.max:g}", figures
    if spec.min is not None and lowest < spec.min:
        return UNHEALTHY, f"query value {lowest:g} is below min {spec.min:g}", figures
    shown = (
        f"{highest:g}" if len(values) == 1 else f"{lowest:g}..{highest:g} over {len(values)} series"
    )
    return HEALTHY, f"query value {shown} within bounds", figures


def apply_no_data_policy(result: CheckResult, on_no_data: str, *, final: bool) -> CheckResult:
    """At the end of the hold, `on_no_data` turns no data into a pass or a failure."""
    if result.verdict != NO_DATA or not final:
        return result
    verdict = HEALTHY if on_no_data == "pass" else UNHEALTHY
    return CheckResult(
        index=result.index,
        name=result.name,
        kind=result.kind,
        verdict=verdict,
        summary=f"{result.summary} (no data: on_no_data={on_no_data})",
        figures=result.figures,
    )


def summarize(results: Sequence[CheckResult]) -> tuple[bool, str]:
    """(healthy, one line naming every failing check with its figures, or all verdicts)."""
    failing = [result for result in results if result.verdict == UNHEALTHY]
    if failing:
        return False, "; ".join(f"{result.name}: {result.summary}" for result in failing)
    if not results:
        return True, "no health checks configured"
    return True, "; ".join(
        f"{result.name}: {result.verdict} ({result.summary})" for result in results
    )
