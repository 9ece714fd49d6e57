"""The README's walkthrough, run literally right after the demo (`make run`): every command of its
```sh blocks in order, from a copy of what a clone has, each giving what the README says."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tempoconf.canonical import version_id
from tests.cli.conftest import (
    README,
    ROOT,
    RunningDev,
    ShellCommand,
    bash,
    cli_env,
    shell_blocks,
    start_dev,
)

pytestmark = pytest.mark.timeout(300)

# Commands of the walkthrough's blocks the test does not run as written, and why.
NOT_RUN_AS_WRITTEN = {
    ".venv/bin/tempoconf dev": "never ends by itself: the test starts it first, in the same "
    "folder and data dir (.tempoconf), on free ports instead of the defaults",
}
# The one rewrite: the README's default API address (curl) becomes this stack's free port. The
# Temporal CLI and tempoconf find the stack through the banner's export line, as the README says.
DEFAULT_API_URL = "http://127.0.0.1:8080"
NUMBERS = {"two": 2, "three": 3, "four": 4}


def walkthrough_text() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("\n## Walkthrough\n", 1)[1].split("\n## ", 1)[0]


def quoted(text: str) -> re.Pattern[str]:
    """What the README quotes, with ` ...` for what it leaves out, as a pattern."""
    text = text.strip().removesuffix(" ...")
    return re.compile(".*?".join(re.escape(part) for part in text.split(" ... ")))


def make_clone(tmp_path: Path) -> Path:
    """What the walkthrough needs of a clone after `make run`: `.venv` (this test's) and examples/."""
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(Path(sys.prefix))
    shutil.copytree(ROOT / "examples", clone / "examples")
    return clone.resolve()


def run_demo(clone: Path) -> None:
    """`make run` ending by itself: both acts on a small fleet, free ports, the default data dir."""
    demo = subprocess.run(
        [".venv/bin/tempoconf", "demo", "--temporal-port", "0", "--ui-port", "0", "--api-port", "0",
         "--clients", "20", "--cooldown", "1s", "--exit-after-demo"],
        cwd=clone, env=cli_env(), capture_output=True, text=True, timeout=200, check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert (clone / ".tempoconf").is_dir()


def started_input(command: str) -> dict[str, Any]:
    match = re.search(r"--input '(.*)'$", command)
    assert match, command
    return json.loads(match.group(1))


def table(output: str, header_start: str) -> tuple[str, list[str]]:
    """A table's header line and its rows (the lines after it)."""
    lines = output.splitlines()
    start = next(number for number, line in enumerate(lines) if line.startswith(header_start))
    return lines[start], [line for line in lines[start + 1 :] if line.strip()]


def column(header: str, row: str, name: str, following: str) -> str:
    return row[header.index(name) : header.index(following)].strip()


class Walkthrough:
    """Runs the walkthrough's commands in a second shell (the banner's export line, nothing of
    the test's environment) and checks what the README says each gives."""

    def __init__(self, clone: Path, dev: RunningDev, exports: str) -> None:
        self.clone, self.dev, self.exports = clone, dev, exports
        self.text = walkthrough_text()
        self.inputs: list[dict[str, Any]] = []  # the walkthrough's rollouts, in order
        self.halted: set[str] = set()  # versions the README's status showed halted
        self.checked: list[str] = []  # which of the README's statements were checked

    def sh(self, command: str) -> subprocess.CompletedProcess[str]:
        script = f"{self.exports}\n{command.replace(DEFAULT_API_URL, self.dev.api_url)}"
        return bash(script, cwd=self.clone, env=cli_env())

    def ok(self, command: str) -> str:
        result = self.sh(command)
        assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
        return result.stdout

    def begin(self, intro: str) -> None:
        """What the text before a block says to wait for: `Once STATUS shows the canary stage
        `live``, polled as a person would look again."""
        if once := re.search(r"Once `([^`]+)` shows the canary stage `(\w+)`", intro):
            status_command, wanted = once.groups()
            row = re.compile(rf"^\s+1\s+channel:canary\s+\S+\s+{wanted}\s", re.M)
            deadline = time.monotonic() + 30
            output = self.ok(status_command)
            while not row.search(output):
                assert time.monotonic() < deadline, output
                time.sleep(0.2)
                output = self.ok(status_command)
            self.checked.append("canary live")

    def version_of(self, index: int) -> str:
        return version_id(self.inputs[index]["value"])

    def run(self, intro: str, command: ShellCommand) -> None:
        text, notes, comment = command.text, command.notes, command.comment
        if "--name advance" in text:
            self.advance(command)
            return
        if precondition := re.search(r"once `([^`]+)` says (\w+) at stage (.+):$", notes):
            self.awaiting(*precondition.groups())
        output = self.ok(text)
        if "workflow start" in text:
            self.inputs.append(started_input(text))
        if outcome := re.fullmatch(r"outcome: (\w+)", comment):
            assert f'"outcome":"{outcome.group(1)}"' in output, output
            self.checked.append(comment)
        if state := re.fullmatch(r"state (\w+), outcome (\w+): (.*)", comment):
            self.halted_status(text, output, *state.groups())
        if "the canary gets the new version, most hosts keep stable" in intro:
            expected = self.version_of(1) if "canary" in text else self.version_of(0)
            assert json.loads(output)["version"] == expected, f"{text}\n{output}"
            self.checked.append(f"get: {text}")
        if "the diff against stable, the stages, and which of the clients of" in notes:
            self.plan(output)
        if comment == "who did what, to which version, why":
            self.history(output)
        if comment == "newest first; when each was stable":
            self.versions(output)
        if "workflow list" in text:
            assert "rollout:default/myproject/server_config" in output, output
            self.checked.append(f"list: {text}")
        if back := re.match(r"back to max_connections (\d+)", notes):
            self.rollback(text, output, int(back.group(1)))
        if "started in the background" in notes:
            self.staged_rollback(notes, output)

    # -- the statements ----------------------------------------------------------------------
    def advance(self, command: ShellCommand) -> None:
        """`run it three times in all`, each answer as the README quotes it."""
        notes = command.notes
        times = re.search(r"run it (\w+) times in all", notes)
        first = re.search(r"Result (map\[.*?\])", notes)
        assert times and first, (
            f"the README must say how often to advance and what it answers: {notes}"
        )
        answers = [first.group(1), *re.findall(r"\(([^()]*state:[^()]*)\)", notes[times.end() :])]
        assert len(answers) == NUMBERS[times.group(1)], answers
        for answer in answers:
            output = self.ok(command.text)
            result = next(line for line in output.splitlines() if "Result" in line)
            assert quoted(answer).search(result), f"{answer!r} is not in {result!r}"
        self.checked.append("advance")

    def awaiting(self, status_command: str, state: str, stage: str) -> None:
        """`once STATUS says STATE at stage STAGE:`, and what it shows of a check with no data."""
        output = self.ok(status_command)
        assert re.search(rf"^\s+state\s+{state}\b", output, re.M), output
        assert re.search(rf"^\s+stage\s+{re.escape(stage)}[,\s]", output, re.M), output
        health = re.search(
            r"`rollout status` says so under \*\*health\*\*: the\s+check `(\w+)`, with `([^`]+)` "
            r"and `([^`]+)`",
            self.text,
        )
        assert health, "the walkthrough no longer says what status shows of a check with no data"
        verdict, figure, summary = health.groups()
        assert re.search(
            rf"^\s+reports #1\s+reports\s+{verdict}\s+{re.escape(figure)}\s", output, re.M
        ), output
        assert summary in output, output
        self.checked += ["awaiting", "no data"]

    def halted_status(
        self, command: str, output: str, state: str, outcome: str, reason: str
    ) -> None:
        # A signal is delivered, not awaited: on a loaded machine the revert may still be under
        # way when status asks, as it would be for a person typing fast. Ask again until then.
        deadline = time.monotonic() + 30
        while re.search(r"^\s+state\s+(preparing|publishing|holding|reverting)\b", output, re.M):
            assert time.monotonic() < deadline, output
            time.sleep(0.2)
            output = self.ok(command)
        assert re.search(rf"^\s+state\s+{state}\b", output, re.M), output
        assert re.search(rf"^\s+outcome\s+{outcome}: {quoted(reason).pattern}", output, re.M), (
            output
        )
        self.halted.add(self.version_of(-1))
        # "Halt one (every client goes back to stable at once)": the canary is back on stable.
        canary = self.ok(
            ".venv/bin/tempoconf get myproject/server_config --client host-1 --channel canary"
        )
        assert json.loads(canary)["version"] == self.version_of(-2), canary
        self.checked.append("halted")

    def plan(self, output: str) -> None:
        for text in ["(nothing was published)", "value diff against stable:", "-  \"max_connections\": 1000",
                     "+  \"max_connections\": 2000", "stages (3)", "listed in examples/clients.json",
                     "  channel:canary: host-0001, host-0011",
                     # the demo's fleet polled its own config: none seen on this one yet
                     "known clients: 20 (0 seen (polls or reports) in the last 1h"]:  # fmt: skip
            assert text in output, f"{text!r} not in:\n{output}"
        self.checked.append("plan")

    def history(self, output: str) -> None:
        header, rows = table(output, "WHEN (UTC)")
        assert header.split() == ["WHEN", "(UTC)", "ACTOR", "ACTION", "VERSION", "REASON"], header
        assert 0 < len(rows) <= 20, output
        for row in rows:
            assert column(header, row, "ACTOR", "ACTION"), f"a row without an actor: {row!r}"
        for reason in ["debug logging fills the disks", "hotfix for the connection storm"]:
            assert reason in output, output
        self.checked.append("history")

    def versions(self, output: str) -> None:
        """Newest first, every version of the walkthrough and no other (it started clean after
        the demo), the current stable `yes`, the others that were stable `was`."""
        header, rows = table(output, "VERSION")
        newest_first = [version_id(request["value"]) for request in reversed(self.inputs)]
        assert [row.split()[0] for row in rows] == newest_first, output
        stable = [column(header, row, "STABLE", "STABLE SINCE") for row in rows]
        assert stable == ["yes"] + ["" if v in self.halted else "was" for v in newest_first[1:]], (
            output
        )
        self.assert_first_metadata(output)
        self.checked.append("versions")

    def assert_first_metadata(self, versions: str) -> None:
        """Each version shows the author, commit and message of the walkthrough's rollout that
        first stored it (none of the demo's, though the demo stored the same 2000 value)."""
        header, rows = table(versions, "VERSION")
        for row in rows:
            request = next(r for r in self.inputs if version_id(r["value"]) == row.split()[0])
            assert column(header, row, "AUTHOR", "COMMIT") == request.get("author", "-"), row
            assert column(header, row, "COMMIT", "MESSAGE") == request.get("commit", "-"), row
            assert row[header.index("MESSAGE") :].strip() == request.get("message", ""), row

    def rollback(self, command: str, output: str, max_connections: int) -> None:
        version = shlex.split(command)[3]
        first = next(
            r["value"] for r in self.inputs if r["value"]["max_connections"] == max_connections
        )
        assert version == version_id(first), command
        assert "outcome: promoted" in output and f"version: {version}" in output, output
        self.checked.append("rollback")

    def staged_rollback(self, notes: str, output: str) -> None:
        stages = re.search(r"\((canary → .*?), --cooldown", notes).group(1)  # type: ignore[union-attr]
        assert re.search(rf"^\s+stages\s+channel:{re.escape(stages)}$", output, re.M), output
        assert "outcome:" not in output and "next:" in output, output
        status = self.ok(".venv/bin/tempoconf rollout status myproject/server_config")
        assert "(workflow rollout:default/myproject/server_config, Running)" in status, status
        self.checked.append("staged rollback")

    def kept_metadata(self, commands: list[str]) -> None:
        """ "A version keeps the author, commit and message of the rollout that first stored it; a
        later rollout of the same value, a rollback included, records its own in the audit log":
        the README's versions and history once more, after its rollbacks."""
        self.assert_first_metadata(self.ok(next(c for c in commands if " versions " in c)))
        history = self.ok(next(c for c in commands if " history " in c))
        header, rows = table(history, "WHEN (UTC)")
        for reason in re.findall(r'tempoconf rollback .*--reason "([^"]+)"', self.text):
            started = [row for row in rows if " rollout.started " in row and reason in row]
            assert len(started) == 1, f"no rollout.started row for {reason!r}:\n{history}"
            assert "@" in column(header, started[0], "ACTOR", "ACTION"), started[0]
        self.checked.append("kept metadata")

    def prose(self) -> None:
        """What the walkthrough's text says beside its blocks."""
        # "`examples/rollout-walkthrough.json` is the same request"
        assert "(`examples/rollout-walkthrough.json` is the same request" in self.text
        request = json.loads((self.clone / "examples/rollout-walkthrough.json").read_text())
        assert request == self.inputs[1]
        # "the ids above are those of `{...1000}` and `... 2500}` on every machine"
        ids = re.search(r"ids above are those of `(\{[^`]+\})` and `\.\.\. (\d+)\}`", self.text)
        assert ids, "the walkthrough no longer says which values the rollback ids are"
        value = json.loads(ids.group(1))
        rollbacks = re.findall(
            r"tempoconf rollback myproject/server_config ([0-9a-f]{16})", self.text
        )
        assert rollbacks == [
            version_id(value),
            version_id({**value, "max_connections": int(ids.group(2))}),
        ]
        # "refusing bad input before anything is started (every problem listed)"
        bad = re.search(
            r"`(\.venv/bin/tempoconf rollout start examples/rollout-bad\.json)`", self.text
        )
        assert bad, "the walkthrough no longer names examples/rollout-bad.json"
        refused = self.sh(bad.group(1))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        problems = re.search(r"refused: (\d+) problem\(s\):", refused.stderr)
        assert problems, refused.stderr
        listed = [line for line in refused.stderr.splitlines() if line.startswith("  /")]
        assert len(listed) == int(problems.group(1)) and "nothing was started." in refused.stderr
        self.checked.append("prose")


def test_the_walkthrough_gives_what_the_readme_says_right_after_make_run(tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    run_demo(clone)
    dev = start_dev(clone, default_data_dir=True)
    try:
        banner = dev.output.read_text()
        # "state kept in `.tempoconf/`": the demo's data dir, next to the walkthrough's commands
        assert f"Data dir   {clone / '.tempoconf'}  " in banner, banner
        exports = next(
            line.strip() for line in banner.splitlines() if line.strip().startswith("export ")
        )
        walkthrough = Walkthrough(clone, dev, exports)

        blocks = shell_blocks(walkthrough.text)
        commands = [command.text for block in blocks for command in block.commands]
        assert len(commands) >= 20, commands
        for block in blocks:
            walkthrough.begin(block.intro)
            for command in block.commands:
                if command.text in NOT_RUN_AS_WRITTEN:
                    continue
                walkthrough.run(block.intro, command)
        walkthrough.prose()
        walkthrough.kept_metadata(commands)

        # Every statement of the README the test knows how to check was found and checked; a
        # README edit that drops or rewords one fails here rather than going unchecked.
        assert sorted(set(walkthrough.checked)) == sorted({
            "outcome: promoted", "outcome: bypassed", "halted", "plan", "advance", "awaiting",
            "no data", "history", "versions", "rollback", "staged rollback", "prose", "kept metadata",
            "canary live",
            *(f"get: {c}" for c in commands if " get " in c or c.startswith("curl")),
            *(f"list: {c}" for c in commands if "workflow list" in c),
        })  # fmt: skip
    finally:
        dev.stop()
