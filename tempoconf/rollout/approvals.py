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
`by` and the emails the API vouches for, the workflow's run, the stage, the command, the digest
and a nonce it takes once (tempoconf.rollout.signatures; a run started before, over `by`, the
workflow, the command and the digest); the Temporal CLI cannot make one. Without a key, `by` is
taken as given. Who is who (an author normalised, identities in their spaces, emails) is
tempoconf.rollout.identities. docs/contract.md, Four-eyes approvals and Signed approvals, says
what this trusts.

Pure: `RolloutRunState` calls these from its `refusal` (an update's validator) and its
`apply_approve` (a signal, or an accepted update), once `signature_refusal` passed the command.
"""

from __future__ import annotations

from collections.abc import Container
from datetime import datetime

from tempoconf.rollout.commands import COMMANDS, CommandName, OperatorCommand
from tempoconf.rollout.digest import digest_problem, plan_digest
from tempoconf.rollout.identities import identity_subject, person_forms, person_keys
from tempoconf.rollout.plan import PlannedStage, RolloutPlan
from tempoconf.rollout.progress import Approval, RolloutProgress, RolloutState
from tempoconf.rollout.signatures import Binding, bound_signature_problem, signature_problem

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


def stage_label(progress: RolloutProgress) -> str:
    """`stage 2/3 50%`: the current stage as people read it."""
    if progress.stage_index < 0 or progress.stage_name is None:
        return "no stage yet"
    return f"stage {progress.stage_index + 1}/{progress.stage_count} {progress.stage_name}"


def signature_refusal(
    plan: RolloutPlan | None,
    progress: RolloutProgress,
    command: CommandName,
    argument: OperatorCommand,
    *,
    now: datetime | None,
    used_nonces: Container[str] = (),
) -> str | None:
    """Why `command` does not count for want of the API's signature; None: it needs none (an
    unsigned command, a plan without `approval_key`) or carries a valid, fresh one
    (tempoconf.rollout.signatures; `now`: the workflow's clock, required then). A run whose
    progress names an `approval_run` takes only a signature bound to that run, its current
    stage and a nonce not in `used_nonces`; a run started before, the older form."""
    # halt, whatever the registry says: the way back is always open.
    if command == CommandName.HALT or not COMMANDS[command].signed:
        return None
    if plan is None or not plan.approval_key:
        return None
    if now is None:
        raise ValueError(f"a signed {command} is judged at a time: pass `now`")
    # Signed over the identity and digest as sent (not stripped): what the API signed.
    if progress.approval_run:
        return bound_signature_problem(
            plan.approval_key,
            signature=argument.signature,
            signed_at=argument.signed_at,
            identity=argument.by,
            emails=argument.emails,
            workflow_id=progress.workflow_id,
            command=command.value,
            digest=argument.digest,
            nonce=argument.nonce,
            rollout_run=argument.rollout_run,
            stage_index=argument.stage_index,
            binding=Binding(
                rollout_run=progress.approval_run,
                stage_index=progress.stage_index,
                stage=stage_label(progress),
                used_nonces=used_nonces,
            ),
            now=now,
            path=progress.path or plan.path,
        )
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
    plan: RolloutPlan | None,
    progress: RolloutProgress,
    command: OperatorCommand,
    *,
    normalised: bool = False,
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
    return approval_refusal(plan, progress, command, normalised=normalised)


def approval_audit(
    plan: RolloutPlan | None, progress: RolloutProgress, command: OperatorCommand, by: str
) -> dict[str, object]:
    """An approval's audit details: who, the plan, why, and the stage it was for; with the API's
    signature the rollout checked (and, bound, the run, nonce and emails it names), so the row
    can be verified again (an unkeyed rollout checks none, so it records none)."""
    approval: dict[str, object] = {
        "identity": by,
        "digest": command.digest,
        "reason": command.reason,
    }
    if progress.approval_run:
        approval |= {"stage": progress.stage_name or "", "stage_index": progress.stage_index}
    if command.emails:
        approval["emails"] = list(command.emails)
    if plan is not None and plan.approval_key:
        approval |= {"signature": command.signature, "signed_at": command.signed_at}
        if progress.approval_run:
            approval |= {"rollout_run": command.rollout_run, "nonce": command.nonce}
    return approval


def _author_or_starter(
    plan: RolloutPlan, command: OperatorCommand, by: str
) -> tuple[str, str, str] | None:
    """(role, who, how) when the approver is the request's author or its starter, by identity
    or by an email (how: "" or `by the email E`; tempoconf.rollout.identities). The author is free
    text: matched with the approver's subject (its identity without the space) and emails; the
    starter is an identity in its space, with the emails the API vouched for at the start."""
    subject = person_forms(identity_subject(by))
    candidates = (
        ("author", plan.author, person_forms(plan.author) if plan.author else set()),
        (
            "starter",
            plan.started_by,
            person_keys(plan.started_by, plan.started_by_emails) if plan.started_by else set(),
        ),
    )
    for role, who, keys in candidates:
        own = subject if role == "author" else person_forms(by)
        if own & keys:
            return role, who, ""
        for email in command.emails:
            if person_forms(email) & keys:
                return role, who, f"by the email {email}"
    return None


def approval_refusal(
    plan: RolloutPlan | None,
    progress: RolloutProgress,
    command: OperatorCommand,
    *,
    normalised: bool = False,
) -> str | None:
    """Why this approval of the stage awaiting approval cannot count; None: it counts.
    `normalised`: a run started since patch `four-eyes-normalised-identities` compares people
    as tempoconf.rollout.identities says (authors normalised, identities in their spaces, the
    API's emails); a run started before, as `same_identity` did then.

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
    if normalised:
        same = _author_or_starter(plan, command, by) if plan is not None else None
        if rule.forbid_author and same is not None:
            role, who, how = same
            return (
                f"cannot approve {stage.name}: {by} is the rollout's {role} ({who})"
                + (f", {how}" if how else "")
                + "; four eyes: another identity must approve"
            )
        approver = person_keys(by, command.emails)
        for earlier in progress.approvals:
            if approver & person_keys(earlier.by, earlier.emails):
                # by identity, or by an email the API vouched for with both approvals
                alike = by.casefold() == earlier.by.casefold()
                whom = earlier.by if alike else f"{by} is {earlier.by}, who"
                return (
                    f"cannot approve {stage.name}: {whom} approved it already ({count}); "
                    "another identity must approve"
                )
        return None
    # A run started before patch `four-eyes-normalised-identities`: as it was judged then (an
    # identity's space, new since, set aside: `oidc:bob` is the `bob` such a run knew).
    if rule.forbid_author and plan is not None:
        # The author the request names and the identity the API verified started it: neither
        # approves (a history from before `started_by` has none, and is judged as it was).
        for role, who in (("author", plan.author), ("starter", plan.started_by)):
            if who and same_identity(identity_subject(by), identity_subject(who)):
                return (
                    f"cannot approve {stage.name}: {by} is the rollout's {role} ({who}); "
                    "four eyes: another identity must approve"
                )
    for earlier in progress.approvals:
        if same_identity(identity_subject(by), identity_subject(earlier.by)):
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
        Approval(
            by=command.by.strip(),
            digest=digest,
            reason=command.reason,
            at=at,
            emails=list(command.emails),
        )
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
