"""The sequential judge's statistics (tempoconf.rollout.sequential): the mixture boundary on
hand-computed cases, the clustered sums, and the properties a confidence sequence must have:
more evidence never widens it, and a change that does nothing is called a regression no more
often than its confidence allows, however often it is looked at."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempoconf.rollout.health_specs import SequentialJudgeSpec
from tempoconf.rollout.progress import CheckResult, Verdict
from tempoconf.rollout.sequential import (
    Conclusion,
    IncreaseInterval,
    RatioSums,
    compare,
    mixture_half_width,
)
from tempoconf.rollout.sequential_verdicts import GroupSums, judge_sequential, settle_inconclusive

NO_LATENCY = RatioSums()


def test_the_mixture_boundary_by_hand() -> None:
    # V = 1e-6 (a standard error of 0.1 pp), tau = 0.005, alpha = 0.05:
    # V (V + tau²) / tau² = 1e-6 * 2.6e-5 / 2.5e-5 = 1.04e-6
    # 2 ln(1 / 0.05) + ln(2.6e-5 / 1e-6) = 5.99146 + 3.25810 = 9.24956
    # half-width = sqrt(1.04e-6 * 9.24956) = 3.10153e-3: 3.1 standard errors, where a
    # fixed-horizon 95% interval is 1.96 of them (the price of looking at will).
    assert mixture_half_width(1e-6, 0.005, 0.95) == pytest.approx(3.10153e-3, rel=1e-5)
    # At 99%: 2 ln(100) = 9.21034, plus 3.25810 = 12.46844; sqrt(1.04e-6 * 12.46844) = 3.60100e-3
    assert mixture_half_width(1e-6, 0.005, 0.99) == pytest.approx(3.60100e-3, rel=1e-5)
    assert mixture_half_width(0.0, 0.005, 0.95) == 0.0
    assert math.isinf(mixture_half_width(math.inf, 0.005, 0.95))


def test_the_clustered_sums_by_hand() -> None:
    # Two clients: 30 of 1000 and 10 of 1000 failed. R = 40 / 2000 = 0.02.
    # Σ(x − R d)² = (30 − 20)² + (10 − 20)² = 200, times k / (k − 1) = 2: 400.
    sums = RatioSums.of([(30, 1000), (10, 1000)])
    assert sums == RatioSums(2, 40, 2000, 1000, 2_000_000, 40_000)
    assert sums.ratio == pytest.approx(0.02)
    assert sums.residual_squares() == pytest.approx(400)
    # A client with no operations says nothing; one client has no spread to measure.
    assert RatioSums.of([(0, 0), (5, 100)]).clients == 1
    assert RatioSums.of([(5, 100)]).residual_squares() == 0.0
    assert RatioSums().ratio is None


def test_an_interval_is_judged_against_its_tolerance() -> None:
    assert IncreaseInterval(0.02, 0.011, 0.029, 0.95).conclusion(0.01) == Conclusion.REGRESSION
    assert IncreaseInterval(0.0, -0.004, 0.004, 0.95).conclusion(0.01) == Conclusion.NO_REGRESSION
    assert IncreaseInterval(0.008, 0.002, 0.014, 0.95).conclusion(0.01) == Conclusion.INCONCLUSIVE


def _clients(rng: random.Random, count: int, operations: int, rate: float) -> list[tuple[int, int]]:
    """`count` clients, each with `operations` operations failing at `rate` (binomial)."""
    return [(sum(rng.random() < rate for _ in range(operations)), operations) for _ in range(count)]


def test_no_operations_or_no_baseline_is_no_interval() -> None:
    some = RatioSums.of([(1, 100), (2, 100)])
    assert compare(RatioSums(), some, tolerance=0.01, confidence=0.95, rate=True).missing == (
        "no cohort operations"
    )
    assert compare(some, RatioSums(), tolerance=0.01, confidence=0.95, rate=True).missing == (
        "no baseline operations"
    )
    # A mean (latency) needs the baseline's spread between clients: two clients at least.
    one = RatioSums.of([(5000.0, 100)])
    assert compare(some, one, tolerance=5.0, confidence=0.95, rate=False).interval is None


@settings(max_examples=200, deadline=None)
@given(
    cohort=st.lists(st.tuples(st.integers(0, 50), st.integers(50, 500)), min_size=1, max_size=8),
    baseline=st.lists(st.tuples(st.integers(0, 50), st.integers(50, 500)), min_size=2, max_size=8),
    copies=st.integers(2, 5),
    rate=st.booleans(),
)
def test_more_evidence_never_widens_the_interval(
    cohort: list[tuple[int, int]], baseline: list[tuple[int, int]], copies: int, rate: bool
) -> None:
    """The same clients' figures seen `copies` times over (more clients alike, or each client's
    operations multiplied): the interval is never wider."""

    def width(cohort: list[tuple[int, int]], baseline: list[tuple[int, int]]) -> float:
        interval = compare(
            RatioSums.of(cohort), RatioSums.of(baseline), tolerance=0.01, confidence=0.95, rate=rate
        ).interval
        assert interval is not None
        return interval.upper - interval.lower

    alone = width(cohort, baseline)
    assert width(cohort * copies, baseline * copies) <= alone * (1 + 1e-9)
    scaled = [(x * copies, d * copies) for x, d in cohort]
    scaled_baseline = [(x * copies, d * copies) for x, d in baseline]
    assert width(scaled, scaled_baseline) <= alone * (1 + 1e-9)


@pytest.mark.parametrize(("rate", "clients"), [(0.01, 5), (0.02, 30)])
def test_identical_cohort_and_baseline_rarely_regress_however_often_looked_at(
    rate: float, clients: int
) -> None:
    """A change that does nothing, looked at 10 times as its reports arrive, over many seeds:
    the share of rollouts ever called a regression stays within 1 - confidence (5%), against a
    tolerance of nearly zero (the hardest case: any sign of an increase would do)."""
    rollouts, looks, regressions = 300, 10, 0
    for seed in range(rollouts):
        rng = random.Random(seed)
        cohort: list[tuple[int, int]] = [(0, 0)] * clients
        baseline: list[tuple[int, int]] = [(0, 0)] * (clients * 4)
        for _ in range(looks):
            cohort = [
                (x + dx, d + dd)
                for (x, d), (dx, dd) in zip(cohort, _clients(rng, clients, 40, rate), strict=True)
            ]
            baseline = [
                (x + dx, d + dd)
                for (x, d), (dx, dd) in zip(
                    baseline, _clients(rng, clients * 4, 40, rate), strict=True
                )
            ]
            interval = compare(
                RatioSums.of(cohort),
                RatioSums.of(baseline),
                tolerance=1e-9,
                confidence=0.95,
                rate=True,
            ).interval
            if interval is not None and interval.conclusion(1e-9) == Conclusion.REGRESSION:
                regressions += 1
                break
    assert regressions / rollouts <= 0.05, regressions


def test_the_verdict_states_its_evidence() -> None:
    cohort = RatioSums.of([(100, 1000)] * 10)  # 10% of 10,000 operations
    baseline = RatioSums.of([(20, 1000)] * 19 + [(21, 1000)])  # about 2% of 20,000
    verdict, summary, figures = judge_sequential(
        SequentialJudgeSpec(max_increase=0.01),
        GroupSums(cohort, NO_LATENCY),
        GroupSums(baseline, NO_LATENCY),
    )
    assert verdict == Verdict.UNHEALTHY
    assert summary.startswith("regression: error rate +8.0 pp [")
    assert (
        "at 95%, 10,000 operations from 10 cohort clients vs 20,000 from 20 baseline clients"
        in (summary)
    )
    assert summary.endswith("the interval lies wholly above max_increase 1 pp")
    assert figures["error_rate"]["lower"] > 0.01 and figures["error_rate"]["conclusion"] == (
        "regression"
    )


def test_latency_is_judged_on_the_mean_increase() -> None:
    # Baseline clients near 100 ms a timed operation; the cohort's near 150 ms.
    baseline = RatioSums.of([(100.0 * 500 + spread, 500) for spread in range(-2000, 2000, 200)])
    slow = RatioSums.of([(150.0 * 500 + spread, 500) for spread in range(-1000, 1000, 200)])
    same = RatioSums.of([(100.0 * 500 + spread, 500) for spread in range(-1000, 1000, 200)])
    judge = SequentialJudgeSpec(max_latency_increase_ms=20)
    verdict, summary, _ = judge_sequential(
        judge, GroupSums(NO_LATENCY, slow), GroupSums(NO_LATENCY, baseline)
    )
    assert verdict == Verdict.UNHEALTHY and "mean latency +50.0" in summary and " ms [" in summary
    verdict, summary, _ = judge_sequential(
        judge, GroupSums(NO_LATENCY, same), GroupSums(NO_LATENCY, baseline)
    )
    assert verdict == Verdict.HEALTHY, summary
    # Both figures judged: healthy only when neither regressed and both are sure.
    both = SequentialJudgeSpec(max_increase=0.01, max_latency_increase_ms=20)
    rates = RatioSums.of([(5, 500)] * 10)
    verdict, _, _ = judge_sequential(
        both, GroupSums(rates, slow), GroupSums(RatioSums.of([(5, 500)] * 20), baseline)
    )
    assert verdict == Verdict.UNHEALTHY


def test_thin_evidence_is_inconclusive_not_healthy() -> None:
    verdict, summary, _ = judge_sequential(
        SequentialJudgeSpec(max_increase=0.01),
        GroupSums(RatioSums.of([(0, 20), (0, 20)]), NO_LATENCY),
        GroupSums(RatioSums.of([(0, 20)] * 3), NO_LATENCY),
    )
    assert verdict == Verdict.INCONCLUSIVE
    assert summary.startswith("inconclusive: error rate ") and "lies across max_increase" in summary


@pytest.mark.parametrize(
    ("judge", "extension_over", "verdict", "said"),
    [
        (
            SequentialJudgeSpec(max_increase=0.01, on_inconclusive="pass"),
            False,
            "healthy",
            "on_inconclusive=pass",
        ),
        (
            SequentialJudgeSpec(max_increase=0.01, on_inconclusive="fail"),
            False,
            "unhealthy",
            "on_inconclusive=fail",
        ),
        (SequentialJudgeSpec(max_increase=0.01), False, "inconclusive", ""),
        (
            SequentialJudgeSpec(max_increase=0.01),
            True,
            "unhealthy",
            "after a 10m extension: after_extension=fail",
        ),
    ],
)
def test_the_end_of_the_hold_settles_an_inconclusive_verdict(
    judge: SequentialJudgeSpec, extension_over: bool, verdict: str, said: str
) -> None:
    result = CheckResult(0, "reports #1", "reports", Verdict.INCONCLUSIVE, "inconclusive: ...")
    settled = settle_inconclusive(result, judge, final=True, extension_over=extension_over)
    assert settled.verdict == verdict and said in settled.summary
    # During the hold nothing is settled.
    assert settle_inconclusive(result, judge, final=False, extension_over=True) == result
