"""The plan digest (tempoconf.rollout.digest, docs/contract.md Plan digest): pinned by a vector computed
from the definition, every field of what the rollout does in it, worker settings out of it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

import pytest

from tempoconf.canonical import version_id
from tempoconf.rollout.changesets import changeset_key
from tempoconf.rollout.digest import (
    EXCLUDED_PLAN_FIELDS,
    digest_problem,
    plan_digest,
    plan_document,
)
from tempoconf.rollout.plan import RolloutPlan, plan_from_request
from tempoconf.rollout.request import parse_rollout_request

REQUEST: dict[str, Any] = {
    "path": "myproject/server_config",
    "value": {"is_debug": False, "max_connections": 2000},
    "stages": [
        {"channel": "canary", "cooldown": "1m"},
        {"percentile": 50, "manual": True, "approvals": {"required": 2}},
    ],
    "author": "alice@example.com",
    "message": "raise max_connections",
}
# The canonical JSON the definition gives for REQUEST, written out by hand: the plan's fields,
# those at their dataclass default left out (cooldown 300 s, expiration 3600 s, manual false,
# forbid_author true, no labels, no checks, no webhooks, no commit).
CANONICAL = (
    '{"author":"alice@example.com","message":"raise max_connections","namespace":"default",'
    '"path":"myproject/server_config","stages":['
    '{"channel":"canary","cooldown_seconds":60.0,"index":0,"name":"channel:canary"},'
    '{"approvals":{"required":2},"index":1,"manual":true,"name":"50%","percentile":50.0}],'
    f'"version":"{version_id(REQUEST["value"])}"'
    "}"
)


def plan_of(raw: dict[str, Any]) -> RolloutPlan:
    request = parse_rollout_request(raw)
    return plan_from_request(request, version_id(request.value))


def test_the_vector_is_the_definition() -> None:
    expected = "sha256:" + hashlib.sha256(CANONICAL.encode()).hexdigest()[:32]
    assert plan_digest(plan_of(REQUEST)) == expected
    # pinned: a change of the definition (or of what the plan holds) shows here first
    assert expected == "sha256:a7f499e32a5a437f92adf3c191242352"
    assert digest_problem(expected) is None


@pytest.mark.parametrize(
    "edit",
    [
        {"value": {"is_debug": False, "max_connections": 2001}},
        {"stages": [{"channel": "canary", "cooldown": "2m"}, REQUEST["stages"][1]]},
        {"stages": [{"channel": "canary", "cooldown": "1m", "expiration": "2h"}, REQUEST["stages"][1]]},
        {"stages": [REQUEST["stages"][0], {"percentile": 60, "manual": True, "approvals": {"required": 2}}]},
        {"stages": [REQUEST["stages"][0], {"percentile": 50, "manual": True, "approvals": {"required": 1}}]},
        {"stages": [REQUEST["stages"][0], {"percentile": 50, "manual": True,
                    "approvals": {"required": 2, "forbid_author": False}}]},
        {"stages": [REQUEST["stages"][0], {"percentile": 50, "manual": True}]},
        {"stages": [{"channel": "canary", "cooldown": "1m", "manual": True}, REQUEST["stages"][1]]},
        {"stages": [{"channel": "canary", "cooldown": "1m", "labels": {"region": "eu"}}, REQUEST["stages"][1]]},
        {"health": [{"kind": "reports", "max_error_ratio": 0.05}]},
        {"webhooks": ["https://hooks.example.com/x"]},
        {"strategy": {"linear": {"step": 60, "every": "1m"}}},  # 60%, 100% after 50%
        {"author": "bob@example.com"},
        {"commit": "3f2a9c1"},
        {"message": "another reason"},
        {"namespace": "staging"},
    ],
)  # fmt: skip
def test_every_part_of_what_the_rollout_does_changes_the_digest(edit: dict[str, Any]) -> None:
    assert plan_digest(plan_of({**REQUEST, **edit})) != plan_digest(plan_of(REQUEST))


def test_worker_settings_and_the_change_text_do_not_change_it() -> None:
    plan = plan_of(REQUEST)
    prepared = replace(
        plan,
        change="max_connections 1000 → 2000",
        temporal_cli=".venv/bin/temporal",
        temporal_address="127.0.0.1:7233",
        temporal_namespace="prod",
        continue_as_new_after_events=500,
        paths_attribute=True,
        started_by="alice",  # who started it: the plan bob reviewed is the plan alice starts
        started_by_emails=["alice@example.com"],  # and the emails the API vouches for
        # how approvals must reach it: a plan reviewed without the API keeps its digest there
        approval_key="ed25519:A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=",
    )
    assert plan_digest(prepared) == plan_digest(plan)
    assert EXCLUDED_PLAN_FIELDS == {
        "change", "temporal_cli", "temporal_address", "temporal_namespace",
        "continue_as_new_after_events", "paths_attribute", "started_by", "started_by_emails",
        "approval_key",
    }  # fmt: skip


CHANGESET: dict[str, Any] = {
    "changes": [
        {"path": "myproject/frontend", "value": {"api": "v2", "timeout_ms": 800}},
        {"path": "myproject/backend", "value": {"api": "v2", "accepts": ["v1", "v2"]}},
    ],
    "stages": [{"percentile": 50, "manual": True, "approvals": {"required": 2}}],
    "author": "alice@example.com",
}


def changeset_plan(raw: dict[str, Any]) -> RolloutPlan:
    request = parse_rollout_request(raw)
    return plan_from_request(request, version_id(raw["changes"][0]["value"]))


def test_a_changesets_digest_names_every_config_its_version_and_the_bucketing_key() -> None:
    """Issue 25: the plan `rollout plan` digests is the one prepare returns (one function), and
    what each config changes, told against its stable, is for people: not in the digest."""
    plan = changeset_plan(CHANGESET)
    document = plan_document(plan)
    assert document["changes"] == [
        {"namespace": "default", "path": "myproject/frontend",
         "version": version_id(CHANGESET["changes"][0]["value"])},
        {"namespace": "default", "path": "myproject/backend",
         "version": version_id(CHANGESET["changes"][1]["value"])},
    ]  # fmt: skip
    assert document["bucket_key"] == changeset_key(
        [("default", "myproject/frontend"), ("default", "myproject/backend")]
    )
    told = replace(
        plan,
        changes=[replace(change, change='api "v1" → "v2"') for change in plan.changes],
        change="2 configs: ...",
    )
    assert plan_digest(told) == plan_digest(plan)
    # A run from before issue 25 keeps the digest it had, the sentences in it (workflow.patched).
    assert plan_digest(told, change_texts=True) != plan_digest(plan)
    assert plan_digest(plan, change_texts=True) == plan_digest(plan)
    second = {**CHANGESET["changes"][1], "value": {"api": "v3"}}
    other = changeset_plan({**CHANGESET, "changes": [CHANGESET["changes"][0], second]})
    assert plan_digest(other) != plan_digest(plan)
    renamed = {**CHANGESET["changes"][1], "path": "myproject/backend2"}
    other = changeset_plan({**CHANGESET, "changes": [CHANGESET["changes"][0], renamed]})
    assert plan_digest(other) != plan_digest(plan)


def test_fields_added_to_the_plan_later_count_once_they_are_used() -> None:
    """What another feature adds to RolloutPlan counts without a change to the digest; at its
    default it changes no existing digest (a reviewed digest stays valid across an upgrade)."""

    @dataclass
    class LaterPlan(RolloutPlan):
        blackout_dates: list[str] | None = None

    plan = plan_of(REQUEST)
    later = LaterPlan(**{name: getattr(plan, name) for name in plan.__dataclass_fields__})
    assert plan_digest(later) == plan_digest(plan)
    assert plan_digest(replace(later, blackout_dates=["2026-12-24"])) != plan_digest(plan)


def test_the_same_plan_after_the_round_trip_through_temporal_has_the_same_digest() -> None:
    from temporalio.converter import DataConverter

    converter = DataConverter.default.payload_converter
    plan = plan_of({**REQUEST, "health": [{"kind": "reports", "max_error_ratio": 0.05}]})
    [payload] = converter.to_payloads([plan])
    [back] = converter.from_payloads([payload], [RolloutPlan])
    assert plan_digest(back) == plan_digest(plan)


@pytest.mark.parametrize(
    "text", ["", "sha256:", "sha256:abc", "md5:" + "0" * 32, "sha256:" + "G" * 32, "0" * 39]
)
def test_a_malformed_digest_is_named(text: str) -> None:
    problem = digest_problem(text)
    assert problem is not None and "is not a plan digest" in problem


def test_the_contract_documents_this_vector() -> None:
    from pathlib import Path

    contract = (Path(__file__).parents[2] / "docs" / "contract.md").read_text(encoding="utf-8")
    assert f"`{CANONICAL}`" in contract
    assert "to `sha256:a7f499e32a5a437f92adf3c191242352`" in contract
    assert all(f"`{name}`" in contract for name in EXCLUDED_PLAN_FIELDS)
