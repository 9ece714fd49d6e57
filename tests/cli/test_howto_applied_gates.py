"""docs/how-to/applied-gates.md, run literally against `tempoconf dev`: every command of its ```sh
blocks in order, from a clone's root, each giving what the guide says."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.cli.conftest import RunningDev, bash, page, shell_blocks
from tests.cli.howto import as_written, make_clone

pytestmark = pytest.mark.timeout(240)


def test_the_applied_gates_guide_runs_as_written(dev: RunningDev, tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    blocks = shell_blocks(page("how-to/applied-gates.md"))
    assert [len(block.commands) for block in blocks] == [1, 2, 2, 2]

    def sh(command: str) -> str:
        result = bash(as_written(command), cwd=clone, env=dev.env)
        assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
        return result.stdout

    def until(command: str, *wanted: str, timeout: float = 60) -> str:
        """Run `command` again until its output holds every `wanted` (a pattern)."""
        deadline = time.monotonic() + timeout
        while True:
            output = sh(command)
            if all(re.search(pattern, output, re.M) for pattern in wanted):
                return output
            assert time.monotonic() < deadline, f"{command} never showed {wanted}:\n{output}"
            time.sleep(1)

    (start,) = blocks[0].commands
    sh(start.text)

    # "Wait until `STATUS` shows the canary stage `live`"
    once = re.search(r"Wait until `([^`]+)` shows the canary stage `(\w+)`", blocks[1].intro)
    assert once, blocks[1].intro
    status_command, wanted = once.groups()
    until(status_command, rf"^\s+1\s+channel:canary\s+\S+\s+{wanted}\s")
    for report in blocks[1].commands:
        assert '"accepted":true' in sh(report.text).replace(" ", "")

    status, clients = blocks[2].commands
    # What the guide quotes of the status view, once the reports reached the gate.
    quoted = re.search(r"with `(applied [^`]+)`", blocks[2].intro.replace("\n", " "))
    assert quoted, blocks[2].intro
    output = until(
        status.text, "waiting_for_apply", re.escape(quoted.group(1)), r"canary-2: last seen"
    )
    assert "apply of c737f4eab769e099 failed: reload: exit 3" in output
    listed = sh(clients.text)
    assert clients.comment == "canary-2, with its error"
    rows = [line for line in listed.splitlines()[1:] if line.strip()]
    assert len(rows) == 1 and rows[0].startswith("canary-2 ") and "reload: exit 3" in rows[0]

    report, result = blocks[3].commands
    sh(report.text)
    assert result.comment == "the outcome: promoted"
    assert "promoted" in sh(result.text)
