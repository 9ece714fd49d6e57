"""A prometheus check with a sequential judge: `judge` with `counts` instead of `query` and a bound,
refused where it is incomplete or mixed, with a pointer and a message naming the field; the
published schema refuses the same; the plan names it by its tolerance."""

from __future__ import annotations

from typing import Any

import pytest

from tempoconf.rollout.plan import plan_check
from tests.domain.test_contract_schema import model_accepts, schema_errors
from tests.domain.test_request import MINIMAL, by_pointer, problems_of

COUNTS = {
    "cohort_failed": 'sum by (instance) (increase(errors_total{version="{version}"}[{elapsed}]))',
    "cohort_total": 'sum by (instance) (increase(calls_total{version="{version}"}[{elapsed}]))',
    "baseline_failed": 'sum by (instance) (increase(errors_total{version!="{version}"}[5m]))',
    "baseline_total": 'sum by (instance) (increase(calls_total{version!="{version}"}[5m]))',
}
JUDGED: dict[str, Any] = {
    "kind": "prometheus",
    "url": "http://prom:9090",
    "judge": {"sequential": {"max_increase": 0.005}},
    "counts": COUNTS,
}


def _request(check: dict[str, Any]) -> dict[str, Any]:
    return {**MINIMAL, "health": [check]}


def _without(check: dict[str, Any], field: str) -> dict[str, Any]:
    return {key: value for key, value in check.items() if key != field}


def test_a_judged_check_needs_no_query_and_no_bound() -> None:
    assert model_accepts(_request(JUDGED))
    assert schema_errors(_request(JUDGED)) == []


@pytest.mark.parametrize(
    ("check", "pointer", "message"),
    [
        (
            _without(JUDGED, "counts"),
            "/health/0/counts",
            "counts is required with a judge: the PromQL of cohort_failed, cohort_total, "
            "baseline_failed and baseline_total",
        ),
        (
            {**JUDGED, "counts": {**COUNTS, "cohort_total": 'calls_total{job="{job}"}'}},
            "/health/0/counts/cohort_total",
            "cohort_total uses unknown placeholder(s) ['job']; known: ['elapsed', 'namespace', "
            "'path', 'since', 'stage', 'version']",
        ),
        (
            {**JUDGED, "counts": {**COUNTS, "baseline_failed": "sum(errors_total"}},
            "/health/0/counts/baseline_failed",
            "baseline_failed has an unclosed '('",
        ),
        (
            {**JUDGED, "counts": _without(COUNTS, "baseline_total")},
            "/health/0/counts/baseline_total",
            "required field is missing",
        ),
        (
            {
                **JUDGED,
                "judge": {"sequential": {"max_increase": 0.005, "max_latency_increase_ms": 20}},
            },
            "/health/0/judge/sequential/max_latency_increase_ms",
            "max_latency_increase_ms is for a reports check: a prometheus check's counts are "
            "failed and total operations, so its judge takes max_increase only",
        ),
        (
            {**JUDGED, "judge": {"sequential": {"confidence": 0.99}}},
            "/health/0/judge/sequential/max_increase",
            "required field is missing",
        ),
        (
            {**JUDGED, "max": 0.1},
            "/health/0/max",
            "max is for a check without a judge: a judged prometheus check reads its counts (a "
            "query with max or min is a check of its own)",
        ),
        (
            {**JUDGED, "query": "up"},
            "/health/0/query",
            "query is for a check without a judge: a judged prometheus check reads its counts (a "
            "query with max or min is a check of its own)",
        ),
        (
            {**_without(JUDGED, "judge"), "query": "up", "max": 1},
            "/health/0/counts",
            "counts is read by a judge only: add judge, or leave counts out",
        ),
        # Without a judge, as before: a query and a bound.
        (
            _without(_without(JUDGED, "judge"), "counts"),
            "/health/0/query",
            "required field is missing",
        ),
        (
            {**_without(_without(JUDGED, "judge"), "counts"), "query": "up"},
            "/health/0",
            "a prometheus check needs a bound: max or min",
        ),
    ],
)
def test_an_incomplete_or_mixed_check_is_refused_naming_the_field(
    check: dict[str, Any], pointer: str, message: str
) -> None:
    assert by_pointer(problems_of(_request(check))) == {pointer: message}
    if "uses unknown placeholder" in message or "unclosed" in message:
        return  # a JSON Schema cannot read PromQL: only the model refuses these
    assert schema_errors(_request(check)) != [], "the published schema refuses it too"


def test_a_judged_check_is_named_by_its_tolerance() -> None:
    assert plan_check(JUDGED, 1).name == "prometheus #2 (sequential, max_increase 0.5 pp)"
    planned = plan_check({**JUDGED, "judge": {"sequential": {"max_increase": 0.02}}}, 0)
    assert planned.name == "prometheus #1 (sequential, max_increase 2 pp)"
    # What the workflow gets back from the plan is the same check.
    assert planned.typed_spec().counts is not None
    assert planned.spec["counts"] == COUNTS
