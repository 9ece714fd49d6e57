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
fixed-horizon z-test looked at every minute, as such tests are usually run, does not keep its 95%:
bench/bench_verdicts.py shows how far it falls.

The unit is the client, not the operation: a client's operations share its host, its traffic and
its bugs, so its errors come in clumps. The variance of a group's ratio is the clustered
(sandwich) estimate over its clients, widened for few clients, never below the binomial variance
of its operations; a cohort of a few clients borrows the baseline's between-client spread, which
it cannot measure itself. `tau` is four times the tolerance (MIXTURE_SCALE): the mixture is tuned
to the regressions worth reverting fast, several times what is tolerated; bench/bench_verdicts.py
measured 1, 2 and 4 times (4 catches most at 5 and 20 clients, with no more false reverts).
No maintained Python library computes this (confseq, the reference implementation of Howard
et al.'s confidence sequences, is a C++ extension that does not build from its sdist here); the
formula is a few lines, checked by hand in tests/domain/test_sequential.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "MIXTURE_SCALE",
    "Comparison",
    "Conclusion",
    "IncreaseInterval",
    "RatioSums",
    "compare",
    "mixture_half_width",
]


MIXTURE_SCALE = 4.0
"""The normal mixture's scale `tau`, in tolerances."""


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
        # Clients all at one ratio leave rounding noise of the terms' size, not a spread.
        if total <= 1e-12 * self.numerator_squares:
            return 0.0
        return total * self.clients / (self.clients - 1)


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


def _shrunk(sums: RatioSums) -> float:
    """A rate for the binomial variance that is never 0 or 1: no failure in 100 operations does
    not mean a rate known to be exactly zero (half an event added, as Jeffreys' prior does)."""
    return (sums.numerator + 0.5) / (sums.denominator + 1.0)


def _clustered(sums: RatioSums) -> float:
    """The clustered variance of a group's ratio, widened for its few clients: an estimate from k
    clients has k − 1 degrees of freedom, and ((k + 1) / (k − 1))² (9 at 2 clients, 2.25 at 5,
    1.04 at 100) stands in for the t distribution's heavier tails. Zero below 2 clients."""
    if sums.clients < 2:
        return 0.0
    widen = ((sums.clients + 1) / (sums.clients - 1)) ** 2
    return widen * sums.residual_squares() / sums.denominator**2


def _borrowed(baseline: RatioSums, cohort: RatioSums) -> float:
    """The baseline's spread between clients, scaled to the cohort's clients: a cohort of a few
    clients cannot measure its own, and under no change it is the baseline's."""
    if baseline.clients < 2 or baseline.denominator_squares <= 0:
        return 0.0
    per_client = _clustered(baseline) * baseline.denominator**2 / baseline.denominator_squares
    return per_client * cohort.denominator_squares / cohort.denominator**2


def _variances(cohort: RatioSums, baseline: RatioSums, *, rate: bool) -> tuple[float, float]:
    """Variances of the cohort's and the baseline's ratio: each the largest of what could explain
    its spread — its own clustered estimate, for the cohort the baseline's spread borrowed, and
    for an error rate the binomial variance of its operations (a mean has no such floor: a sum
    and a count say nothing of the spread within a client). Every term shrinks, or stays, as
    evidence is added at the same rates, so more evidence never widens the interval."""
    cohort_variance = max(_clustered(cohort), _borrowed(baseline, cohort))
    baseline_variance = _clustered(baseline)
    if rate:
        for_cohort, for_baseline = _shrunk(cohort), _shrunk(baseline)
        cohort_variance = max(cohort_variance, for_cohort * (1.0 - for_cohort) / cohort.denominator)
        baseline_variance = max(
            baseline_variance, for_baseline * (1.0 - for_baseline) / baseline.denominator
        )
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
    if not rate and baseline.clients < 2:
        return Comparison(
            None, f"too few baseline clients ({baseline.clients}) to measure the spread"
        )
    variances = _variances(cohort, baseline, rate=rate)
    increase = (cohort.ratio or 0.0) - (baseline.ratio or 0.0)
    half = mixture_half_width(sum(variances), MIXTURE_SCALE * tolerance, confidence)
    lower, upper = increase - half, increase + half
    if rate:
        # Two rates differ by at most 1 either way: the interval within that holds as often.
        lower, upper = max(lower, -1.0), min(upper, 1.0)
    return Comparison(IncreaseInterval(increase, lower, upper, confidence))
