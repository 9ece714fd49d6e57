"""Run a page's ```sh blocks as a reader does, in order, in a second shell, and check that each
command prints what the page says it prints.

What a page says, and how it is checked:
- a command's trailing `# TEXT`: its output (stdout and stderr) holds TEXT, where `...` stands
  for what the page leaves out and any run of spaces matches any run of spaces;
- `# exit N: TEXT`: it exits N (else 0) and prints TEXT;
- text before a block saying "Once `COMMAND` shows `TEXT`" (or "shows the canary stage `live`"):
  COMMAND is run again, as a person looks again, until it does.
A command that only reads (status, query, list, get, curl, ...) is run again for a while until
it prints what the page says: a signal, Temporal's visibility and the API follow a moment later."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cli.conftest import ShellCommand, bash, cli_env, shell_blocks
from tests.cli.howto import as_written

# Commands that change nothing, so running them again is what a reader would do too.
READ_ONLY = re.compile(
    r"(rollout status|workflow (query|list|describe|metadata|result)|tempoconf (get|history|versions)"
    r"|^curl )"
)
RETRY_SECONDS = 30.0


def quoted(text: str) -> re.Pattern[str]:
    """What a page quotes, `...` standing for what it leaves out, as a pattern."""
    parts = re.split(r"\s*\.\.\.\s*", text.strip())
    return re.compile(
        ".*?".join(r"\s+".join(re.escape(word) for word in part.split()) for part in parts), re.S
    )


def expectation(comment: str) -> tuple[int, str]:
    """(exit code, quoted text) of a command's trailing comment."""
    if match := re.fullmatch(r"exit (\d+): (.*)", comment.strip()):
        return int(match.group(1)), match.group(2)
    return 0, comment


@dataclass
class PageRunner:
    """A second shell: the banner's export line, nothing of the test's own environment."""

    cwd: Path
    exports: str
    api_url: str
    ran: list[str] = field(default_factory=list)  # every command run as written, in order
    outputs: dict[str, str] = field(default_factory=dict)  # each command's last output

    def sh(self, command: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        # As written: the test's stack runs on free ports, and the page's commands find it (curl
        # too, through $TEMPOCONF_API_URL) by the banner's export line, as the page says.
        script = f"{self.exports}\n{as_written(command)}"
        return bash(script, cwd=self.cwd, env=cli_env(), timeout=timeout)

    def run_page(self, text: str, *, not_run: dict[str, str] | None = None) -> None:
        """Every command of every ```sh block of `text`, in order; `not_run`: commands the test
        does not run as written (each with why)."""
        skipped = not_run or {}
        for block in shell_blocks(text):
            self.wait_for_once(block.intro)
            for command in block.commands:
                if command.text.strip() in skipped:
                    continue
                self.run(command)

    def run(self, command: ShellCommand) -> str:
        code, text = expectation(command.comment)
        pattern = quoted(text) if text else None
        read_only = bool(READ_ONLY.search(command.text))
        deadline = time.monotonic() + RETRY_SECONDS
        print(f"$ {command.text.strip()}", flush=True)  # shown with a failure: where it stopped
        while True:
            result = self.sh(command.text)
            output = result.stdout + result.stderr
            if result.returncode == code and (pattern is None or pattern.search(output)):
                break
            if not read_only or time.monotonic() > deadline:
                raise AssertionError(
                    f"{command.text}\nexited {result.returncode} (the page says {code}); "
                    f"the page says it prints {text!r}; it printed:\n{output}"
                )
            time.sleep(0.3)
        self.ran.append(command.text)
        self.outputs[command.text] = output
        return output

    def wait_for_once(self, intro: str) -> None:
        """ "Once `COMMAND` shows `TEXT`": look again until it does."""
        for status, wanted in re.findall(
            r"Once `([^`]+)` shows (the canary stage `\w+`|`[^`]+`)", intro
        ):
            if stage := re.fullmatch(r"the canary stage `(\w+)`", wanted):
                pattern = re.compile(rf"^\s+1\s+channel:canary\s+\S+\s+{stage.group(1)}\s", re.M)
            else:
                pattern = quoted(wanted.strip("`"))
            deadline = time.monotonic() + RETRY_SECONDS
            output = self.sh(status).stdout
            while not pattern.search(output):
                assert time.monotonic() < deadline, f"{status} never showed {wanted}:\n{output}"
                time.sleep(0.3)
                output = self.sh(status).stdout
            self.ran.append(f"once: {status}")


def section(text: str, heading: str) -> str:
    """The Markdown section under `## heading`, up to the next `## `."""
    marker = f"\n## {heading}\n"
    assert marker in text, f"no section {heading!r}"
    return text.split(marker, 1)[1].split("\n## ", 1)[0]
