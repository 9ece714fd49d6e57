"""Changesets in the domain: the request's two forms, per-change validation, the plan's configs,
the run state before prepare, and the Web UI details."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from tempoconf.problems import InvalidRequestError
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.change import MAX_SUMMARY_BYTES, workflow_details, workflow_summary
from tempoconf.rollout.details import render_current_details
from tempoconf.rollout.plan import PlannedChange, plan_from_request
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.rollout.run_state import RolloutRunState
from tempoconf.rollout.validation import validate_rollout
from tempoconf.temporal.names import request_workflow_id

CHANGES = [
    {"path": "a/x", "value": {"n": 1}},
    {"path": "a/y", "namespace": "other", "value": {"n": 2}},
]


class Lookup:
    """Schemas and versions of configs, as the store would answer them."""

    def __init__(self, schemas: dict[str, Any] | None = None) -> None:
        self.schemas = schemas or {}

    def get_schema(self, namespace: str, path: str) -> Any | None:
        return self.schemas.get(path)

    def get_version(self, namespace: str, path: str, version: str) -> VersionRecord | None:
        return None


def problems(raw: Any, lookup: Lookup | None = None) -> dict[str, str]:
    with pytest.raises(InvalidRequestError) as refused:
        validate_rollout(raw, lookup or Lookup())
    return {problem.pointer: problem.message for problem in refused.value.problems}


def test_a_changeset_is_named_by_its_first_change_and_has_every_config() -> None:
    request = parse_rollout_request({"namespace": "ns", "changes": CHANGES})
    assert (request.namespace, request.path) == ("ns", "a/x")
    assert request.changes is not None
    assert [request.change_namespace(change) for change in request.changes] == ["ns", "other"]
    assert request_workflow_id(request).startswith("changeset:")
    assert request_workflow_id(
        parse_rollout_request({"namespace": "ns", "changes": list(reversed(CHANGES))})
    ) == request_workflow_id(request)


@pytest.mark.parametrize(
    ("raw", "pointer", "fragment"),
    [
        ({"changes": CHANGES[:1]}, "/changes", "at least 2"),
        ({"changes": [*CHANGES, {"path": "a/x", "value": 3}]}, "/changes/2/path", "already changed"),
        ({"changes": CHANGES, "path": "a/z"}, "/path", "not at the top level"),
        ({"changes": CHANGES, "value": 1}, "/value", "not at the top level"),
        ({"changes": [CHANGES[0], {"path": "a/y"}]}, "/changes/1", "exactly one of"),
        ({"changes": [CHANGES[0], {"path": "a/y", "value": 1, "version": "0" * 16}]}, "/changes/1", "exactly one of"),
        ({"changes": [{"path": f"p/{n}", "value": n} for n in range(21)]}, "/changes", "at most 20"),
        ({"changes": [CHANGES[0], {"path": "a/../y", "value": 1}]}, "/changes/1/path", ""),
        # null is no changeset and no config either (schemathesis: a 500 IndexError once)
        ({"changes": None}, "/changes", "not null"),
        ({"changes": None, "stages": []}, "/changes", "not null"),
        # a namespace that is no string (schemathesis: a 500 TypeError once, from the check that
        # each config is changed once)
        ({"changes": [{**CHANGES[0], "namespace": []}, CHANGES[1]]}, "/changes/0/namespace", ""),
        ({"namespace": {}, "changes": CHANGES}, "/namespace", ""),
    ],
)  # fmt: skip
def test_bad_changesets_are_refused_at_the_change(raw: Any, pointer: str, fragment: str) -> None:
    found = problems(raw)
    assert pointer in found, found
    assert fragment in found[pointer], found


def test_each_value_is_checked_against_its_own_configs_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 1}}}
    found = problems({"changes": CHANGES}, Lookup({"a/y": schema}))
    assert list(found) == ["/changes/1/value/n"], found


def test_the_plan_carries_every_config_and_the_run_state_names_the_first() -> None:
    validated = validate_rollout({"changes": CHANGES, "stages": [{"percentile": 5}]}, Lookup())
    assert [(c.namespace, c.path) for c in validated.configs()] == [
        ("default", "a/x"),
        ("other", "a/y"),
    ]
    plan = plan_from_request(validated.request, validated.version)
    plan.changes = [
        PlannedChange(c.namespace, c.path, c.version, "first value") for c in validated.configs()
    ]
    assert [config[:2] for config in plan.configs()] == [("default", "a/x"), ("other", "a/y")]

    state = RolloutRunState.start({"changes": CHANGES, "namespace": "ns"}, workflow_id="w")
    assert (state.progress.namespace, state.progress.path) == ("ns", "a/x")
    state.set_plan(plan)
    assert [entry.split()[0] for entry in state.progress.changes] == ["default/a/x", "other/a/y"]

    details = render_current_details(state.progress, plan, now=datetime.now(UTC))
    assert details.splitlines()[0] == "## changeset of 2 configs"
    assert "- default/a/x: first value" in details and "- other/a/y: first value" in details


def test_a_single_config_plan_has_no_changes() -> None:
    validated = validate_rollout({"path": "a/x", "value": 1}, Lookup())
    assert validated.changes == ()
    plan = plan_from_request(validated.request, validated.version)
    assert plan.changes == [] and plan.bucket_key is None
    assert plan.configs() == [("default", "a/x", validated.version)]


def test_a_changesets_summaries_name_every_config_its_version_and_change() -> None:
    """Issue 25: the Web UI's Summary and Details name every config, not the first one only."""
    validated = validate_rollout({"changes": CHANGES, "stages": [{"percentile": 5}]}, Lookup())
    changes = [(f"{c.namespace}/{c.path}", c.version, "first value") for c in validated.configs()]
    request = validated.request
    summary = workflow_summary(
        request.namespace, request.path, validated.version, "first value", changes=changes
    )
    assert summary == (
        f"changeset of 2 configs: default/a/x: first value ({changes[0][1]}); "
        f"other/a/y: first value ({changes[1][1]})"
    )
    details = workflow_details(request, validated.version, "first value", changes=changes)
    assert details.splitlines()[:4] == [
        "**changeset of 2 configs**",
        "",
        f"- default/a/x → version `{changes[0][1]}`: first value",
        f"- other/a/y → version `{changes[1][1]}`: first value",
    ]
    long = [(f"default/a/{n}", "0" * 16, "x" * 100) for n in range(20)]
    assert len(workflow_summary("d", "a", "v", "c", changes=long).encode()) <= MAX_SUMMARY_BYTES


def test_a_changesets_current_details_name_no_single_version() -> None:
    validated = validate_rollout(
        {"changes": CHANGES, "stages": [{"percentile": 5}], "message": "together"}, Lookup()
    )
    plan = plan_from_request(validated.request, validated.version)
    plan.changes = [replace(change, change="first value") for change in plan.changes]
    state = RolloutRunState.start({"changes": CHANGES}, workflow_id="w")
    state.set_plan(plan)
    details = render_current_details(state.progress, plan, now=datetime.now(UTC))
    head = details.split("plan digest")[0]
    for change in plan.changes:
        assert f"- {change.namespace}/{change.path}: first value (`{change.version}`)" in head
    # the first config's version alone would read as the changeset's
    assert "version `" not in head and "together — unknown author" in head
