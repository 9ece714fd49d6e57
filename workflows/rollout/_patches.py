"""Every `workflow.patched` id of the rollout, in one place: a history recorded before a change
replays the old way where its id is absent. An id is never renamed nor reused, and each call
stays at its place in the run's sequence of commands (tests/workflows/test_replay.py)."""

# workflow.patched: a failed prepare ends its audit trail with `rollout.failed` (written with the
# release of what it took), instead of a revert that wrote nothing when it had taken nothing.
PREPARE_FAILURE_AUDITED = "prepare-failure-audited"
# workflow.patched (issue 25): a changeset's digest leaves out each config's change sentence, so
# it is the one `rollout plan` prints; a run from before keeps the digest it showed (and that
# its approvals named).
CHANGESET_PLAN_DIGEST = "changeset-plan-digest"
# workflow.patched (issue 25): the KeywordList `TempoconfPaths` (every config's path) is upserted
# after prepare, where the prepare step found it registered (RolloutPlan.paths_attribute).
SEARCH_ATTRIBUTE_PATHS = "search-attribute-paths"

# workflow.patched: before each stage's publish and before the promote, the rollout waits while
# it is outside every change window (`windows`) or its namespace is frozen (tempoconf.gates.freezes).
CHANGE_GATES = "change-windows-and-freezes"

# workflow.patched: a reverted or halted rollout fails (RolloutReverted, RolloutHalted) instead of
# completing, and a cancelled one keeps its result in the memo before it ends Canceled
# (tempoconf.rollout.outcomes). Promoted and bypassed rollouts complete as before.
OUTCOME_STATUSES = "outcomes-as-temporal-statuses"

# workflow.patched (issue 41): a signed approval names the rollout's run (its first run's id,
# `approval_run` in the status), the stage it approves and a nonce the rollout takes once
# (tempoconf.rollout.signatures.bound_message). A run started before takes the older form.
APPROVALS_BOUND = "approvals-bound-to-run-and-stage"
# workflow.patched (issue 41): four eyes compare people, not text: authors normalised, identities
# in their spaces (`oidc:bob` is not the token `bob`), and the emails the API vouches for
# (tempoconf.rollout.identities). A run started before judges approvals as it did.
FOUR_EYES_IDENTITIES = "four-eyes-normalised-identities"
