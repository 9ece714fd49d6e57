"""The rollout plan: defaults applied, names given, rollout-level checks in every stage."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import TypeAdapter

from tempoconf.rollout.health_specs import HealthCheckSpec
from tempoconf.rollout.plan import (
    PlannedCheck,
    PlannedStage,
    RolloutPlan,
    added_reach,
    plan_check,
    plan_from_request,
)
from tempoconf.rollout.request import parse_rollout_request

REPORTS = {"kind": "reports", "max_error_ratio": 0.05, "min_clients": 1}
HTTP = {"kind": "http", "url": "https://judge.example/ok", "timeout": "2s"}


def plan(**fields: Any) -> RolloutPlan:
    raw = {"path": "myproject/server_config", "value": {"max_connections": 2000}, **fields}
    return plan_from_request(parse_rollout_request(raw), "0123456789abcdef")


def test_plan_carries_the_requests_identity() -> None:
    result = plan(namespace="prod", author="alice", commit="3f2a9c1", message="raise")
    assert (result.namespace, result.path, result.version) == (
        "prod",
        "myproject/server_config",
        "0123456789abcdef",
    )
    assert (result.author, result.commit, result.message) == ("alice", "3f2a9c1", "raise")
    assert result.stages == []


def test_default_cooldown_and_expiration_apply() -> None:
    result = plan(
        stages=[{"channel": "canary"}, {"percentile": 10, "cooldown": "15m", "expiration": "2h"}]
    )
    first, second = result.stages
    assert (first.cooldown_seconds, first.expiration_seconds) == (300, 3600)
    assert (second.cooldown_seconds, second.expiration_seconds) == (900, 7200)


def test_request_level_defaults_apply() -> None:
    result = plan(
        default_cooldown_time="1m",
        default_expiration_time={"seconds": 600},
        stages=[{"channel": "canary"}, {"percentile": 10, "cooldown": 30}],
    )
    assert [(s.cooldown_seconds, s.expiration_seconds) for s in result.stages] == [
        (60, 600),
        (30, 600),
    ]


def test_an_explicit_zero_cooldown_is_kept() -> None:
    (only,) = plan(default_cooldown_time="10m", stages=[{"percentile": 10, "cooldown": 0}]).stages
    assert only.cooldown_seconds == 0


def test_stages_are_indexed_and_named() -> None:
    result = plan(
        stages=[
            {"channel": "canary"},
            {"percentile": 10},
            {"labels": {"region": "eu"}, "percentile": 50},
            {"percentile": 100, "name": "everyone", "manual": True},
        ]
    )
    assert [(s.index, s.name) for s in result.stages] == [
        (0, "channel:canary"),
        (1, "10%"),
        (2, "50% labels:region=eu"),
        (3, "everyone"),
    ]
    assert [s.manual for s in result.stages] == [False, False, False, True]
    assert result.stages[0].channel == "canary" and result.stages[0].percentile is None
    assert result.stages[2].labels == {"region": "eu"} and result.stages[2].percentile == 50
    assert result.stages[1].labels == {}


def test_rollout_checks_are_merged_into_every_stage_before_its_own() -> None:
    result = plan(
        health=[REPORTS],
        stages=[{"channel": "canary"}, {"percentile": 10, "health": [HTTP]}],
    )
    first, second = result.stages
    assert [check.kind for check in first.health] == ["reports"]
    assert [check.kind for check in second.health] == ["reports", "http"]
    assert first.health[0].spec["max_error_ratio"] == 0.05


def test_no_checks_means_empty_lists() -> None:
    (only,) = plan(stages=[{"channel": "canary"}]).stages
    assert only.health == []


def test_stage_checks_are_not_shared_between_stages() -> None:
    first, second = plan(health=[REPORTS], stages=[{"channel": "a"}, {"channel": "b"}]).stages
    first.health[0].spec["max_error_ratio"] = 0.9
    assert second.health[0].spec["max_error_ratio"] == 0.05


def test_planned_checks_are_json_and_validate_again_unchanged() -> None:
    request = parse_rollout_request(
        {
            "path": "a/b",
            "value": 1,
            "health": [{**REPORTS, "window": "10m", "interval": "30s"}],
            "stages": [{"percentile": 1, "health": [HTTP]}],
        }
    )
    (stage,) = plan_from_request(request, "v").stages
    specs = [check.spec for check in stage.health]
    assert json.loads(json.dumps(specs)) == specs
    adapter = TypeAdapter(HealthCheckSpec)
    expected = [*request.health, *request.stages[0].health]  # type: ignore[misc]
    assert [adapter.validate_python(spec) for spec in specs] == expected
    assert [check.typed_spec() for check in stage.health] == expected
    assert specs[0]["window"] == 600 and specs[0]["interval"] == 30
    assert "name" not in specs[0]  # None fields are left out


def test_planned_checks_have_every_default_applied_once() -> None:
    (stage,) = plan(
        health=[REPORTS],
        stages=[
            {
                "channel": "canary",
                "health": [
                    {
                        **HTTP,
                        "name": "judge",
                        "interval": "1m",
                        "initial_delay": "10s",
                        "failure_limit": 3,
                        "on_no_data": "pass",
                        "attempts": 5,
                    },
                    {"kind": "prometheus", "url": "http://prom:9090", "query": "up", "min": 1},
                ],
            }
        ],
    ).stages
    reports, http, prometheus = stage.health
    assert reports == PlannedCheck(
        kind="reports",
        name="reports #1",
        interval_seconds=None,
        initial_delay_seconds=0.0,
        failure_limit=1,
        on_no_data="fail",
        attempts=3,
        timeout_seconds=30.0,
        spec={
            **REPORTS,
            "window": 300.0,
            "initial_delay": 0.0,
            "failure_limit": 1,
            "on_no_data": "fail",
            "attempts": 3,
        },
    )
    assert (http.name, http.interval_seconds, http.initial_delay_seconds, http.failure_limit) == (
        "judge",
        60.0,
        10.0,
        3,
    )
    assert (http.on_no_data, http.attempts, http.timeout_seconds) == ("pass", 5, 2.0)
    assert (prometheus.name, prometheus.timeout_seconds) == ("prometheus #3 (>= 1)", 10.0)
    # the longest a run of checks can take: the slowest check's every attempt and pause
    assert stage.seconds_per_check_run([0, 1]) == 30.0 * 3 + 2.0 * 3
    assert stage.seconds_per_check_run([1, 2]) == 10.0 * 3 + 2.0 * 3


def test_check_names_for_people() -> None:
    assert plan_check(HTTP, 0).name == "http https://judge.example/ok"
    prometheus = {"kind": "prometheus", "url": "http://prom:9090", "query": "up"}
    assert plan_check({**prometheus, "max": 0.5}, 1).name == "prometheus #2 (<= 0.5)"
    assert plan_check({**prometheus, "min": 2}, 1).name == "prometheus #2 (>= 2)"
    assert plan_check({**REPORTS, "name": "errors"}, 4).name == "errors"
    assert plan_check(REPORTS, 4).name == "reports #5"


def test_plan_is_plain_json_friendly_data() -> None:
    result = plan(health=[REPORTS], stages=[{"channel": "canary", "labels": {"k": "v"}}])
    as_dict = dataclasses.asdict(result)
    assert json.loads(json.dumps(as_dict)) == as_dict


def test_cohort_in_words() -> None:
    assert PlannedStage(0, "x", channel="canary").cohort() == "channel=canary"
    assert PlannedStage(0, "x", percentile=12.5).cohort() == "12.5% of clients"
    assert (
        PlannedStage(0, "x", channel="beta", percentile=10, labels={"z": "1", "a": "2"}).cohort()
        == "channel=beta and 10% of clients and a=2, z=1"
    )


def adds(**fields: Any) -> list[str]:
    stages = plan(**fields).stages
    return [added_reach(stages, stage.index) for stage in stages]


def test_each_stage_adds_a_share_of_the_clients_over_the_earlier_stages_of_its_segment() -> None:
    assert adds(stages=[{"percentile": 10}, {"percentile": 50}, {"percentile": 100}]) == [
        "10% of the clients",
        "40% of the clients",
        "50% of the clients",
    ]
    assert adds(stages=[{"percentile": 10.5}], strategy={"linear": {"step": 50}}) == [
        "10.5% of the clients",
        "39.5% of the clients",
        "50% of the clients",
    ]
    assert adds(
        stages=[
            {"channel": "canary", "labels": {"zone": "eu"}},
            {"channel": "beta", "percentile": 5},
            {"channel": "beta", "percentile": 20},
        ]
    ) == [
        "all the clients with channel=canary and zone=eu",
        "5% of the clients with channel=beta",
        "15% of the clients with channel=beta",
    ]


def test_what_earlier_stages_of_other_segments_may_reach_is_said_not_counted() -> None:
    """How many canaries are among the 10%, only the fleet knows (the plan's NEW column)."""
    assert adds(stages=[{"channel": "canary"}, {"percentile": 10}, {"percentile": 50}]) == [
        "all the clients with channel=canary",
        "10% of the clients, less those earlier stages reach",
        "40% of the clients, less those earlier stages reach",
    ]
    # a stage of zone=us shares no client with one of zone=eu
    assert adds(
        stages=[{"labels": {"zone": "eu"}}, {"labels": {"zone": "us"}, "percentile": 50}]
    ) == [
        "all the clients with zone=eu",
        "50% of the clients with zone=us",
    ]
