"""Two rules of the whole request (docs/contract.md, The rollout request): its size as JSON, and
stages that widen, both checked by parse_rollout_request wherever the request comes from."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tempoconf.problems import InvalidRequestError, Problem
from tempoconf.rollout.request import MAX_REQUEST_BYTES, parse_rollout_request
from tempoconf.rollout.stages import StageSpec, cohort_contains

MINIMAL: dict[str, Any] = {"path": "myproject/server_config", "value": {"max_connections": 10}}
LIMIT_TEXT = "a rollout request is at most 1,048,576 bytes (1 MiB)"


def problems_of(raw: Any) -> list[Problem]:
    with pytest.raises(InvalidRequestError) as caught:
        parse_rollout_request(raw)
    return caught.value.problems


def size_of(raw: dict[str, Any]) -> int:
    """As Temporal's JSON keeps it: compact, sorted, non-ASCII escaped."""
    return len(json.dumps(raw, sort_keys=True, separators=(",", ":")))


# --- the size -----------------------------------------------------------------------------------


def test_the_limit_is_one_mebibyte_below_temporals_two_megabyte_blob_limit() -> None:
    assert MAX_REQUEST_BYTES == 1024 * 1024 < 2 * 1000 * 1000


def test_a_request_over_the_limit_is_refused_naming_the_limit_and_its_size() -> None:
    raw = {**MINIMAL, "value": {"blob": "x" * 1_500_000}}
    (problem,) = problems_of(raw)
    assert problem == Problem(
        "/value",
        f"the rollout request is {size_of(raw):,} bytes as JSON; {LIMIT_TEXT}",
    )
    assert problem.message.startswith("the rollout request is 1,500,054 bytes as JSON;")


def test_a_request_of_exactly_the_limit_is_accepted_one_byte_more_is_not() -> None:
    empty = {**MINIMAL, "value": ""}
    at_limit = {**MINIMAL, "value": "x" * (MAX_REQUEST_BYTES - size_of(empty))}
    assert size_of(at_limit) == MAX_REQUEST_BYTES
    parse_rollout_request(at_limit)
    over = {**MINIMAL, "value": at_limit["value"] + "x"}
    (problem,) = problems_of(over)
    assert "1,048,577 bytes as JSON" in problem.message


def test_non_ascii_is_counted_escaped_as_temporal_keeps_it() -> None:
    """'é' is `\\u00e9` in Temporal's JSON, six bytes: a sixth of a mebibyte of them is over,
    a sixth less a hundred is not."""
    over = MAX_REQUEST_BYTES // 6
    (problem,) = problems_of({**MINIMAL, "value": "é" * over})
    assert problem.message.startswith(
        f"the rollout request is {size_of({**MINIMAL, 'value': 'é' * over}):,}"
    )
    parse_rollout_request({**MINIMAL, "value": "é" * (over - 100)})


def test_values_each_under_the_limit_but_together_over_it_are_refused_at_the_request() -> None:
    changes = [
        {"path": f"myproject/part{n}", "value": "x" * (MAX_REQUEST_BYTES // 3)} for n in range(4)
    ]
    raw = {"changes": changes, "stages": [{"channel": "canary"}]}
    (problem,) = problems_of(raw)
    assert problem.pointer == ""
    assert problem.message == f"the rollout request is {size_of(raw):,} bytes as JSON; {LIMIT_TEXT}"


def test_a_changes_value_over_the_limit_alone_is_refused_at_that_value() -> None:
    changes = [
        {"path": "myproject/small", "value": 1},
        {"path": "myproject/big", "value": ["x" * MAX_REQUEST_BYTES]},
    ]
    (problem,) = problems_of({"changes": changes})
    assert problem.pointer == "/changes/1/value"


def test_the_size_is_said_with_every_other_problem() -> None:
    raw = {**MINIMAL, "value": "x" * MAX_REQUEST_BYTES, "stages": [{"percentile": 150}]}
    assert {problem.pointer for problem in problems_of(raw)} == {"/value", "/stages/0/percentile"}


def test_a_value_that_is_no_json_is_still_said_so() -> None:
    (problem,) = problems_of({**MINIMAL, "value": {"x": float("nan")}})
    assert problem.pointer == "/value" and "not plain JSON" in problem.message


# --- stages that cannot widen -------------------------------------------------------------------


def unwidening_message(later: int, later_name: str, earlier: int, earlier_name: str) -> str:
    return (
        f"stage {later} ({later_name}) reaches no client that stage {earlier} ({earlier_name}) "
        "does not reach already: cohorts are cumulative, so each stage must widen the ones "
        "before it"
    )


@pytest.mark.parametrize(
    ("stages", "pointer", "message"),
    [
        (
            [{"percentile": 50}, {"percentile": 10}],
            "/stages/1",
            unwidening_message(2, "10%", 1, "50%"),
        ),
        (
            [{"percentile": 50}, {"percentile": 50, "labels": {"zone": "eu"}}],
            "/stages/1",
            unwidening_message(2, "50% labels:zone=eu", 1, "50%"),
        ),
        (
            [{"channel": "canary"}, {"channel": "canary", "percentile": 10}],
            "/stages/1",
            unwidening_message(2, "channel:canary 10%", 1, "channel:canary"),
        ),
        (
            [{"labels": {"zone": "eu"}}, {"labels": {"zone": "eu", "tier": "web"}}],
            "/stages/1",
            unwidening_message(2, "labels:tier=web,zone=eu", 1, "labels:zone=eu"),
        ),
        (
            [{"percentile": 100}, {"channel": "canary"}],
            "/stages/1",
            unwidening_message(2, "channel:canary", 1, "100%"),
        ),
        (
            # the first stage that contains it is named, not the last
            [{"percentile": 30}, {"channel": "beta"}, {"percentile": 60}, {"percentile": 20}],
            "/stages/3",
            unwidening_message(4, "20%", 1, "30%"),
        ),
        (
            [{"percentile": 10, "name": "ten"}, {"percentile": 10, "name": "ten again"}],
            "/stages/1",
            unwidening_message(2, "ten again", 1, "ten"),
        ),
    ],
)
def test_a_stage_an_earlier_stage_contains_is_refused_naming_both(
    stages: list[dict[str, Any]], pointer: str, message: str
) -> None:
    assert problems_of({**MINIMAL, "stages": stages}) == [Problem(pointer, message)]


@pytest.mark.parametrize(
    "stages",
    [
        [{"channel": "canary"}, {"percentile": 10}],
        [{"percentile": 10}, {"percentile": 50}, {"percentile": 100}],
        [{"percentile": 50, "labels": {"zone": "eu"}}, {"percentile": 50}],
        [{"channel": "canary", "percentile": 50}, {"percentile": 10}],
        [{"channel": "canary"}, {"channel": "beta"}],
        [{"labels": {"zone": "eu"}}, {"labels": {"zone": "us"}}],
        [{"labels": {"zone": "eu", "tier": "web"}}, {"labels": {"zone": "eu"}}],
        [{"percentile": 10}, {"channel": "canary"}],  # canaries above the 10th percentile
        [{"percentile": 10.5}, {"percentile": 10.51}],
    ],
)
def test_a_stage_that_may_reach_new_clients_is_accepted(stages: list[dict[str, Any]]) -> None:
    assert len(parse_rollout_request({**MINIMAL, "stages": stages}).stages) == len(stages)


def test_a_strategy_that_does_not_widen_the_explicit_stages_is_refused_at_strategy() -> None:
    raw = {**MINIMAL, "stages": [{"percentile": 25}], "strategy": {"linear": {"step": 20}}}
    assert problems_of(raw) == [Problem("/strategy", unwidening_message(2, "20%", 1, "25%"))]
    # above the explicit stages, it is fine
    raw = {**MINIMAL, "stages": [{"percentile": 5}], "strategy": {"linear": {"step": 20}}}
    assert [stage.display_name for stage in parse_rollout_request(raw).all_stages] == [
        "5%", "20%", "40%", "60%", "80%", "100%",
    ]  # fmt: skip


def test_a_changeset_s_stages_are_checked_alike() -> None:
    changes = [{"path": "myproject/a", "value": 1}, {"path": "myproject/b", "value": 2}]
    raw = {"changes": changes, "stages": [{"percentile": 50}, {"percentile": 10}]}
    assert [problem.pointer for problem in problems_of(raw)] == ["/stages/1"]


def test_containment_is_what_resolution_matches() -> None:
    def stage(**target: Any) -> StageSpec:
        return StageSpec.model_validate(target)

    assert cohort_contains(stage(percentile=50), stage(percentile=50, channel="beta"))
    assert not cohort_contains(stage(channel="beta"), stage(percentile=50))
    assert cohort_contains(stage(labels={"a": "1"}), stage(labels={"a": "1", "b": "2"}))
    assert not cohort_contains(stage(labels={"a": "1"}), stage(labels={"a": "2"}))
