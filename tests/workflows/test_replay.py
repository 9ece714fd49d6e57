"""Every saved history (tests/workflows/histories/, one or more runs per scenario) replays on
today's ConfigRollout: a change to the workflow that a running rollout could not replay, and so
would break it mid-stage, fails here. In process, no server: the Replayer runs the workflow code
against the recorded events, as a worker does when it picks up a running rollout.

Regenerate the histories with `python -m tests.workflows.histories.generate` (see its docstring)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from tempoconf.payloads import DATA_CONVERTER
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


@pytest.mark.parametrize("file", SAVED, ids=[file.stem for file in SAVED])
async def test_saved_history_replays_on_the_current_workflow_code(file: Path) -> None:
    history = WorkflowHistory.from_json(
        workflow_id_of(scenario_of(file)), file.read_text(encoding="utf-8")
    )
    # What the worker (tempoconf.cli.worker.build_worker) runs: ConfigRollout in the default
    # sandbox, with its client's default data converter and no interceptors.
    # The converter the worker runs with (tempoconf.payloads), as a running rollout replays.
    replayer = Replayer(workflows=[ConfigRollout], data_converter=DATA_CONVERTER)
    # Raises (NondeterminismError, ...) when today's code does not do what the history recorded.
    await replayer.replay_workflow(history)
