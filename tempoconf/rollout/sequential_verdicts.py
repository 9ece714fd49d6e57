"""A sequential judge's verdict on a cohort against its baseline, with the evidence in words:
`+0.80 pp [0.25, 1.35] at 95%, 4,210 operations from 37 cohort clients vs 51,000 from 960
baseline clients` (pure; tempoconf.rollout.sequential does the statistics)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tempoconf.durations import format_duration
from tempoconf.rollout.health_specs import SequentialJudgeSpec
from tempoconf.rollout.progress import CheckResult, Verdict
from tempoconf.rollout.sequential import Comparison, Conclusion, RatioSums, compare

__all__ = ["GroupSums", "judge_sequential", "settle_inconclusive"]


@dataclass(frozen=True)
class GroupSums:
    """One side of the comparison: its error rates and its latency, per client."""

    rates: RatioSums
    """failed over operations."""
    latency: RatioSums
    """latency_sum_ms over latency_count."""


@dataclass(frozen=True)
class _Metric:
    name: str
    tolerance_field: str
    rate: bool
    unit: str
    """How the increase is written: "pp" (percentage points) or "ms"."""
    scale: float
    operations: str


_ERROR_RATE = _Metric("error rate", "max_increase", True, "pp", 100.0, "operations")
_LATENCY = _Metric("mean latency", "max_latency_increase_ms", False, "ms", 1.0, "timed operations")


def _decimals(width: float) -> int:
    """Enough decimals to show the interval's half-width with two figures (1 to 4)."""
    if width <= 0 or math.isinf(width):
        return 2
    return min(max(1 - math.floor(math.log10(width)), 1), 4)


def _clients(sums: RatioSums, side: str) -> str:
    return f"{sums.clients} {side} client" + ("" if sums.clients == 1 else "s")


def _count(value: float) -> str:
    return f"{round(value):,}"


def _evidence(
    metric: _Metric, comparison: Comparison, cohort: RatioSums, baseline: RatioSums
) -> str:
    sizes = (
        f"{_count(cohort.denominator)} {metric.operations} from {_clients(cohort, 'cohort')} vs "
        f"{_count(baseline.denominator)} from {_clients(baseline, 'baseline')}"
    )
    interval = comparison.interval
    if interval is None:
        return f"{metric.name}: no interval ({comparison.missing}); {sizes}"
    scale = metric.scale
    places = _decimals((interval.upper - interval.lower) * scale / 2)
    number = f"{{:+.{places}f}}"
    bound = f"{{:.{places}f}}"
    lower = "-inf" if math.isinf(interval.lower) else bound.format(interval.lower * scale)
    upper = "inf" if math.isinf(interval.upper) else bound.format(interval.upper * scale)
    return (
        f"{metric.name} {number.format(interval.increase * scale)} {metric.unit} "
        f"[{lower}, {upper}] at {interval.confidence:.0%}, {sizes}"
    )


def _tolerance_text(metric: _Metric, tolerance: float) -> str:
    return f"{metric.tolerance_field} {tolerance * metric.scale:g} {metric.unit}"


def _judge_metric(
    metric: _Metric, tolerance: float, confidence: float, cohort: RatioSums, baseline: RatioSums
) -> tuple[Conclusion | None, str, dict[str, Any]]:
    comparison = compare(
        cohort, baseline, tolerance=tolerance, confidence=confidence, rate=metric.rate
    )
    text = _evidence(metric, comparison, cohort, baseline)
    figures: dict[str, Any] = {
        "tolerance": tolerance,
        "cohort_clients": cohort.clients,
        "cohort_operations": cohort.denominator,
        "baseline_clients": baseline.clients,
        "baseline_operations": baseline.denominator,
    }
    interval = comparison.interval
    if interval is None:
        figures["missing"] = comparison.missing
        return None, text, figures
    conclusion = interval.conclusion(tolerance)
    figures.update(
        increase=interval.increase,
        lower=None if math.isinf(interval.lower) else interval.lower,
        upper=None if math.isinf(interval.upper) else interval.upper,
        conclusion=str(conclusion),
    )
    relation = {
        Conclusion.REGRESSION: "wholly above",
        Conclusion.NO_REGRESSION: "wholly below",
        Conclusion.INCONCLUSIVE: "across",
    }[conclusion]
    return (
        conclusion,
        f"{conclusion}: {text}; the interval lies {relation} {_tolerance_text(metric, tolerance)}",
        figures,
    )


def judge_sequential(
    judge: SequentialJudgeSpec, cohort: GroupSums, baseline: GroupSums
) -> tuple[Verdict, str, dict[str, Any]]:
    """Regression on any metric: unhealthy; no regression on every one: healthy; else
    inconclusive. A metric with no interval (no operations, no baseline) is no data."""
    judged: list[tuple[Conclusion | None, str]] = []
    figures: dict[str, Any] = {"judge": "sequential", "confidence": judge.confidence}
    for metric, tolerance, cohort_sums, baseline_sums in (
        (_ERROR_RATE, judge.max_increase, cohort.rates, baseline.rates),
        (_LATENCY, judge.max_latency_increase_ms, cohort.latency, baseline.latency),
    ):
        if tolerance is None:
            continue
        conclusion, text, metric_figures = _judge_metric(
            metric, tolerance, judge.confidence, cohort_sums, baseline_sums
        )
        judged.append((conclusion, text))
        figures["error_rate" if metric.rate else "latency_ms"] = metric_figures
    conclusions = [conclusion for conclusion, _ in judged]
    summary = "; ".join(text for _, text in judged)
    if Conclusion.REGRESSION in conclusions:
        return Verdict.UNHEALTHY, summary, figures
    if None in conclusions:
        return Verdict.NO_DATA, summary, figures
    if all(conclusion == Conclusion.NO_REGRESSION for conclusion in conclusions):
        return Verdict.HEALTHY, summary, figures
    return Verdict.INCONCLUSIVE, summary, figures


def settle_inconclusive(
    result: CheckResult, judge: SequentialJudgeSpec | None, *, final: bool, extension_over: bool
) -> CheckResult:
    """At the end of the hold, `on_inconclusive` turns an inconclusive verdict into a pass or a
    failure; `extend` keeps it inconclusive (the rollout holds on) until the extension is over,
    when `after_extension` decides. Never silent: the summary says which rule passed it."""
    if result.verdict != Verdict.INCONCLUSIVE or not final or judge is None:
        return result
    if judge.on_inconclusive == "extend":
        if not extension_over:
            return result
        outcome = judge.after_extension
        why = (
            f"still inconclusive after a {format_duration(judge.max_extension)} extension: "
            f"after_extension={outcome}"
        )
    else:
        outcome = judge.on_inconclusive
        why = f"inconclusive at the end of the hold: on_inconclusive={outcome}"
    return CheckResult(
        index=result.index,
        name=result.name,
        kind=result.kind,
        verdict=Verdict.HEALTHY if outcome == "pass" else Verdict.UNHEALTHY,
        summary=f"{result.summary} ({why})",
        figures={**result.figures, "inconclusive": True},
    )
