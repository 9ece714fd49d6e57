"""docs/how-to/windows-and-freezes.md, run literally against a fresh `tempoconf dev` (its default
data dir, in a copy of what a clone has), each command giving what the guide says: every command
of its ```sh blocks, in order."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tempoconf.gates.windows import ChangeWindow, is_open
from tempoconf.temporal.names import rollout_workflow_id
from tests.cli.conftest import (
    ROOT,
    RunningDev,
    bash,
    page,
    shell_blocks,
    start_dev,
    until_listed_frozen,
)
from tests.cli.howto import quoted
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(400)

GUIDE = "how-to/windows-and-freezes.md"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    clone = tmp_path_factory.mktemp("readme-windows") / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(Path(sys.prefix))
    shutil.copytree(ROOT / "examples", clone / "examples")
    running = start_dev(clone.resolve(), default_data_dir=True)
    try:
        yield running
    finally:
        running.stop()


def run(dev: RunningDev, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return bash(command, cwd=dev.workdir, env=dev.env, timeout=timeout)


def test_the_windows_and_freezes_guide_runs_as_written(dev: RunningDev) -> None:
    window_block, freeze_block = shell_blocks(page(GUIDE))
    start, status, halt = window_block.commands
    assert start.text == ".venv/bin/tempoconf rollout start examples/rollout-window.json"
    request = json.loads((dev.workdir / "examples" / "rollout-window.json").read_text())
    windows = [
        ChangeWindow(days=w["days"], start=w["from"], end=w["to"], timezone=w["timezone"])
        for w in request["windows"]
    ]
    closed = not is_open(windows, datetime.now(UTC))

    started = run(dev, start.text)
    assert started.returncode == 0, started.stdout + started.stderr

    def waiting() -> str:
        shown = run(dev, status.text)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert status.notes in shown.stdout, shown.stdout
        return shown.stdout

    if closed:  # outside the Sunday maintenance hour: the guide's case
        eventually_sync(waiting, what="waiting_for_window", timeout=60, interval=0.5)
        halted = run(dev, halt.text)
        assert halted.returncode == 0, halted.stdout + halted.stderr
        result = run(dev, f"{status.text} --json")
        assert json.loads(result.stdout)["state"] in ("reverting", "halted")

    freeze, first, frozen_status, listing, end, watch = freeze_block.commands
    frozen = run(dev, freeze.text)
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    assert frozen.stdout.startswith("frozen: namespace default frozen by ")
    assert ": holiday season, until " in frozen.stdout
    started = run(dev, first.text)
    assert started.returncode == 0, started.stdout + started.stderr

    expected = quoted(frozen_status.notes)

    def frozen_shown() -> str:
        shown = run(dev, frozen_status.text)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert expected.search(shown.stdout), shown.stdout
        return shown.stdout

    shown = eventually_sync(frozen_shown, what="frozen", timeout=60, interval=0.5)
    assert "stage 1/2" in shown or "channel:canary" in shown

    # What `freeze end` looks for: the rollout frozen in Temporal's visibility too.
    asyncio.run(until_listed_frozen(dev, rollout_workflow_id("default", "myproject/first_rollout")))
    listed = run(dev, listing.text)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^default\s+active\s.*holiday season$", listed.stdout, re.M), listed.stdout

    ended = run(dev, end.text)
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert ended.stdout.startswith("ended the freeze of namespace default (holiday season, by ")
    assert re.search(r"^told [1-9]\d* waiting rollouts? to look again now", ended.stdout, re.M), (
        ended.stdout
    )
    assert "told by freeze end" in watch.notes, watch.notes

    watched = run(dev, watch.text, timeout=180)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "promoted" in watched.stdout
    assert "promoted" in watch.comment or "promoted" in watch.notes
    after = run(dev, listing.text)
    assert re.search(r"^default\s+ended\s.*: season over\s+holiday season$", after.stdout, re.M), (
        after.stdout
    )
