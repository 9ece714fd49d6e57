"""The command that regenerates the replay histories (docs/how-to/upgrades.md), run as written
from a copy of the tests (the committed histories stay as they are): it saves a history of every
scenario on today's code, and each of them replays. A scenario the workflow no longer goes through fails here first."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from tempoconf.workflows.rollout import ConfigRollout
from tests.workflows.histories.generate import SCENARIOS, scenario_of, workflow_id_of

ROOT = Path(__file__).resolve().parents[2]


def documented_command() -> str:
    text = (ROOT / "docs" / "how-to" / "upgrades.md").read_text(encoding="utf-8")
    commands = re.findall(r"`([^`]*-m tests\.workflows\.histories\.generate[^`]*)`", text)
    assert len(commands) == 1, commands
    return str(commands[0])


async def test_the_documented_command_regenerates_a_replayable_history_of_every_scenario(
    tmp_path: Path,
) -> None:
    shutil.copytree(
        ROOT / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.json")
    )
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    generated = subprocess.run(
        ["bash", "-c", documented_command()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    histories = tmp_path / "tests" / "workflows" / "histories"
    assert f"{len(SCENARIOS)} scenario(s) saved under {histories}" in generated.stdout

    saved = sorted(histories.glob("*.json"))
    assert {scenario_of(file) for file in saved} == set(SCENARIOS)
    replayer = Replayer(workflows=[ConfigRollout])
    for file in saved:
        history = WorkflowHistory.from_json(
            workflow_id_of(scenario_of(file)), file.read_text(encoding="utf-8")
        )
        await replayer.replay_workflow(history)
