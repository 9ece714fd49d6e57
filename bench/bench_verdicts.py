"""Detection quality of the `reports` check's judges: how often each reverts a good change, catches
a bad one before the hold ends, promotes, or stays inconclusive, on simulated report streams.

The sequential judge is the real one: every look builds the `ReportEvidence` the health activity
would gather and calls `judge_reports` (tempoconf.rollout.health_verdicts), as the activity does.
Beside it, on the same streams: today's threshold rule (`max_baseline_factor: 2`, a 5-minute
window), also through `judge_reports`, and a straw man that lives here, a fixed-horizon
two-proportion z-test looked at every minute (`peeking_z`).

The model (one scenario: cohort size x baseline error rate x effect; every figure is a share of
`--rollouts` independent rollouts):
- 1,000 baseline clients (outside the cohort, on the old version) and N cohort clients.
- Every client does Poisson(200) operations a minute and reports every minute (the check's
  interval), through a 10-minute hold: 10 looks.
- Clients differ (over-dispersion, not only binomial noise): each one's own error rate is drawn
  from a Beta with the scenario's rate as its mean and a concentration that makes the
  between-client coefficient of variation 0.5. Under a bad change every cohort client's own rate
  gets the effect (+0.5 percentage points, x2 or x5); a good change leaves it as it is. The
  tolerance (`max_increase`) is a quarter of the baseline's rate (TOLERANCE_SHARE: an operator
  who tolerates a quarter more errors than usual), so every effect is a regression; an effect
  equal to the tolerance would count as neither good nor a regression (`at the tolerance`).
- The cohort's clients (their rates and operations) are the same under every effect of a
  scenario (common random numbers), as is the baseline across the scenarios of a rate; the
  errors are drawn for each effect.

The judges, looked at every minute:
- `sequential`: `judge: {sequential: {max_increase: rate / 4, confidence: 0.95}}` on every
  report since the publish. Unhealthy at a look: reverted there. Healthy, inconclusive or no data:
  the hold goes on; at the 10th look healthy is promoted, anything else inconclusive (the
  product extends the hold; it does not promote).
- `threshold`: `max_baseline_factor: 2, min_clients: 1` over its `window` (5 minutes). Unhealthy
  at any look: reverted; else promoted at the end (it has no inconclusive).
- `peeking_z`: d = cohort rate - baseline rate since the publish, SE from the binomial
  (operations as independent, clients ignored); a regression when d - 1.96 SE > max_increase;
  promoted when at the end d + 1.96 SE < max_increase, else inconclusive.

Time to a verdict: the look of a revert or, for the sequential judge, the first look that said
healthy in a promoted rollout; operations are the cohort's since the publish at that look.

Goals (the sequential judge): at most 1% of good changes reverted in every scenario; at 100
cohort clients and more, at least 99% of x5 regressions and 90% of x2 ones reverted within the
hold; with thin evidence (5 clients, 0.1% baseline) no more than 1% of x2 / x5 regressions
promoted.

    .venv/bin/python bench/bench_verdicts.py [--rollouts 2000] [--seed 29] [--tiny]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from _common import emit, log

from tempoconf.rollout.health_specs import ReportsCheckSpec
from tempoconf.rollout.health_verdicts import (
    HEALTHY,
    UNHEALTHY,
    ReportEvidence,
    ReportTally,
    evidence_since,
    evidence_window,
    judge_reports,
)
from tempoconf.rollout.sequential import RatioSums
from tempoconf.rollout.sequential_verdicts import GroupSums

COHORT_SIZES = (5, 20, 100, 1000)
BASELINE_RATES = (0.001, 0.01)
BASELINE_CLIENTS = 1000
OPERATIONS_PER_MINUTE = 200
"""Each client's operations a minute: Poisson with this mean."""
BETWEEN_CLIENT_CV = 0.5
"""The spread of the clients' own error rates: standard deviation over mean."""
LOOKS = 10
"""One look a minute (the check's interval) through a 10-minute hold."""
CONFIDENCE = 0.95
Z_95 = 1.959963984540054
THRESHOLD_FACTOR = 2.0
DEFAULT_ROLLOUTS = 2000
TINY_ROLLOUTS = 40
DEFAULT_SEED = 29
CELLS_PER_CHUNK = 2_000_000
"""Client-minutes simulated at once (memory: a few arrays of this many numbers)."""
PUBLISHED = datetime(2026, 1, 1, tzinfo=UTC)

GOAL_FALSE_REVERT_MAX = 0.01
GOAL_CATCH_X5_MIN = 0.99
GOAL_CATCH_X2_MIN = 0.90
GOAL_THIN_PROMOTED_BAD_MAX = 0.01
THIN = (5, 0.001)
"""Cohort size and baseline rate where the evidence is too thin to promote a regression."""

REVERTED, PROMOTED, INCONCLUSIVE = "reverted", "promoted", "inconclusive"
GOOD, REGRESSION, AT_TOLERANCE = "good", "regression", "at the tolerance"
TOLERANCE_SHARE = 0.25
"""The tolerance (`max_increase`) as a share of the baseline's rate."""
DECIDED = "decided"
"""Reverted or promoted."""
JUDGES = ("sequential", "threshold", "peeking_z")


@dataclass(frozen=True)
class Effect:
    """What a change does to each cohort client's own error rate."""

    name: str
    add: float = 0.0
    factor: float = 1.0

    def change(self, rate: float, tolerance: float) -> str:
        """`good` (no effect), `regression` (the mean increase is above the tolerance) or `at the
        tolerance` (+0.5 pp on a 1% baseline: tolerated, so neither outcome is wrong)."""
        increase = self.add + (self.factor - 1.0) * rate
        if increase == 0.0:
            return GOOD
        return AT_TOLERANCE if math.isclose(increase, tolerance) else REGRESSION

    def apply(self, rates: np.ndarray) -> np.ndarray:
        return np.minimum(rates * self.factor + self.add, 1.0)


EFFECTS = (
    Effect("none"),
    Effect("+0.5pp", add=0.005),
    Effect("x2", factor=2.0),
    Effect("x5", factor=5.0),
)


# -- simulation -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Streams:
    """A group's reports, per rollout and look: since the publish, each client's totals added up
    as RatioSums needs them; and over the threshold's window."""

    cumulative: np.ndarray
    """(rollouts, looks, 6): reporting clients, Σx, Σd, Σx², Σd², Σxd (x failed, d operations)."""
    window: np.ndarray
    """(rollouts, looks, 3): reporting clients, failed, operations over the last `window` looks."""


def beta_rates(rng: np.random.Generator, mean: float, shape: tuple[int, ...]) -> np.ndarray:
    """Clients' own error rates: Beta with `mean` and a coefficient of variation of 0.5."""
    # Var = m(1 - m) / (k + 1) = (cv m)²  =>  k = (1 - m) / (cv² m) - 1.
    concentration = (1.0 - mean) / (BETWEEN_CLIENT_CV**2 * mean) - 1.0
    return rng.beta(mean * concentration, (1.0 - mean) * concentration, size=shape)


def group_sums(
    errors: np.ndarray, operations: np.ndarray, window: int
) -> tuple[np.ndarray, np.ndarray]:
    """(rollouts, clients, looks) per-minute counts -> the Streams arrays of one chunk."""
    x = errors.cumsum(axis=2, dtype=np.float64)
    d = operations.cumsum(axis=2, dtype=np.float64)
    cumulative = np.stack(
        [(d > 0).sum(axis=1), x.sum(axis=1), d.sum(axis=1), (x * x).sum(axis=1),
         (d * d).sum(axis=1), (x * d).sum(axis=1)],
        axis=-1,
    )  # fmt: skip
    # Totals over the last `window` minutes: the cumulative minus what it was `window` looks ago.
    earlier_x = np.zeros_like(x)
    earlier_d = np.zeros_like(d)
    earlier_x[:, :, window:] = x[:, :, :-window]
    earlier_d[:, :, window:] = d[:, :, :-window]
    window_d = d - earlier_d
    windowed = np.stack(
        [(window_d > 0).sum(axis=1), (x - earlier_x).sum(axis=1), window_d.sum(axis=1)], axis=-1
    )
    return cumulative.astype(np.float64), windowed.astype(np.float64)


def chunks(rollouts: int, clients: int) -> list[int]:
    size = max(1, CELLS_PER_CHUNK // (clients * LOOKS))
    return [min(size, rollouts - start) for start in range(0, rollouts, size)]


def simulate_baseline(rng: np.random.Generator, rate: float, rollouts: int, window: int) -> Streams:
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for count in chunks(rollouts, BASELINE_CLIENTS):
        rates = beta_rates(rng, rate, (count, BASELINE_CLIENTS))
        operations = rng.poisson(OPERATIONS_PER_MINUTE, size=(count, BASELINE_CLIENTS, LOOKS))
        parts.append(group_sums(rng.binomial(operations, rates[:, :, None]), operations, window))
    return Streams(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def simulate_cohort(
    rng: np.random.Generator, rate: float, clients: int, rollouts: int, window: int
) -> dict[str, Streams]:
    """The cohort's streams under each effect, from the same clients and operations."""
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {e.name: [] for e in EFFECTS}
    for count in chunks(rollouts, clients):
        rates = beta_rates(rng, rate, (count, clients))
        operations = rng.poisson(OPERATIONS_PER_MINUTE, size=(count, clients, LOOKS))
        for effect in EFFECTS:
            errors = rng.binomial(operations, effect.apply(rates)[:, :, None])
            parts[effect.name].append(group_sums(errors, operations, window))
    return {
        name: Streams(np.concatenate([p[0] for p in got]), np.concatenate([p[1] for p in got]))
        for name, got in parts.items()
    }


# -- the judges -------------------------------------------------------------------------------
@dataclass
class Outcomes:
    """One judge on one scenario: each rollout's outcome, and the look of its verdict (0: none)."""

    outcome: list[str]
    verdict_look: list[int]


def tally(row: Sequence[float], looks: int, *, per_client: bool) -> ReportTally:
    """A group's ReportTally from one look's sums (a report per client a minute)."""
    clients, failed = int(row[0]), int(row[1])
    operations = int(row[2])
    rates = (
        RatioSums(clients, row[1], row[2], row[3], row[4], row[5]) if per_client else RatioSums()
    )
    return ReportTally(
        clients=clients,
        ok=operations - failed,
        failed=failed,
        reports=clients * looks,
        per_client=GroupSums(rates, RatioSums()),
    )


class ReportsJudge:
    """A ReportsCheckSpec judged by `judge_reports` at every look, as the health activity does:
    the evidence since the publish (a judge) or over the last `window` (thresholds)."""

    def __init__(self, spec: ReportsCheckSpec) -> None:
        self.spec = spec
        self.cumulative = evidence_window(spec) is None
        self.window_looks = LOOKS if self.cumulative else int(spec.window / timedelta(minutes=1))
        self.times = [PUBLISHED + timedelta(minutes=look) for look in range(1, LOOKS + 1)]
        self.since = [evidence_since(PUBLISHED, now, evidence_window(spec)) for now in self.times]
        self.calls = 0
        self.seconds = 0.0

    def rows(self, streams: Streams) -> list[list[list[float]]]:
        return (streams.cumulative if self.cumulative else streams.window).tolist()  # type: ignore[no-any-return]

    def baseline_tallies(self, streams: Streams) -> list[list[ReportTally]]:
        return [self._tallies(rows) for rows in self.rows(streams)]

    def _tallies(self, rows: list[list[float]]) -> list[ReportTally]:
        return [
            tally(row, min(look, self.window_looks), per_client=self.cumulative)
            for look, row in enumerate(rows, start=1)
        ]

    def run(self, cohort: Streams, baselines: list[list[ReportTally]]) -> Outcomes:
        started = time.perf_counter()
        outcomes = Outcomes([], [])
        outside = ReportTally()
        for rows, baseline in zip(self.rows(cohort), baselines, strict=True):
            first_healthy = 0
            verdict = None
            for look, row in enumerate(rows, start=1):
                since, reason = self.since[look - 1]
                evidence = ReportEvidence(
                    since=since,
                    since_reason=reason,
                    cohort=tally(row, min(look, self.window_looks), per_client=self.cumulative),
                    outside=outside,
                    baseline=baseline[look - 1],
                )
                verdict, _, _ = judge_reports(self.spec, evidence, now=self.times[look - 1])
                self.calls += 1
                if verdict == UNHEALTHY:
                    outcomes.outcome.append(REVERTED)
                    outcomes.verdict_look.append(look)
                    break
                if verdict == HEALTHY and not first_healthy:
                    first_healthy = look
            else:
                promoted = verdict == HEALTHY
                outcomes.outcome.append(PROMOTED if promoted else INCONCLUSIVE)
                # A threshold's healthy look is no verdict: it promotes at the hold's end anyway.
                outcomes.verdict_look.append(first_healthy if promoted and self.cumulative else 0)
        self.seconds += time.perf_counter() - started
        return outcomes


def peeking_z(cohort: Streams, baseline: Streams, tolerance: float) -> Outcomes:
    """A fixed-horizon 95% interval of the rate difference, looked at every minute."""
    failed_c, operations_c = cohort.cumulative[:, :, 1], cohort.cumulative[:, :, 2]
    failed_b, operations_b = baseline.cumulative[:, :, 1], baseline.cumulative[:, :, 2]
    rate_c, rate_b = failed_c / operations_c, failed_b / operations_b
    error = np.sqrt(rate_c * (1 - rate_c) / operations_c + rate_b * (1 - rate_b) / operations_b)
    increase = rate_c - rate_b
    regression = increase - Z_95 * error > tolerance
    healthy_at_end = increase[:, -1] + Z_95 * error[:, -1] < tolerance
    outcomes = Outcomes([], [])
    for looks, healthy in zip(regression.tolist(), healthy_at_end.tolist(), strict=True):
        if any(looks):
            outcomes.outcome.append(REVERTED)
            outcomes.verdict_look.append(looks.index(True) + 1)
        else:
            outcomes.outcome.append(PROMOTED if healthy else INCONCLUSIVE)
            outcomes.verdict_look.append(0)
    return outcomes


# -- figures ----------------------------------------------------------------------------------
def shares(outcomes: Outcomes, cohort: Streams) -> dict[str, Any]:
    total = len(outcomes.outcome)
    looks = [look for look in outcomes.verdict_look if look]
    operations = [
        cohort.cumulative[rollout, look - 1, 2]
        for rollout, look in enumerate(outcomes.verdict_look)
        if look
    ]
    return {
        REVERTED: outcomes.outcome.count(REVERTED) / total,
        PROMOTED: outcomes.outcome.count(PROMOTED) / total,
        INCONCLUSIVE: outcomes.outcome.count(INCONCLUSIVE) / total,
        DECIDED: (total - outcomes.outcome.count(INCONCLUSIVE)) / total,
        "median_operations": round(float(statistics.median(operations))) if operations else None,
        "median_minutes": statistics.median(looks) if looks else None,
    }


def worst(
    scenarios: list[dict[str, Any]],
    judge: str,
    figure: str,
    pick: Callable[[dict[str, Any]], bool],
    best: Callable[..., float],
) -> float | None:
    values = [s[judge][figure] for s in scenarios if pick(s)]
    return round(best(values), 4) if values else None


def summary(scenarios: list[dict[str, Any]], judge: str) -> dict[str, Any]:
    def big(effect: str) -> Callable[[dict[str, Any]], bool]:
        return lambda s: s["effect"] == effect and s["clients"] >= 100 and bad(s)

    def bad(s: dict[str, Any]) -> bool:
        return bool(s["change"] == REGRESSION)

    def thin(s: dict[str, Any]) -> bool:
        return (s["clients"], s["baseline_rate"]) == THIN and s["effect"] in ("x2", "x5")

    def good(s: dict[str, Any]) -> bool:
        return bool(s["change"] == GOOD)

    def at_tolerance(s: dict[str, Any]) -> bool:
        return bool(s["change"] == AT_TOLERANCE)

    return {
        "false_revert_rate_max": worst(scenarios, judge, REVERTED, good, max),
        "catch_rate_x2_min_100plus": worst(scenarios, judge, REVERTED, big("x2"), min),
        "catch_rate_x5_min_100plus": worst(scenarios, judge, REVERTED, big("x5"), min),
        "catch_rate_half_pp_min_100plus": worst(scenarios, judge, REVERTED, big("+0.5pp"), min),
        "promoted_bad_rate_max": worst(scenarios, judge, PROMOTED, bad, max),
        "promoted_bad_rate_thin": worst(scenarios, judge, PROMOTED, thin, max),
        "promoted_good_rate_min": worst(scenarios, judge, PROMOTED, good, min),
        # The true increase is the tolerance: a revert or a promotion is an interval that missed it.
        "decided_at_tolerance_max": worst(scenarios, judge, DECIDED, at_tolerance, max),
        "promoted_good_rate_min_100plus": worst(
            scenarios, judge, PROMOTED, lambda s: good(s) and s["clients"] >= 100, min
        ),
    }


def goals(figures: dict[str, Any]) -> dict[str, bool]:
    def at_most(value: float | None, bound: float) -> bool:
        return value is not None and value <= bound

    def at_least(value: float | None, bound: float) -> bool:
        return value is not None and value >= bound

    return {
        "false_revert_at_most_1pct": at_most(
            figures["false_revert_rate_max"], GOAL_FALSE_REVERT_MAX
        ),
        "catch_x5_100plus_at_least_99pct": at_least(
            figures["catch_rate_x5_min_100plus"], GOAL_CATCH_X5_MIN
        ),
        "catch_x2_100plus_at_least_90pct": at_least(
            figures["catch_rate_x2_min_100plus"], GOAL_CATCH_X2_MIN
        ),
        "thin_evidence_promotes_at_most_1pct_of_x2_x5": at_most(
            figures["promoted_bad_rate_thin"], GOAL_THIN_PROMOTED_BAD_MAX
        ),
    }


def percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def thousands(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.1f}k"


def cell(figures: dict[str, Any]) -> str:
    """`reverted / promoted / inconclusive · median ops · median minutes` (percentages)."""
    shown = " / ".join(f"{figures[kind] * 100:.1f}" for kind in (REVERTED, PROMOTED, INCONCLUSIVE))
    minutes = figures["median_minutes"]
    return f"{shown} · {thousands(figures['median_operations'])} · {'-' if minutes is None else f'{minutes:g}'}"


def table(scenarios: list[dict[str, Any]]) -> str:
    """Every judge's figures per scenario, side by side, as a Markdown table (the README's)."""
    lines = [
        "Each judge: reverted / promoted / inconclusive (% of rollouts) · median cohort "
        "operations · median minutes to a verdict",
        "",
        "| clients | baseline | effect | " + " | ".join(JUDGES) + " |",
        "|---:|---:|---|" + "---|" * len(JUDGES),
    ]
    for s in scenarios:
        effect = s["effect"] + (" (= max_increase)" if s["change"] == AT_TOLERANCE else "")
        cells = " | ".join(cell(s[judge]) for judge in JUDGES)
        lines.append(f"| {s['clients']:,} | {s['baseline_rate'] * 100:g}% | {effect} | {cells} |")
    return "\n".join(lines)


# -- the run ----------------------------------------------------------------------------------
def sequential_spec(tolerance: float) -> ReportsCheckSpec:
    return ReportsCheckSpec.model_validate(
        {
            "kind": "reports",
            "judge": {"sequential": {"max_increase": tolerance, "confidence": CONFIDENCE}},
        }
    )


THRESHOLD_SPEC = ReportsCheckSpec.model_validate(
    {"kind": "reports", "max_baseline_factor": THRESHOLD_FACTOR, "min_clients": 1}
)


def run(rollouts: int, seed: int, sizes: Sequence[int], rates: Sequence[float]) -> dict[str, Any]:
    threshold = ReportsJudge(THRESHOLD_SPEC)
    window = threshold.window_looks
    sequential_judges: list[ReportsJudge] = []
    scenarios: list[dict[str, Any]] = []
    simulated = 0.0
    for rate_index, rate in enumerate(BASELINE_RATES):
        if rate not in rates:
            continue
        tolerance = rate * TOLERANCE_SHARE
        sequential = ReportsJudge(sequential_spec(tolerance))
        sequential_judges.append(sequential)
        started = time.perf_counter()
        baseline = simulate_baseline(
            np.random.default_rng([seed, rate_index, 0]), rate, rollouts, window
        )
        simulated += time.perf_counter() - started
        baseline_sequential = sequential.baseline_tallies(baseline)
        baseline_threshold = threshold.baseline_tallies(baseline)
        for clients in sizes:
            started = time.perf_counter()
            rng = np.random.default_rng([seed, rate_index, 1, clients])
            cohorts = simulate_cohort(rng, rate, clients, rollouts, window)
            simulated += time.perf_counter() - started
            for effect in EFFECTS:
                cohort = cohorts[effect.name]
                scenario: dict[str, Any] = {
                    "clients": clients,
                    "baseline_rate": rate,
                    "effect": effect.name,
                    "max_increase": tolerance,
                    "change": effect.change(rate, tolerance),
                    "sequential": shares(sequential.run(cohort, baseline_sequential), cohort),
                    "threshold": shares(threshold.run(cohort, baseline_threshold), cohort),
                    "peeking_z": shares(peeking_z(cohort, baseline, tolerance), cohort),
                }
                scenarios.append(scenario)
                seq = scenario["sequential"]
                log(
                    f"{clients:>5} clients, baseline {rate:.1%}, {effect.name:>6}: sequential "
                    f"reverted {percent(seq[REVERTED])} promoted {percent(seq[PROMOTED])}; "
                    f"threshold reverted {percent(scenario['threshold'][REVERTED])}; "
                    f"peeking_z reverted {percent(scenario['peeking_z'][REVERTED])}"
                )
    calls = threshold.calls + sum(j.calls for j in sequential_judges)
    seconds = threshold.seconds + sum(j.seconds for j in sequential_judges)
    return {
        "scenarios": scenarios,
        "simulation_seconds": round(simulated, 1),
        "judge_calls": calls,
        "judge_seconds": round(seconds, 1),
        "judge_us_per_call": round(seconds / calls * 1e6, 1) if calls else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rollouts", type=int, default=DEFAULT_ROLLOUTS, help="per scenario")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument(
        "--tiny",
        action="store_true",
        help=f"{TINY_ROLLOUTS} rollouts per scenario (seconds; the goals are then only indicative)",
    )
    parser.add_argument(
        "--clients", type=int, nargs="+", choices=COHORT_SIZES, default=list(COHORT_SIZES),
        help="cohort sizes to run (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--baseline-rate", type=float, nargs="+", choices=BASELINE_RATES,
        default=list(BASELINE_RATES), help="baseline error rates to run (default: both)",
    )  # fmt: skip
    arguments = parser.parse_args()
    rollouts = TINY_ROLLOUTS if arguments.tiny else arguments.rollouts
    if rollouts < 1:
        parser.error(f"--rollouts must be at least 1, not {rollouts}")
    log(
        f"verdicts: {rollouts} rollouts per scenario, seed {arguments.seed}, cohorts "
        f"{arguments.clients}, baseline rates {arguments.baseline_rate}"
    )
    started = time.perf_counter()
    measured = run(rollouts, arguments.seed, arguments.clients, arguments.baseline_rate)
    scenarios = measured.pop("scenarios")
    log("\n\n" + table(scenarios) + "\n")
    figures = {judge: summary(scenarios, judge) for judge in JUDGES}
    met = goals(figures["sequential"])
    emit(
        {
            "bench": "verdicts",
            "rollouts_per_scenario": rollouts,
            "seed": arguments.seed,
            "model": {
                "baseline_clients": BASELINE_CLIENTS,
                "operations_per_client_minute": f"Poisson({OPERATIONS_PER_MINUTE})",
                "between_client_cv": BETWEEN_CLIENT_CV,
                "looks": LOOKS,
                "look_every_minutes": 1,
                "max_increase": f"baseline rate x {TOLERANCE_SHARE:g}",
                "confidence": CONFIDENCE,
                "threshold": f"max_baseline_factor {THRESHOLD_FACTOR:g}, window "
                f"{THRESHOLD_SPEC.window / timedelta(minutes=1):g} min",
            },
            **figures,
            "scenarios": scenarios,
            **measured,
            "elapsed_seconds": round(time.perf_counter() - started, 1),
            "goals": met,
            "goal": (
                "sequential: false reverts <= 1% in every scenario; at 100+ clients >= 99% of x5 "
                "and >= 90% of x2 regressions reverted in the hold; at 5 clients and 0.1% <= 1% "
                "of x2/x5 regressions promoted"
            ),
            "goal_met": all(met.values()),
        }
    )


if __name__ == "__main__":
    main()
