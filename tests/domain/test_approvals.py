"""Four-eyes approvals in the request (tempoconf.rollout.request) and who counts as whom
(tempoconf.rollout.approvals); the rollout itself is tested live in tests/workflows/test_approvals.py."""

from __future__ import annotations

from typing import Any

import pytest

from tempoconf.cli.status import approval_cell
from tempoconf.problems import InvalidRequestError
from tempoconf.rollout.approvals import same_identity
from tempoconf.rollout.request import parse_rollout_request


def request(stage: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"path": "a/b", "value": 1, "stages": [stage], "author": "alice", **fields}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (request({"channel": "c", "approvals": {"required": 2}}),
         '/stages/0: approvals are given on a manual stage only: add "manual": true'),
        (request({"channel": "c", "manual": False, "approvals": {"required": 2}}),
         '/stages/0: approvals are given on a manual stage only: add "manual": true'),
        (request({"channel": "c", "manual": True, "approvals": {"required": 0}}),
         "/stages/0/approvals/required: Input should be greater than or equal to 1"),
        (request({"channel": "c", "manual": True, "approvals": {"required": 11}}),
         "/stages/0/approvals/required: Input should be less than or equal to 10"),
        (request({"channel": "c", "manual": True, "approvals": {"required": "2"}}),
         "/stages/0/approvals/required: Input should be a valid integer"),
        (request({"channel": "c", "manual": True, "approvals": {}}),
         "/stages/0/approvals/required: required field is missing"),
        (request({"channel": "c", "manual": True, "approvals": {"required": 1, "forbid": 1}}),
         "/stages/0/approvals/forbid: unknown field 'forbid'; did you mean 'forbid_author'?"),
        (request({"channel": "c", "manual": True, "approvals": {"required": 1}}, author=""),
         "/stages/0/approvals/forbid_author: the author may not approve this stage, so the "
         'request must name its author (set "author", start it with a named admin token, or '
         '"forbid_author": false)'),
    ],
)  # fmt: skip
def test_bad_approvals_are_refused_naming_the_field(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_rollout_request(raw)
    assert [str(found) for found in refused.value.problems] == [problem]


def test_approvals_on_a_manual_stage_are_accepted() -> None:
    parsed = parse_rollout_request(
        request({"channel": "c", "manual": True, "approvals": {"required": 2}}, author="")
        | {"stages": [{"channel": "c", "manual": True,
                       "approvals": {"required": 2, "forbid_author": False}}]}
    )  # fmt: skip
    approvals = parsed.stages[0].approvals
    assert approvals is not None and (approvals.required, approvals.forbid_author) == (2, False)
    default = parse_rollout_request(
        request({"channel": "c", "manual": True, "approvals": {"required": 1}})
    ).stages[0]
    assert default.approvals is not None and default.approvals.forbid_author is True


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("alice", "alice", True),
        ("Alice", "alice", True),
        ("alice", "alice@example.com", True),
        ("alice@laptop", "alice@example.com", True),
        (" alice ", "ALICE@EXAMPLE.COM", True),
        ("bob", "alice@example.com", False),
        ("alicia", "alice", False),
        ("", "", False),
        ("bob", "", False),
    ],
)
def test_same_identity(one: str, other: str, same: bool) -> None:
    assert same_identity(one, other) is same
    assert same_identity(other, one) is same


def test_the_status_cell_counts_the_current_stages_approvals() -> None:
    progress = {"stage_index": 1, "approvals": [{"by": "bob"}]}
    assert approval_cell({"index": 1, "manual": True, "approvals_required": 2}, progress) == (
        "approvals 1/2 (bob)"
    )
    assert approval_cell({"index": 0, "manual": True, "approvals_required": 2}, progress) == (
        "approvals: 2"
    )
    assert approval_cell({"index": 1, "manual": True}, progress) == "manual"
    assert approval_cell({"index": 1}, {"stage_index": 1}) == ""
