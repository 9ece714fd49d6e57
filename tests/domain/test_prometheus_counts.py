"""A judged prometheus check's counts, joined per client by their labels (no Prometheus here: the
series as an instant query's answer gives them), and the judge's verdict on them."""

from __future__ import annotations

import math

from tempoconf.rollout.health_specs import PrometheusCheckSpec
from tempoconf.rollout.progress import Verdict
from tempoconf.rollout.prometheus_counts import (
    JoinedCounts,
    join_counts,
    judge_counts,
    series_name,
)
from tempoconf.rollout.sequential import RatioSums
from tests.domain.test_prometheus_judge_spec import JUDGED

SPEC = PrometheusCheckSpec.model_validate(JUDGED)


def _client(instance: str, **labels: str) -> dict[str, str]:
    return {"instance": instance, **labels}


def test_failed_and_total_series_are_joined_by_their_labels_the_name_aside() -> None:
    joined = join_counts(
        [
            ({"__name__": "errors_total", **_client("a", job="api")}, 3.0),
            ({"__name__": "errors_total", **_client("b", job="api")}, 1.0),
        ],
        [
            ({"__name__": "calls_total", **_client("b", job="api")}, 50.0),
            ({"__name__": "calls_total", **_client("a", job="api")}, 100.0),
            ({"__name__": "calls_total", **_client("a", job="batch")}, 10.0),
        ],
    )
    # a/api 3 of 100, b/api 1 of 50, a/batch (another client: its job differs) 0 of 10.
    assert joined.sums == RatioSums.of([(3.0, 100.0), (1.0, 50.0), (0.0, 10.0)])
    assert (joined.sums.clients, joined.sums.numerator, joined.sums.denominator) == (3, 4.0, 160.0)
    assert joined.failed_without_total == [] and joined.unreadable == []


def test_a_failed_series_without_a_total_is_left_out_and_named() -> None:
    joined = join_counts(
        [(_client("a"), 3.0), (_client("ghost", zone="eu"), 7.0)], [(_client("a"), 100.0)]
    )
    assert (joined.sums.clients, joined.sums.numerator) == (1, 3.0)
    assert joined.failed_without_total == ['{instance="ghost",zone="eu"}']


def test_series_with_no_finite_value_and_clients_with_no_operations_are_left_out() -> None:
    joined = join_counts(
        [(_client("a"), math.nan), (_client("b"), 1.0)],
        [
            (_client("a"), 100.0),
            (_client("b"), 40.0),
            (_client("c"), 0.0),
            (_client("d"), math.inf),
        ],
    )
    # a: its failures unknown; c: no operations; d: no finite total. Only b is left.
    assert joined.sums == RatioSums.of([(1.0, 40.0)])
    assert joined.unreadable == ['{instance="a"}', '{instance="d"}']


def test_a_scalar_or_unlabelled_series_is_one_client() -> None:
    joined = join_counts([({}, 2.0)], [({}, 80.0)])
    assert (joined.sums.clients, joined.sums.ratio) == (1, 0.025)
    assert series_name({"__name__": "up"}) == "{}"


def _side(rate: float, clients: int, operations: float) -> JoinedCounts:
    return JoinedCounts(RatioSums.of([(rate * operations, operations)] * clients))


def test_judge_counts_finds_a_regression_and_names_what_it_left_out() -> None:
    cohort = JoinedCounts(_side(0.05, 8, 20_000).sums, failed_without_total=['{instance="ghost"}'])
    verdict, summary, figures = judge_counts(SPEC, cohort, _side(0.01, 40, 20_000))
    assert verdict == Verdict.UNHEALTHY
    assert summary.startswith("regression: error rate +4.0")
    assert '1 cohort failed series without a total series left out ({instance="ghost"})' in summary
    assert figures["left_out"] == {
        "cohort_without_total": {"series": 1, "labels": ['{instance="ghost"}']}
    }
    assert figures["error_rate"]["cohort_clients"] == 8


def test_judge_counts_with_no_cohort_series_has_no_data() -> None:
    verdict, summary, _ = judge_counts(SPEC, JoinedCounts(RatioSums()), _side(0.01, 40, 20_000))
    assert verdict == Verdict.NO_DATA
    assert "no cohort operations" in summary
