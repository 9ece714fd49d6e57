"""docs/how-to/configs-as-code.md, run as written in a clone against a fresh `tempoconf dev`:
every command of its ```sh blocks, in order, exits as the guide says and prints what its comment
says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import page, shell_blocks, start_dev
from tests.cli.howto import make_clone, quoted, run
from tests.cli.test_tree_apply import GIT_IDENTITY

pytestmark = pytest.mark.timeout(300)


def test_the_configs_as_code_guide_runs_as_written(tmp_path: Path) -> None:
    commands = [
        command
        for block in shell_blocks(page("how-to/configs-as-code.md"))
        for command in block.commands
    ]
    assert len(commands) == 15, [command.text for command in commands]
    clone = make_clone(tmp_path)
    dev = start_dev(clone)
    dev.env.update(GIT_IDENTITY)
    try:
        for command in commands:
            done = run(dev, command.text)
            # `tempoconf diff` exits 2 when there is something to apply (the guide's table)
            diff = command.text.startswith(".venv/bin/tempoconf diff ") and "||" not in command.text
            expected = 2 if diff else 0
            output = done.stdout + done.stderr
            assert done.returncode == expected, f"{command.text}\n{output}"
            if command.comment:
                assert quoted(command.comment).search(done.stdout), f"{command.text}\n{output}"
    finally:
        dev.stop()
    assert (clone / "diff.md").read_text().startswith("### configs at ")
