"""docs/how-to/four-eyes.md, run literally: a stack with named admin tokens, the plan and
its digest, the author's approval refused, two approvals by others, status and history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.conftest import bash, page, shell_blocks, start_dev
from tests.cli.howto import make_clone
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(240)

DEV = re.compile(r"^TEMPOCONF_ADMIN_TOKENS='([^']+)' \.venv/bin/tempoconf dev$")


def test_the_four_eyes_section_gives_what_it_says(tmp_path: Path) -> None:
    dev_block, steps = shell_blocks(page("how-to/four-eyes.md"))
    [dev_command] = dev_block.commands
    tokens = DEV.match(dev_command.text)
    assert tokens, dev_command.text
    clone = make_clone(tmp_path)
    # `tempoconf dev` never ends by itself: started here with the guide's variable, on free ports
    dev = start_dev(clone, variables={"TEMPOCONF_ADMIN_TOKENS": tokens.group(1)})
    try:
        env = dev.env
        outputs = []
        waited = False
        for command in steps.commands:
            text = command.text
            if "awaiting_approval" in command.notes:
                # the guide: once status says awaiting_approval
                status = re.search(r"`(\.venv/bin/tempoconf rollout status [^`]+)`", command.notes)
                assert status and " rollout approve " in text, command.notes
                waited = True

                def awaiting(status_command: str = status.group(1)) -> bool:
                    return "awaiting_approval" in bash(status_command, cwd=clone, env=env).stdout

                eventually_sync(awaiting, what="the rollout to await approval", timeout=60)
            outputs.append(bash(text, cwd=clone, env=env))
        assert waited, "the guide says when to approve"
        plan, start, alice, bob, status, carol, history = outputs
        digest = re.search(r"--digest (sha256:[0-9a-f]{32})", steps.commands[2].text)
        assert digest is not None
        assert plan.returncode == 0 and f"digest     {digest.group(1)}" in plan.stdout, plan.stdout
        assert start.returncode == 0, start.stdout + start.stderr
        assert alice.returncode == 1, alice.stdout + alice.stderr
        assert "alice is the rollout's author (alice@example.com)" in alice.stdout, alice.stdout
        assert bob.returncode == 0, bob.stdout + bob.stderr
        assert "approval 1/2 of channel:canary" in bob.stdout, bob.stdout
        assert "approvals 1/2 (bob)" in status.stdout, status.stdout
        assert f"digest     {digest.group(1)}" in status.stdout, status.stdout
        assert carol.returncode == 0, carol.stdout + carol.stderr
        promoted = (
            "state   promoted" in carol.stdout
            or "promoted"
            in bash(
                ".venv/bin/tempoconf rollout status myproject/payment_limits", cwd=clone, env=env
            ).stdout
        )
        assert promoted, carol.stdout
        assert history.returncode == 0
        rows = [line for line in history.stdout.splitlines() if "rollout.command" in line]
        assert len(rows) == 2, history.stdout
        assert "bob" in rows[0] and "approval 1/2" in rows[0] and digest.group(1) in rows[0]
        assert "carol" in rows[1] and "approval 2/2" in rows[1]
        assert "limit agreed with finance" in rows[0]
    finally:
        dev.stop()
