"""The sequential judge: an always-valid confidence interval for the cohort's increase over the
baseline, and the verdict it supports (pure; `health_verdicts` feeds it the reports).

The interval is the confidence sequence of the mixture sequential probability ratio test (mSPRT)
with a normal mixture, as in Johari, Koomen, Pekelis and Walsh, "Always Valid Inference:
Continuous Monitoring of A/B Tests" (Operations Research 70(3), 2022), the method behind
Optimizely's stats engine. For an estimate `d` of the increase with variance `V`, a mixing
scale `tau` and `alpha = 1 - confidence`, the interval is

    d ± sqrt( V (V + tau²) / tau² · (2 log(1/alpha) + log((V + tau²) / V)) )

and the chance that it ever excludes the true increase, however often it is looked at, is at
most `alpha` (for a normal estimate; the normal approximation holds as the counts grow). A
fixed-horizon interval (d ± 1.96 √V) looked at every minute does not keep its 95%: the benchmark
bench/bench_verdicts.py shows how far it falls.

The unit is the client, not the operation: a client's operations share its host, its traffic and
its bugs, so its errors come in clumps. The variance of a group's ratio is the clustered
(sandwich) estimate over its clients, never below the binomial variance of its operations; a
cohort of a few clients borrows the baseline's between-client spread, which it cannot measure
itself. `tau` is the tolerance itself: the mixture is widest where the decision is made.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Comparison",
    "Conclusion",
    "IncreaseInterval",
    "RatioSums",
    "compare",
    "mixture_half_width",
]


@dataclass(frozen=True)
class RatioSums:
    """A ratio over clients (failed / operations, or latency sum / timed operations), kept as the
    sums a clustered variance needs: per client i, x_i over d_i."""

    clients: int = 0
    numerator: float = 0.0
    """Σ x_i: failed operations, or milliseconds."""
    denominator: float = 0.0
    """Σ d_i: operations, or timed operations."""
    numerator_squares: float = 0.0
    denominator_squares: float = 0.0
    cross: float = 0.0
    """Σ x_i d_i."""

    @classmethod
    def of(cls, pairs: Iterable[tuple[float, float]]) -> RatioSums:
        """From each client's (x_i, d_i); a client with d_i = 0 has nothing to say and is left out."""
        clients, x, d, xx, dd, xd = 0, 0.0, 0.0, 0.0, 0.0, 0.0
        for numerator, denominator in pairs:
            if denominator <= 0:
                continue
            clients += 1
            x += numerator
            d += denominator
            xx += numerator * numerator
            dd += denominator * denominator
            xd += numerator * denominator
        return cls(clients, x, d, xx, dd, xd)

    @property
    def ratio(self) -> float | None:
        return self.numerator / self.denominator if self.denominator > 0 else None

    def residual_squares(self) -> float:
        """Σ (x_i − R d_i)², R the pooled ratio, with the small-sample factor k / (k − 1) (CR1)."""
        ratio = self.ratio
        if ratio is None or self.clients < 2:
            return 0.0
        total = (
            self.numerator_squares
            - 2.0 * ratio * self.cross
            + ratio * ratio * self.denominator_squares
        )
        return max(total, 0.0) * self.clients / (self.clients - 1)


class Conclusion(StrEnum):
    """What an interval says of the increase against its tolerance."""

    REGRESSION = "regression"
    """The whole interval lies above the tolerance."""
    NO_REGRESSION = "no_regression"
    """The whole interval lies below it."""
    INCONCLUSIVE = "inconclusive"
    """The interval holds the tolerance: more evidence is needed."""


@dataclass(frozen=True)
class IncreaseInterval:
    """The cohort's increase over the baseline, with its always-valid interval."""

    increase: float
    lower: float
    upper: float
    confidence: float

    def conclusion(self, tolerance: float) -> Conclusion:
        if self.lower > tolerance:
            return Conclusion.REGRESSION
        if self.upper < tolerance:
            return Conclusion.NO_REGRESSION
        return Conclusion.INCONCLUSIVE


@dataclass(frozen=True)
class Comparison:
    """A cohort against its baseline on one ratio: the interval, or why there is none."""

    interval: IncreaseInterval | None
    missing: str | None = None
    """Why no interval: "no cohort operations", "no baseline operations", "too few clients ..."."""


def mixture_half_width(variance: float, tau: float, confidence: float) -> float:
    """Half the width of the mSPRT's normal-mixture confidence sequence (module docstring)."""
    if variance <= 0:
        return 0.0
    if math.isinf(variance):
        return math.inf
    tau2 = tau * tau
    alpha = 1.0 - confidence
    spread = variance * (variance + tau2) / tau2
    return math.sqrt(
        spread * (2.0 * math.log(1.0 / alpha) + math.log((variance + tau2) / variance))
    )


# A cohort's own clustered variance is trusted from this many clients; below it, its estimate
# has too few degrees of freedom to be more than a hint (the baseline's spread stands in).
_OWN_SPREAD_CLIENTS = 4


def _shrunk(sums: RatioSums) -> float:
    """A rate for the binomial variance that is never 0 or 1: no failure in 100 operations does
    not mean a rate known to be exactly zero (half an event added, as Jeffreys' prior does)."""
    return (sums.numerator + 0.5) / (sums.denominator + 1.0)


def _inflation(clients: int) -> float:
    """The variance of a t with k − 1 degrees of freedom over a normal's: a clustered estimate from
    k clients is itself uncertain, and the interval widens for it."""
    freedom = clients - 1
    return freedom / (freedom - 2) if freedom > 2 else math.inf


def _rate_variances(cohort: RatioSums, baseline: RatioSums) -> tuple[float, float]:
    """Variances of the cohort's and the baseline's error rates (failed / operations)."""
    base_rate, cohort_rate = _shrunk(baseline), _shrunk(cohort)
    base_within = base_rate * (1.0 - base_rate)
    clustered = baseline.residual_squares()
    baseline_variance = max(clustered / baseline.denominator**2, base_within / baseline.denominator)
    # The spread of the clients' own rates beyond the binomial, measured on the baseline
    # (method of moments): Σ(x_i − R d_i)² ≈ Σ d_i p(1 − p) + σ²_between Σ d_i².
    between = 0.0
    if baseline.clients >= 2 and baseline.denominator_squares > 0:
        between = max(
            (clustered - baseline.denominator * base_within) / baseline.denominator_squares, 0.0
        )
    modelled = (
        cohort.denominator * cohort_rate * (1.0 - cohort_rate)
        + between * cohort.denominator_squares
    ) / cohort.denominator**2
    return max(modelled, _own_variance(cohort)), baseline_variance


def _own_variance(sums: RatioSums) -> float:
    if sums.clients < _OWN_SPREAD_CLIENTS:
        return 0.0
    return _inflation(sums.clients) * sums.residual_squares() / sums.denominator**2


def _mean_variances(cohort: RatioSums, baseline: RatioSums) -> tuple[float, float] | None:
    """Variances of the cohort's and the baseline's mean (latency per timed operation): from the
    clients alone, as a sum and a count say nothing of the spread within a client. None: too few
    clients to tell."""
    if baseline.clients < 2:
        return None
    baseline_variance = baseline.residual_squares() / baseline.denominator**2
    # The baseline's spread per timed operation, scaled to the cohort's operations.
    per_operation = baseline.residual_squares() / baseline.denominator
    cohort_variance = max(per_operation / cohort.denominator, _own_variance(cohort))
    return cohort_variance, baseline_variance


def compare(
    cohort: RatioSums,
    baseline: RatioSums,
    *,
    tolerance: float,
    confidence: float,
    rate: bool,
) -> Comparison:
    """The cohort's ratio minus the baseline's, with its always-valid interval at `confidence`;
    `rate`: the ratios are error rates (binomial operations), else means (latency)."""
    if cohort.denominator <= 0:
        return Comparison(None, "no cohort operations")
    if baseline.denominator <= 0:
        return Comparison(None, "no baseline operations")
    if rate:
        variances: tuple[float, float] | None = _rate_variances(cohort, baseline)
    else:
        variances = _mean_variances(cohort, baseline)
    if variances is None:
        return Comparison(
            None, f"too few baseline clients ({baseline.clients}) to measure the spread"
        )
    increase = (cohort.ratio or 0.0) - (baseline.ratio or 0.0)
    half = mixture_half_width(sum(variances), tolerance, confidence)
    return Comparison(IncreaseInterval(increase, increase - half, increase + half, confidence))
