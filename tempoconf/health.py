"""Judging a stage's health: figures in, a verdict out (pure; the activities fetch the figures).

Verdicts: `healthy`, `unhealthy` (with the figures and the bound that failed) or `no_data`.
During a hold, no data is not a failure (the cohort may not have reported yet); at the end of the
hold the check's `on_no_data` policy decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import TypeAdapter

from tempoconf.progress import CheckResult
from tempoconf.request import HealthCheckSpec, HttpCheckSpec, PrometheusCheckSpec, ReportsCheckSpec

__all__ = [
    "HEALTHY",
    "NO_DATA",
    "UNHEALTHY",
    "ReportFigures",
    "apply_no_data_policy",
    "check_display_name",
    "judge_reports",
    "judge_samples",
    "parse_check",
    "summarize",
]

HEALTHY = "healthy"
UNHEALTHY = "unhealthy"
NO_DATA = "no_data"

_CHECK_ADAPTER: TypeAdapter[Any] = TypeAdapter(HealthCheckSpec)


class ReportFigures(Protocol):
    """Aggregated client reports (the store's ReportStats has this shape)."""

    clients: int
    ok: int
    failed: int
    error_ratio: float | None


def parse_check(raw: dict[str, Any]) -> ReportsCheckSpec | PrometheusCheckSpec | HttpCheckSpec:
    """A check as the plan carries it (JSON) back into its typed spec."""
    return _CHECK_ADAPTER.validate_python(raw)


def check_display_name(raw: dict[str, Any], index: int) -> str:
    if raw.get("name"):
        return str(raw["name"])
    kind = str(raw.get("kind", "check"))
    if kind == "http":
        return f"http {raw.get('url', '')}"
    if kind == "prometheus":
        bound = f"<= {raw['max']:g}" if raw.get("max") is not None else f">= {raw.get('min', 0):g}"
        return f"prometheus #{index + 1} ({bound})"
    return f"reports #{index + 1}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def judge_reports(
    spec: ReportsCheckSpec, cohort: ReportFigures, baseline: ReportFigures | None
) -> tuple[str, str, dict[str, Any]]:
    """Judge the cohort's reports on the rollout's version (and, optionally, against stable)."""
    figures: dict[str, Any] = {
        "clients": cohort.clients,
        "ok": cohort.ok,
        "failed": cohort.failed,
        "error_ratio": cohort.error_ratio,
    }
    if baseline is not None:
        figures["baseline_clients"] = baseline.clients
        figures["baseline_error_ratio"] = baseline.error_ratio
    if cohort.clients < spec.min_clients or cohort.error_ratio is None:
        return (
            NO_DATA,
            f"{cohort.clients} client(s) reported operations on this version; min_clients is {spec.min_clients}",
            figures,
        )
    described = (
        f"error ratio {_ratio(cohort.error_ratio)} ({cohort.failed} failed of {cohort.ok + cohort.failed} "
        f"operations, {cohort.clients} client(s))"
    )
    if spec.max_error_ratio is not None and cohort.error_ratio > spec.max_error_ratio:
        figures["bound"] = {"max_error_ratio": spec.max_error_ratio}
        return UNHEALTHY, f"{described} exceeds max_error_ratio {spec.max_error_ratio:g}", figures
    if spec.max_baseline_factor is not None:
        if baseline is None or baseline.error_ratio is None:
            return HEALTHY, f"{described}; no baseline reports from stable clients to compare", figures
        # A flawless baseline (ratio 0) would make any single error fatal; 0.1% keeps the factor meaningful.
        threshold = max(baseline.error_ratio, 0.001) * spec.max_baseline_factor
        if cohort.error_ratio > threshold:
            figures["bound"] = {"max_baseline_factor": spec.max_baseline_factor, "threshold": threshold}
            return (
                UNHEALTHY,
                f"{described} is more than {spec.max_baseline_factor:g}x the stable clients' "
                f"{_ratio(baseline.error_ratio)} (threshold {threshold:.4g})",
                figures,
            )
        return HEALTHY, f"{described}; stable clients: {_ratio(baseline.error_ratio)}", figures
    return HEALTHY, f"{described} within max_error_ratio {spec.max_error_ratio:g}", figures


def judge_samples(spec: PrometheusCheckSpec, samples: Sequence[float]) -> tuple[str, str, dict[str, Any]]:
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
    shown = f"{highest:g}" if len(values) == 1 else f"{lowest:g}..{highest:g} over {len(values)} series"
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
    return True, "; ".join(f"{result.name}: {result.verdict} ({result.summary})" for result in results)
