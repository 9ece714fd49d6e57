"""Four eyes: approvals bound to the plan's digest, from distinct identities, not the author's.

A manual stage with `approvals: {"required": N, "forbid_author": true}` advances once N distinct
identities approved it, none of them the request's author when `forbid_author`; each approval
names the digest of the plan its approver reviewed (tempoconf.rollout.digest). A plain manual stage
takes one `approve`, which may name a digest (then it must match) or not.

Who approves is the command's `by`: the admin API sets it from the name of the caller's token
(and refuses a body `by` that differs). Temporal gives workflow code no caller identity
(temporalio 1.35: `UpdateInfo` has an id and a name only), so through the Temporal CLI `by` would
be whatever `--input` says: a rollout the API started with an access policy on carries the API's
public key (`approval_key`), and counts an approve only with the API's fresh signature over its
`by`, the workflow, the command and the digest (tempoconf.rollout.signatures); the Temporal CLI
cannot make one. Without a key, `by` is taken as given. docs/contract.md, Four-eyes approvals and
Signed approvals, says what this trusts.

Pure: `RolloutRunState` calls these from its `refusal` (an update's validator) and its
`apply_approve` (a signal, or an accepted update), once `signature_refusal` passed the command.
"""

from __future__ import annotations

from datetime import datetime

from tempoconf.rollout.commands import COMMANDS, CommandName, OperatorCommand
from tempoconf.rollout.digest import digest_problem, plan_digest
from tempoconf.rollout.plan import PlannedStage, RolloutPlan
from tempoconf.rollout.progress import Approval, RolloutProgress, RolloutState
from tempoconf.rollout.signatures import signature_problem

__all__ = [
    "approval_audit",
    "approval_refusal",
    "approve_refusal",
    "approvals_line",
    "approvals_wanted",
    "current_stage",
    "record_approval",
    "same_identity",
    "signature_refusal",
]


def same_identity(one: str, other: str) -> bool:
    """Whether two identities name one person: equal ignoring case, or equal before an `@`
    (`alice` is `alice@example.com` is `alice@laptop`), so an author cannot approve their own
    rollout under the short form of their name."""

    def forms(identity: str) -> set[str]:
        folded = identity.strip().casefold()
        return {folded, folded.split("@", 1)[0]} - {""}

    return bool(forms(one) & forms(other))


def current_stage(plan: RolloutPlan | None, progress: RolloutProgress) -> PlannedStage | None:
    if plan is None or not 0 <= progress.stage_index < len(plan.stages):
        return None
    return plan.stages[progress.stage_index]


def signature_refusal(
    plan: RolloutPlan | None,
    progress: RolloutProgress,
    command: CommandName,
    argument: OperatorCommand,
    *,
    now: datetime | None,
) -> str | None:
    """Why `command` does not count for want of the API's signature; None: it needs none (an
    unsigned command, a plan without `approval_key`) or carries a valid, fresh one
    (tempoconf.rollout.signatures; `now`: the workflow's clock, required then)."""
    # halt, whatever the registry says: the way back is always open.
    if command == CommandName.HALT or not COMMANDS[command].signed:
        return None
    if plan is None or not plan.approval_key:
        return None
    if now is None:
        raise ValueError(f"a signed {command} is judged at a time: pass `now`")
    # Signed over the identity and digest as sent (not stripped): what the API signed.
    return signature_problem(
        plan.approval_key,
        signature=argument.signature,
        signed_at=argument.signed_at,
        identity=argument.by,
        workflow_id=progress.workflow_id,
        command=command.value,
        digest=argument.digest,
        now=now,
        path=progress.path or plan.path,
    )


def approve_refusal(
    plan: RolloutPlan | None, progress: RolloutProgress, command: OperatorCommand
) -> str | None:
    """Why an `approve` update is refused (its validator, once the signature passed): nothing
    waits for one, the stage is approved already, or `approval_refusal`."""
    waiting = progress.state == RolloutState.AWAITING_APPROVAL
    if waiting and progress.approved:
        paused = "; ".join(progress.pause_reasons)
        return f"cannot approve: {progress.stage_name} is already approved" + (
            f"; the rollout is paused ({paused}) and moves on at resume" if paused else ""
        )
    if not waiting:
        return (
            f"cannot approve: nothing is waiting for approval (the rollout is {progress.state}"
            + (f" at stage {progress.stage_name}" if progress.stage_name else "")
            + ")"
        )
    return approval_refusal(plan, progress, command)


def approval_audit(plan: RolloutPlan | None, command: OperatorCommand, by: str) -> dict[str, str]:
    """An approval's audit details; with the API's signature the rollout checked, so the row can
    be verified again (an unkeyed rollout checks none, so it records none)."""
    approval = {"identity": by, "digest": command.digest, "reason": command.reason}
    if plan is not None and plan.approval_key:
        approval |= {"signature": command.signature, "signed_at": command.signed_at}
    return approval


def approval_refusal(
    plan: RolloutPlan | None, progress: RolloutProgress, command: OperatorCommand
) -> str | None:
    """Why this approval of the stage awaiting approval cannot count; None: it counts.

    The digest first (a stale plan is the most important thing to tell), then who approves. (The
    API's signature, where the plan wants one, is judged before: `signature_refusal`.)"""
    given = command.digest.strip()
    # A run continued from one that predates digests carries none: its plan still has one.
    running = progress.digest or (plan_digest(plan) if plan is not None else "")
    if given and given != running:
        problem = digest_problem(given)
        if problem is not None:
            return f"cannot approve: {problem}"
        return (
            f"cannot approve: digest {given} is not the running rollout's {running} "
            "(the plan you reviewed is not the one running: review it again with "
            "`tempoconf rollout plan FILE` or `tempoconf rollout status PATH`)"
        )
    stage = current_stage(plan, progress)
    if stage is None or stage.approvals is None:
        return None
    rule = stage.approvals
    count = f"{len(progress.approvals)}/{rule.required}"
    if not given:
        return (
            f"cannot approve {stage.name}: it needs {rule.required} approval(s) bound to the plan; "
            "give the digest of the plan you reviewed (`digest`, `--digest`: `tempoconf rollout "
            "plan FILE` prints it, `tempoconf rollout status PATH` shows the running one's)"
        )
    by = command.by.strip()
    if not by:
        return (
            f"cannot approve {stage.name}: an approval needs an identity (`by`; the admin API "
            "sets it from its token's name)"
        )
    if rule.forbid_author and plan is not None:
        # The author the request names and the identity the API verified started it: neither
        # approves (a history from before `started_by` has none, and is judged as it was).
        for role, who in (("author", plan.author), ("starter", plan.started_by)):
            if who and same_identity(by, who):
                return (
                    f"cannot approve {stage.name}: {by} is the rollout's {role} ({who}); "
                    "four eyes: another identity must approve"
                )
    for earlier in progress.approvals:
        if same_identity(by, earlier.by):
            return (
                f"cannot approve {stage.name}: {earlier.by} approved it already ({count}); "
                "another identity must approve"
            )
    return None


def record_approval(
    plan: RolloutPlan | None, progress: RolloutProgress, command: OperatorCommand, *, at: str
) -> tuple[bool, str]:
    """Count an approval `approval_refusal` accepted: (whether the stage is now approved, what
    to record). A stage without `approvals` is approved by this one."""
    stage = current_stage(plan, progress)
    why = f": {command.reason}" if command.reason else ""
    digest = command.digest.strip()
    of = f" of plan {digest}" if digest else ""
    if stage is None or stage.approvals is None:
        return True, f"approved {progress.stage_name}{of}{why}"
    progress.approvals.append(
        Approval(by=command.by.strip(), digest=digest, reason=command.reason, at=at)
    )
    count = len(progress.approvals)
    required = stage.approvals.required
    return count >= required, f"approval {count}/{required} of {stage.name}{of}{why}"


def approvals_wanted(
    *, required: int, approved_by: list[str], author: str, forbid_author: bool
) -> str:
    """Who may still approve a stage with `approvals`, as `approval_refusal` decides:
    `approvals 1/2 (bob): 1 more, not the author (alice@example.com), not bob (approved already)`."""
    count = f"approvals {len(approved_by)}/{required}" + (
        f" ({', '.join(approved_by)})" if approved_by else ""
    )
    left = required - len(approved_by)
    if left <= 0:
        return count
    excluded = []
    if forbid_author:
        excluded.append(f"not the author ({author})" if author else "not the author")
    if approved_by:
        excluded.append(f"not {', '.join(approved_by)} (approved already)")
    return f"{count}: {left} more, " + (", ".join(excluded) if excluded else "from anyone")


def approvals_line(plan: RolloutPlan | None, progress: RolloutProgress) -> str | None:
    """`approvals 1/2 (bob): 1 more, not the author (alice@example.com), not bob (approved
    already)` for the stage awaiting approvals; None for any other stage."""
    stage = current_stage(plan, progress)
    if stage is None or stage.approvals is None:
        return None
    return approvals_wanted(
        required=stage.approvals.required,
        approved_by=[approval.by for approval in progress.approvals],
        author=plan.author if plan is not None else "",
        forbid_author=stage.approvals.forbid_author,
    )
