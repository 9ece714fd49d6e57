"""The approve hints of `rollout status` and of the Web UI's current details on a four-eyes stage:
they name the plan's digest (such a stage refuses an approval without it) and who may still
approve (not the author, not whoever approved already), as tempoconf.rollout.approvals decides."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from tempoconf.canonical import version_id
from tempoconf.cli.status import format_view
from tempoconf.operations.view import RolloutSnapshot
from tempoconf.rollout.approvals import approvals_wanted
from tempoconf.rollout.commands import CommandName, OperatorCommand
from tempoconf.rollout.details import render_current_details
from tempoconf.rollout.plan import RolloutPlan, plan_from_request
from tempoconf.rollout.progress import RolloutState
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.rollout.run_state import RolloutRunState
from tempoconf.settings import Settings

NOW = datetime(2026, 12, 4, 13, 55, 4, tzinfo=UTC)
AT = NOW.isoformat()
WORKFLOW_ID = "rollout:default/myproject/payment_limits"
FOUR_EYES: dict[str, Any] = {
    "path": "myproject/payment_limits",
    "value": {"max_amount": 500},
    "stages": [
        {"channel": "canary", "cooldown": "0s", "manual": True, "approvals": {"required": 2}},
    ],
    "author": "alice@example.com",
    "message": "raise the payment limit to 500",
}


def awaiting_approval(request: dict[str, Any]) -> RolloutRunState:
    """A run of `request` whose first stage awaits approval, as the workflow leaves it."""
    plan: RolloutPlan = plan_from_request(
        parse_rollout_request(request), version_id(request["value"])
    )
    state = RolloutRunState.start(request, workflow_id=WORKFLOW_ID)
    state.set_plan(plan)
    state.enter_stage(plan.stages[0])
    state.transition(RolloutState.AWAITING_APPROVAL, "workflow", "waiting for approve", at=AT)
    return state


def status_view(state: RolloutRunState) -> str:
    snapshot = RolloutSnapshot(
        workflow_id=WORKFLOW_ID,
        run_id="run-1",
        execution="Running",
        running=True,
        # as the `status` query answers it: JSON
        progress=json.loads(json.dumps(asdict(state.progress))),
    )
    return format_view(
        snapshot,
        namespace="default",
        path="myproject/payment_limits",
        settings=Settings(),
        now=NOW,
    )


def approve(state: RolloutRunState, by: str, digest: str) -> str:
    effect = state.apply(CommandName.APPROVE, OperatorCommand(by=by, digest=digest), at=AT)
    assert effect.accepted, effect
    return effect.done


def test_the_status_hints_name_the_digest_and_who_may_still_approve() -> None:
    state = awaiting_approval(FOUR_EYES)
    digest = state.progress.digest
    view = status_view(state)
    tempoconf = re.search(r"approve  (\S+ rollout approve .*)$", view, re.MULTILINE)
    assert tempoconf is not None, view
    words = shlex.split(tempoconf.group(1))
    # The hint as printed is an approval the stage accepts: it names the running plan's digest.
    assert words[words.index("--digest") + 1] == digest, view
    assert "# approvals 0/2: 2 more, not the author (alice@example.com)" in view, view
    assert state.refusal(CommandName.APPROVE, OperatorCommand(by="bob", digest=digest)) is None

    approve(state, "bob", digest)
    view = status_view(state)
    assert (
        "# approvals 1/2 (bob): 1 more, not the author (alice@example.com), not bob "
        "(approved already)" in view
    ), view
    # The Temporal CLI's approve carries the digest and a `by` to fill in.
    temporal = re.search(r"--name approve --input '(.*)'$", view, re.MULTILINE)
    assert temporal is not None, view
    assert json.loads(temporal.group(1)) == {"by": "...", "digest": digest}
    # Those the hint rules out are the ones the rollout refuses.
    for refused in ("alice", "bob"):
        assert state.refusal(CommandName.APPROVE, OperatorCommand(by=refused, digest=digest))
    assert state.refusal(CommandName.APPROVE, OperatorCommand(by="carol", digest=digest)) is None


def test_the_web_ui_approve_command_names_the_digest_and_who_may_still_approve() -> None:
    state = awaiting_approval(FOUR_EYES)
    approve(state, "bob", state.progress.digest)
    details = render_current_details(state.progress, state.plan, now=NOW)
    line = next(line for line in details.splitlines() if line.startswith("- approve"))
    assert line.startswith(
        "- approve (approvals 1/2 (bob): 1 more, not the author (alice@example.com), not bob "
        "(approved already)): `"
    ), line
    command = shlex.split(line.split("`")[1])
    assert json.loads(command[command.index("--input") + 1]) == {
        "by": "...",
        "digest": state.progress.digest,
    }


def test_a_plain_manual_stage_hint_carries_the_digest_without_a_name_to_fill_in() -> None:
    plain = {**FOUR_EYES, "stages": [{"channel": "canary", "cooldown": "0s", "manual": True}]}
    state = awaiting_approval(plain)
    view = status_view(state)
    assert f"--digest {state.progress.digest} --reason '...'" in view, view
    assert "# approvals" not in view, view
    temporal = re.search(r"--name approve --input '(.*)'$", view, re.MULTILINE)
    assert temporal is not None, view
    assert json.loads(temporal.group(1)) == {"digest": state.progress.digest}


def test_who_may_still_approve() -> None:
    assert (
        approvals_wanted(required=2, approved_by=[], author="alice", forbid_author=False)
        == "approvals 0/2: 2 more, from anyone"
    )
    assert (
        approvals_wanted(required=3, approved_by=["bob"], author="alice", forbid_author=False)
        == "approvals 1/3 (bob): 2 more, not bob (approved already)"
    )
    assert (
        approvals_wanted(required=1, approved_by=["bob"], author="alice", forbid_author=True)
        == "approvals 1/1 (bob)"
    )


def test_a_rollout_with_an_approval_key_hints_approving_through_the_api_only() -> None:
    key = "ed25519:A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="
    state = awaiting_approval({**FOUR_EYES, "approval_key": key})
    digest = state.progress.digest
    view = status_view(state)
    # tempoconf's approve (through the API when it is configured), never the Temporal CLI's
    assert f"rollout approve myproject/payment_limits --digest {digest}" in view, view
    assert "--name approve" not in view, view
    assert "approvals only through tempoconf's API (signed): not through the Temporal CLI" in view
    assert "--name halt" in view, view
    details = render_current_details(state.progress, state.plan, now=NOW)
    line = next(line for line in details.splitlines() if line.startswith("- approve"))
    assert "through tempoconf's API only (this rollout takes signed approvals)" in line, line
    assert f"`tempoconf rollout approve myproject/payment_limits --digest {digest}`" in line
    assert "--name approve" not in details and "--name halt" in details, details
