"""Every saved history (tests/workflows/histories/, one or more runs per scenario) replays on
today's ConfigRollout: a change to the workflow that a running rollout could not replay, and so
would break it mid-stage, fails here. In process, no server: the Replayer runs the workflow code
against the recorded events, as a worker does when it picks up a running rollout.

Regenerate the histories with `python -m tests.workflows.histories.generate` (see its docstring)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from tempoconf.cli.worker import worker_options
from tempoconf.temporal.payloads import DATA_CONVERTER
from tempoconf.workflows.rollout import ConfigRollout
from tests.workflows.histories.generate import HISTORIES, SCENARIOS, scenario_of, workflow_id_of

SAVED = sorted(HISTORIES.glob("*.json"))
REGENERATE = "python -m tests.workflows.histories.generate"


def test_every_scenario_has_a_saved_history_and_every_history_a_scenario() -> None:
    saved = {scenario_of(file) for file in SAVED}
    missing = sorted(set(SCENARIOS) - saved)
    assert not missing, (
        f"no saved history of scenario(s) {missing}: run `{REGENERATE} {' '.join(missing)}`"
    )
    unknown = sorted(saved - set(SCENARIOS))
    assert not unknown, f"histories of scenario(s) the generator no longer has: {unknown}"


RUNNERS = {
    # What the worker (tempoconf.cli.worker.build_worker) runs: outside the SDK's sandbox.
    "worker": worker_options()["workflow_runner"],
    # Inside it: the sandbox fails the workflow task on a non-deterministic call (the clock,
    # randomness, I/O) or a restricted import, on every path the saved histories take.
    "sandbox": SandboxedWorkflowRunner(),
}


@pytest.mark.parametrize("runner", RUNNERS.values(), ids=list(RUNNERS))
@pytest.mark.parametrize("file", SAVED, ids=[file.stem for file in SAVED])
async def test_saved_history_replays_on_the_current_workflow_code(
    file: Path, runner: WorkflowRunner
) -> None:
    history = WorkflowHistory.from_json(
        workflow_id_of(scenario_of(file)), file.read_text(encoding="utf-8")
    )
    # The converter the worker runs with (tempoconf.temporal.payloads), as a running rollout replays.
    replayer = Replayer(
        workflows=[ConfigRollout], data_converter=DATA_CONVERTER, workflow_runner=runner
    )
    # Raises (NondeterminismError, RestrictedWorkflowAccessError, ...) when today's code does not
    # do what the history recorded, or does what the sandbox forbids.
    await replayer.replay_workflow(history)
