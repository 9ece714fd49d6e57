"""What a start must give the workflow: exactly one input, the rollout request (a continued run
also gets the state the last one carried), under a workflow id the store can keep."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tempoconf.storable import text_problem

__all__ = ["input_problem", "workflow_id_problem"]

# What a start with the wrong number of inputs is told (the Temporal CLI's `--input` is one input).
EXPECTED_INPUT = (
    "ConfigRollout takes exactly one input, the rollout request: a JSON object such as "
    '\'{"path": "myproject/server_config", "value": {"max_connections": 2000}, '
    '"stages": [{"channel": "canary"}]}\' (`temporal workflow start --type ConfigRollout '
    "--task-queue tempoconf --input '{...}'` or `--input-file examples/rollout.json`; "
    "`tempoconf schema request` prints its JSON Schema)"
)


def input_problem(count: int, *, continued: bool) -> str | None:
    """Why `count` inputs are not a rollout's (None: they are). A second input is the state a
    run carries to the next by continue-as-new, and comes from nowhere else."""
    if count == 1 or (count == 2 and continued):
        return None
    if count == 0:
        return f"the workflow was started without an input. {EXPECTED_INPUT}"
    return f"the workflow was started with {count} inputs. {EXPECTED_INPUT}"


def workflow_id_problem(workflow_id: str) -> str | None:
    """Why the store cannot keep this rollout's own workflow id (None: it can). The rollout writes
    it into its lock and audit rows; the API refuses such an id, a start with the Temporal CLI or
    an SDK is refused here, before anything is stored."""
    problem = text_problem(workflow_id)
    if problem is None:
        return None
    return (
        f"the workflow id {ascii(workflow_id)} {problem} (start the rollout under an id the "
        "store can keep: by default rollout:{namespace}/{path})"
    )
