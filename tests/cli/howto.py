"""Helpers of the tests that run the how-to guides (docs/how-to/) as written: a folder shaped like
a clone, the guides' code blocks, and the waits their text asks for."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.conftest import ROOT, RunningDev, bash

# The API's default address. A guide's command never types it: it names `$TEMPOCONF_API_URL`,
# which the export line `tempoconf dev` prints sets, so it works on the ports dev was given (a
# test's stack has its own). It stays for what a guide quotes of an output at the defaults.
DEFAULT_API_URL = "http://127.0.0.1:8080"


# A Python snippet's way to the API: the variable, the default only when it is unset.
_FALLBACK = 'os.environ.get("TEMPOCONF_API_URL", "http://127.0.0.1:8080")'


def as_written(command: str) -> str:
    """A guide's command (or snippet), refused when it hard-codes the default API port: with other
    ports the reader's shell would ask nothing there."""
    assert "127.0.0.1:8080" not in command.replace(_FALLBACK, ""), (
        f"this command hard-codes the API's default port; write $TEMPOCONF_API_URL:\n{command}"
    )
    return command


def make_clone(where: Path) -> Path:
    """What a guide needs of a clone after `make setup`: `.venv` (this test's) and examples/."""
    clone = where / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(Path(sys.prefix))
    shutil.copytree(ROOT / "examples", clone / "examples")
    return clone.resolve()


def python_blocks(text: str) -> list[str]:
    return [str(block) for block in re.findall(r"```python\n(.*?)```", text, re.S)]


def printed_comments(snippet: str) -> list[str]:
    """What each `print(...)  # comment` line of a snippet says it prints."""
    return re.findall(r"^\s*print\(.*?\)\s+# (.*)$", snippet, re.M)


def quoted(text: str) -> re.Pattern[str]:
    """What a guide quotes, `...` standing for what it leaves out, as a pattern."""
    return re.compile(".*?".join(re.escape(part) for part in text.strip().split("...")))


def run(dev: RunningDev, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A guide's command as written, in the clone, against this test's stack."""
    return bash(as_written(command), cwd=dev.workdir, env=dev.env, timeout=timeout)


def ok(dev: RunningDev, command: str, timeout: float = 120) -> str:
    done = run(dev, command, timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
    return done.stdout


def wait_as_told(dev: RunningDev, text: str, timeout: float = 60) -> None:
    """Do what the guide's "Wait until `COMMAND` shows the STAGE stage `STATUS`" says."""
    told = re.search(r"Wait until `([^`]+)` shows the (\S+) stage `(\w+)`", text.replace("\n", " "))
    assert told, f"the guide says what to wait for: {text}"
    command, stage, status = told.groups()
    wanted = re.compile(rf"^\s+\d+\s+\S*{re.escape(stage)}\S*\s+\S+\s+{status}\s", re.M)
    deadline = time.monotonic() + timeout
    while True:
        shown = ok(dev, command)
        if wanted.search(shown):
            return
        assert time.monotonic() < deadline, f"{command} never showed {stage} {status}:\n{shown}"
        time.sleep(1)
