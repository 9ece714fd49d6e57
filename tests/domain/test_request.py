"""The rollout request (docs/contract.md, The rollout request): parsing, defaults and every problem."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter

from tempoconf.problems import InvalidRequestError, Problem, json_pointer
from tempoconf.rollout.health_specs import HealthCheckSpec, PrometheusCheckSpec, ReportsCheckSpec
from tempoconf.rollout.request import DEFAULT_COOLDOWN, DEFAULT_EXPIRATION, parse_rollout_request
from tempoconf.rollout.stages import StageSpec, stage_display_name

# The example of docs/contract.md, verbatim.
DESIGN_EXAMPLE = json.loads(
    """
{
  "path": "myproject/server_config",
  "namespace": "default",
  "value": {"is_debug": false, "max_connections": 2000},
  "default_cooldown_time": "300s",
  "default_expiration_time": "3600s",
  "stages": [
    {"channel": "canary"},
    {"percentile": 10},
    {"percentile": 50, "cooldown": "900s"}
  ],
  "health": [{"kind": "reports", "max_error_ratio": 0.05, "min_clients": 1}],
  "author": "alice@example.com", "commit": "3f2a9c1", "message": "raise max_connections"
}
"""
)

MINIMAL: dict[str, Any] = {"path": "myproject/server_config", "value": {"max_connections": 10}}
PROMETHEUS = {"kind": "prometheus", "url": "http://prom:9090", "query": "up{job='x'}", "max": 1}


def problems_of(raw: Any) -> list[Problem]:
    with pytest.raises(InvalidRequestError) as caught:
        parse_rollout_request(raw)
    assert caught.value.problems, "an InvalidRequestError lists at least one problem"
    return caught.value.problems


def by_pointer(problems: list[Problem]) -> dict[str, str]:
    return {problem.pointer: problem.message for problem in problems}


def with_stages(*stages: Any, **extra: Any) -> dict[str, Any]:
    return {**MINIMAL, "stages": list(stages), **extra}


# --- the contract's example and defaults ---------------------------------------------------------


def test_design_example_parses() -> None:
    request = parse_rollout_request(copy.deepcopy(DESIGN_EXAMPLE))
    assert request.path == "myproject/server_config"
    assert request.namespace == "default"
    assert request.value == {"is_debug": False, "max_connections": 2000}
    assert request.default_cooldown_time == timedelta(seconds=300)
    assert request.default_expiration_time == timedelta(seconds=3600)
    assert [stage.display_name for stage in request.stages] == ["channel:canary", "10%", "50%"]
    assert request.stages[0].channel == "canary"
    assert request.stages[1].percentile == 10
    assert request.stages[2].cooldown == timedelta(seconds=900)
    assert request.stages[0].cooldown is None  # falls back to the default in the plan
    (check,) = request.health
    assert isinstance(check, ReportsCheckSpec)
    assert check.max_error_ratio == 0.05 and check.min_clients == 1
    assert (request.author, request.commit, request.message) == (
        "alice@example.com",
        "3f2a9c1",
        "raise max_connections",
    )


def test_defaults() -> None:
    request = parse_rollout_request(dict(MINIMAL))
    assert request.namespace == "default"
    assert request.default_cooldown_time == DEFAULT_COOLDOWN == timedelta(seconds=300)
    assert request.default_expiration_time == DEFAULT_EXPIRATION == timedelta(seconds=3600)
    assert request.stages == []  # no stages: validate, then promote directly
    assert request.health == []
    assert (request.author, request.commit, request.message) == ("", "", "")


@pytest.mark.parametrize(
    "raw",
    [300, "300s", "5m", {"seconds": 300}, {"seconds": "300"}, 300.0],
)
def test_durations_in_every_form(raw: Any) -> None:
    request = parse_rollout_request({**MINIMAL, "default_cooldown_time": raw})
    assert request.default_cooldown_time == timedelta(seconds=300)


def test_any_json_value_is_accepted() -> None:
    for value in [None, 0, "text", [1, 2], {"deep": {"list": [1, {"x": "ü"}]}}]:
        assert parse_rollout_request({**MINIMAL, "value": value}).value == value


def test_check_kinds_parse_to_their_specs() -> None:
    request = parse_rollout_request(
        {
            **MINIMAL,
            "health": [
                {"kind": "reports", "max_baseline_factor": 2},
                {
                    **PROMETHEUS,
                    "query": "sum(rate(errors{path='{path}',version='{version}'}[5m]))",
                },
                {"kind": "http", "url": "https://judge.example/ok", "interval": "30s"},
            ],
        }
    )
    kinds = [check.kind for check in request.health]
    assert kinds == ["reports", "prometheus", "http"]
    assert isinstance(request.health[1], PrometheusCheckSpec)
    assert request.health[2].interval == timedelta(seconds=30)


def test_prometheus_query_may_use_every_placeholder() -> None:
    query = "increase(x{p='{path}',n='{namespace}',v='{version}',s='{stage}'}[{elapsed}] @ {since})"
    request = parse_rollout_request({**MINIMAL, "health": [{**PROMETHEUS, "query": query}]})
    assert request.health[0].query == query


def test_http_check_url_may_use_placeholders() -> None:
    url = "https://judge.example/verdict?config={path}&v={version}&stage={stage}&since={since}"
    request = parse_rollout_request({**MINIMAL, "health": [{"kind": "http", "url": url}]})
    assert request.health[0].url == url


# --- one problem at a time, each at its pointer --------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "pointer", "fragment"),
    [
        ({**MINIMAL, "value": float("nan")}, "/value", "not plain JSON"),
        ({**MINIMAL, "value": {"x": [1, float("inf")]}}, "/value", "not plain JSON"),
        ({**MINIMAL, "value": {"when": object()}}, "/value", "not plain JSON"),
        ({"path": "a/b"}, "", "exactly one of 'value' (a new value) and 'version'"),
        ({"path": "a/b", "value": 1, "version": "0123456789abcdef"}, "", "exactly one of 'value'"),
        ({"path": "a/b", "version": "not-a-version"}, "/version", "should match pattern"),
        ({**MINIMAL, "strategy": {}}, "/strategy", "exactly one of 'linear' or 'exponential'"),
        (
            {**MINIMAL, "strategy": {"linear": {"step": 0}}},
            "/strategy/linear/step",
            "greater than 0",
        ),
        (
            {**MINIMAL, "strategy": {"exponential": {"start": 1, "factor": 1}}},
            "/strategy/exponential/factor",
            "greater than 1",
        ),
        (
            {
                **MINIMAL,
                "stages": [{"channel": "canary", "name": "50%"}],
                "strategy": {"linear": {"step": 50}},
            },
            "/strategy",
            "repeats stage(s) ['50%']",
        ),
        (
            {**MINIMAL, "stages": [{"percentile": 50}], "strategy": {"linear": {"step": 50}}},
            "/strategy",
            "stage 2 (50%) reaches no client that stage 1 (50%) does not reach already",
        ),
        ({**MINIMAL, "webhooks": ["ftp://x"]}, "/webhooks/0", "must start with http"),
        ({"value": 1}, "/path", "required field is missing"),
        ({**MINIMAL, "path": "a/../b"}, "/path", "'..'"),
        ({**MINIMAL, "path": "A/b"}, "/path", "a-z"),
        ({**MINIMAL, "path": ""}, "/path", "1-255"),
        ({**MINIMAL, "namespace": "Prod"}, "/namespace", "namespace"),
        ({**MINIMAL, "colour": "red"}, "/colour", "unknown field 'colour'"),
        ({**MINIMAL, "default_cooldown_time": "soon"}, "/default_cooldown_time", "cannot parse"),
        ({**MINIMAL, "default_cooldown_time": -5}, "/default_cooldown_time", "negative"),
        ({**MINIMAL, "default_cooldown_time": 10**400}, "/default_cooldown_time", "at most"),
        (
            {**MINIMAL, "default_expiration_time": 0},
            "/default_expiration_time",
            "greater than zero",
        ),
        (
            {**MINIMAL, "default_expiration_time": "0s"},
            "/default_expiration_time",
            "greater than zero",
        ),
        (with_stages({"percentile": 101}), "/stages/0/percentile", "100"),
        (with_stages({"percentile": -1}), "/stages/0/percentile", "0"),
        (with_stages({"percentile": 12.345}), "/stages/0/percentile", "two decimals"),
        (with_stages({"percentile": True}), "/stages/0/percentile", "number"),
        (with_stages({"percentile": "10"}), "/stages/0/percentile", "number"),
        (
            with_stages({"cooldown": "300s"}),
            "/stages/0",
            "at least one of channel, percentile, labels",
        ),
        (with_stages({"labels": {}}), "/stages/0", "at least one of channel, percentile, labels"),
        (with_stages({"channel": ""}), "/stages/0/channel", "at least 1 character"),
        (
            with_stages({"channel": "canary", "cooldwon": "5m"}),
            "/stages/0/cooldwon",
            "unknown field 'cooldwon'",
        ),
        # an unknown stage field named like a check kind stays in the pointer and the message
        (with_stages({"channel": "canary", "http": 1}), "/stages/0/http", "unknown field 'http'"),
        (
            with_stages({"channel": "canary", "cooldown": "1 hour"}),
            "/stages/0/cooldown",
            "cannot parse",
        ),
        (
            with_stages({"channel": "canary", "expiration": 0}),
            "/stages/0/expiration",
            "greater than zero",
        ),
        (with_stages({"channel": "canary", "labels": {"k": 1}}), "/stages/0/labels/k", "string"),
        (with_stages("canary"), "/stages/0", "dictionary"),
        ({**MINIMAL, "stages": {"channel": "canary"}}, "/stages", "list"),
        ({**MINIMAL, "health": [{"kind": "datadog"}]}, "/health/0", "unknown check kind 'datadog'"),
        ({**MINIMAL, "health": [{"max_error_ratio": 0.1}]}, "/health/0", "needs 'kind'"),
        (
            {**MINIMAL, "health": [{"kind": "reports"}]},
            "/health/0",
            "max_error_ratio, max_baseline_factor or judge",
        ),
        (
            {**MINIMAL, "health": [{"kind": "reports", "max_error_ratio": 2}]},
            "/health/0/max_error_ratio",
            "less than or equal to 1",
        ),
        (
            {**MINIMAL, "health": [{"kind": "reports", "max_error_ratio": 0.1, "bogus": 1}]},
            "/health/0/bogus",
            "unknown field 'bogus'",
        ),
        (
            {**MINIMAL, "health": [{k: v for k, v in PROMETHEUS.items() if k != "max"}]},
            "/health/0",
            "needs a bound",
        ),
        (
            {**MINIMAL, "health": [{**PROMETHEUS, "query": "up{job}"}]},
            "/health/0/query",
            "unknown placeholder",
        ),
        (
            {**MINIMAL, "health": [{**PROMETHEUS, "query": "up{job='x'} {flavour}"}]},
            "/health/0/query",
            "unknown placeholder",
        ),
        (
            {**MINIMAL, "health": [{**PROMETHEUS, "query": "up{"}]},
            "/health/0/query",
            "unclosed '{'",
        ),
        (
            {**MINIMAL, "health": [{**PROMETHEUS, "query": "rate(up[5m]))"}]},
            "/health/0/query",
            "unmatched ')'",
        ),
        ({**MINIMAL, "health": [{**PROMETHEUS, "url": "prom:9090"}]}, "/health/0/url", "http://"),
        (
            {**MINIMAL, "health": [{**PROMETHEUS, "interval": -10}]},
            "/health/0/interval",
            "negative",
        ),
        (
            {**MINIMAL, "health": [{**PROMETHEUS, "interval": 0}]},
            "/health/0/interval",
            "greater than zero",
        ),
        (
            {**MINIMAL, "health": [{**PROMETHEUS, "on_no_data": "maybe"}]},
            "/health/0/on_no_data",
            "'pass'",
        ),
        ({**MINIMAL, "health": [{"kind": "http", "url": "ftp://x"}]}, "/health/0/url", "http://"),
        (
            with_stages({"channel": "canary", "health": [{"kind": "http"}]}),
            "/stages/0/health/0/url",
            "required field is missing",
        ),
        (
            with_stages({"channel": "canary", "health": [{"kind": "nope"}]}),
            "/stages/0/health/0",
            "unknown check kind 'nope'",
        ),
    ],
)
def test_each_problem_is_reported_at_its_pointer(raw: Any, pointer: str, fragment: str) -> None:
    problems = problems_of(raw)
    found = by_pointer(problems)
    assert pointer in found, f"no problem at {pointer}: {problems}"
    assert fragment in found[pointer]
    assert "Value error" not in found[pointer]  # pydantic's prefix is removed


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ({**MINIMAL, "stagess": []}, "/stagess: unknown field 'stagess'; did you mean 'stages'?"),
        (with_stages({"channel": "canary", "cooldwon": "5m"}),
         "/stages/0/cooldwon: unknown field 'cooldwon'; did you mean 'cooldown'?"),
        ({**MINIMAL, "health": [{"kind": "reports", "max_eror_ratio": 0.1}]},
         "/health/0/max_eror_ratio: unknown field 'max_eror_ratio'; did you mean 'max_error_ratio'?"),
        ({**MINIMAL, "health": [{"kind": "http", "url": "http://x/", "timout": "1s"}]},
         "/health/0/timout: unknown field 'timout'; did you mean 'timeout'?"),
        # nothing near: no guess
        ({**MINIMAL, "colour": "red"}, "/colour: unknown field 'colour'"),
    ],
)  # fmt: skip
def test_an_unknown_field_names_the_nearest_known_one_of_its_object(raw: Any, said: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_rollout_request(raw)
    assert said in [str(problem) for problem in refused.value.problems]


@pytest.mark.parametrize("raw", [None, [], "{}", 3])
def test_a_request_is_a_json_object(raw: Any) -> None:
    (problem,) = problems_of(raw)
    assert problem.pointer == ""
    assert "JSON object" in problem.message


def test_a_repeated_cohort_is_refused_as_widening_nothing_not_as_a_repeated_name() -> None:
    """Its default name repeats too, but another name would not make it widen."""
    problems = problems_of(
        with_stages({"percentile": 10}, {"channel": "beta"}, {"percentile": 10.0})
    )
    assert [problem.pointer for problem in problems] == ["/stages/2"]
    assert problems[0].message == (
        "stage 3 (10%) reaches no client that stage 1 (10%) does not reach already: "
        "cohorts are cumulative, so each stage must widen the ones before it"
    )


def test_duplicate_stage_names_point_at_the_repeating_stage() -> None:
    problems = problems_of(
        with_stages({"percentile": 10}, {"channel": "beta", "name": "10%"}, {"percentile": 20})
    )
    assert [problem.pointer for problem in problems] == ["/stages/1/name"]
    assert "'10%'" in problems[0].message and "stage 0" in problems[0].message


def test_duplicate_explicit_name_points_at_the_name() -> None:
    problems = problems_of(
        with_stages({"channel": "canary"}, {"percentile": 5, "name": "channel:canary"})
    )
    assert [problem.pointer for problem in problems] == ["/stages/1/name"]


def test_distinct_names_do_not_make_a_repeated_cohort_valid() -> None:
    """A second stage of the same cohort (say, to add an approval) holds the same clients again:
    `manual` goes on the first one."""
    problems = problems_of(
        with_stages({"percentile": 10}, {"percentile": 10, "name": "10% again", "manual": True})
    )
    assert by_pointer(problems) == {
        "/stages/1": "stage 2 (10% again) reaches no client that stage 1 (10%) does not reach "
        "already: cohorts are cumulative, so each stage must widen the ones before it"
    }


# --- many problems at once ----------------------------------------------------------------------


def test_many_problems_are_all_listed_at_once() -> None:
    raw = {
        "path": "my/../path",
        "value": {"x": float("nan")},
        "colour": "red",
        "default_cooldown_time": "soon",
        "default_expiration_time": 0,
        "stages": [
            {"percentile": 150},
            {"percentile": 1.234},
            {"manual": True},
            {"channel": "canary", "cooldwon": "5m"},
            {"percentile": 20},
            {"percentile": 20},
        ],
        "health": [
            {"kind": "datadog"},
            {"kind": "prometheus", "url": "http://p", "query": "up"},
            {**PROMETHEUS, "query": "up{job}"},
            {"kind": "reports", "max_error_ratio": 0.1, "interval": -1},
        ],
    }
    problems = problems_of(raw)
    found = by_pointer(problems)
    assert set(found) == {
        "/value",
        "/path",
        "/colour",
        "/default_cooldown_time",
        "/default_expiration_time",
        "/stages/0/percentile",
        "/stages/1/percentile",
        "/stages/2",
        "/stages/3/cooldwon",
        "/stages/5",
        "/health/0",
        "/health/1",
        "/health/2/query",
        "/health/3/interval",
    }
    assert len(problems) == len(found)  # each once


def test_error_message_lists_every_problem() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_rollout_request({"path": "A", "value": 1, "bogus": 2})
    text = str(caught.value)
    assert "2 problem(s)" in text
    assert "/path: " in text and "/bogus: unknown field 'bogus'" in text
    assert isinstance(caught.value, ValueError)


def test_json_pointer_escapes() -> None:
    assert json_pointer(["stages", 0, "labels", "a/b~c"]) == "/stages/0/labels/a~1b~0c"
    assert json_pointer([]) == ""
    assert str(Problem("", "x")) == "/: x"


def test_label_keys_with_slashes_are_escaped_in_pointers() -> None:
    found = by_pointer(problems_of(with_stages({"labels": {"app.kubernetes.io/name": 5}})))
    assert "/stages/0/labels/app.kubernetes.io~1name" in found


# --- stages ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "name"),
    [
        ({"channel": "canary"}, "channel:canary"),
        ({"percentile": 10}, "10%"),
        ({"percentile": 12.5}, "12.5%"),
        ({"percentile": 0.01}, "0.01%"),
        ({"percentile": 100}, "100%"),
        ({"labels": {"region": "eu"}}, "labels:region=eu"),
        ({"labels": {"zone": "b", "region": "eu"}}, "labels:region=eu,zone=b"),
        (
            {"channel": "beta", "percentile": 25, "labels": {"region": "eu"}},
            "channel:beta 25% labels:region=eu",
        ),
        ({"channel": "beta", "name": "Beta testers"}, "Beta testers"),
    ],
)
def test_stage_display_names(stage: dict[str, Any], name: str) -> None:
    assert StageSpec.model_validate(stage).display_name == name
    assert parse_rollout_request(with_stages(stage)).stages[0].display_name == name


def test_stage_display_name_function() -> None:
    assert stage_display_name("canary", None, {}) == "channel:canary"
    assert stage_display_name(None, 10.0, {}) == "10%"
    assert stage_display_name("c", 1.5, {"b": "2", "a": "1"}) == "channel:c 1.5% labels:a=1,b=2"


@pytest.mark.parametrize("percentile", [0, 0.01, 12.34, 99.99, 100, 50.5])
def test_two_decimal_percentiles_are_accepted(percentile: float) -> None:
    assert (
        parse_rollout_request(with_stages({"percentile": percentile})).stages[0].percentile
        == percentile
    )


def test_request_is_immutable() -> None:
    request = parse_rollout_request(dict(MINIMAL))
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error
        request.path = "other"  # type: ignore[misc]


def test_dumped_checks_validate_again_unchanged() -> None:
    request = parse_rollout_request(
        {
            **MINIMAL,
            "health": [
                {"kind": "reports", "max_error_ratio": 0.1, "window": "10m", "interval": "30s"},
                {**PROMETHEUS, "timeout": "2.5s", "initial_delay": "1m"},
                {"kind": "http", "url": "http://x", "timeout": 3},
            ],
        }
    )
    adapter = TypeAdapter(HealthCheckSpec)
    for check in request.health:
        dumped = json.loads(json.dumps(check.model_dump(mode="json")))
        assert adapter.validate_python(dumped) == check
    assert request.health[0].model_dump(mode="json")["window"] == 600


def test_strategies_expand_to_growing_percentile_stages() -> None:
    linear = parse_rollout_request(
        {**MINIMAL, "strategy": {"linear": {"step": 20, "every": "10m"}}}
    )
    assert [stage.percentile for stage in linear.all_stages] == [20, 40, 60, 80, 100]
    assert {stage.cooldown for stage in linear.all_stages} == {timedelta(minutes=10)}
    exponential = parse_rollout_request(
        {
            **MINIMAL,
            "stages": [{"channel": "canary"}],
            "strategy": {"exponential": {"start": 1, "factor": 2}},
        }
    )
    assert [stage.display_name for stage in exponential.all_stages] == [
        "channel:canary",
        "1%",
        "2%",
        "4%",
        "8%",
        "16%",
        "32%",
        "64%",
        "100%",
    ]
    odd = parse_rollout_request({**MINIMAL, "strategy": {"linear": {"step": 30}}})
    assert [stage.percentile for stage in odd.all_stages] == [30, 60, 90, 100]


def test_rollback_request_names_a_version_instead_of_a_value() -> None:
    request = parse_rollout_request({"path": "a/b", "version": "0123456789abcdef"})
    assert request.version == "0123456789abcdef"
