"""The README's section "OpenFeature and OFREP", run as written against the live API (uvicorn on
loopback) over a store in the state the section names: the walkthrough's config stable at
`max_connections` 1000, its staged rollout (2000) holding the canary stage. The ```sh block runs
as one bash script (its `etag=` line feeds the next command); the ```python block in the venv's
python, with the real `openfeature-sdk` and OFREP provider."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

from tempoconf.store.store import Store
from tests.api.helpers import make_stable, publish, start_rollout
from tests.cli.conftest import README, shell_blocks
from tests.cli.test_walkthrough import DEFAULT_API_URL
from tests.fixtures.services import live_api

SECTION = "OpenFeature and OFREP"
PATH = "myproject/server_config"
STABLE = {"is_debug": False, "max_connections": 1000}
STAGED = {"is_debug": False, "max_connections": 2000}


def section_text() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"\n## {SECTION}\n", 1)[1].split("\n## ", 1)[0]


def python_block(text: str) -> str:
    found = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(found) == 1, found
    return str(found[0])


def expected_lines(block_text: str) -> list[str]:
    """What the README says the commands print: its `# {...}` lines, in order."""
    return [line[2:] for line in block_text.splitlines() if line.startswith("# {")]


async def test_the_readmes_ofrep_section_runs_as_written(
    sqlite_store: Store, tmp_path: Path
) -> None:
    store = sqlite_store
    stable = make_stable(store, PATH, STABLE)
    start_rollout(store, PATH, STAGED)
    publish(store, PATH, index=0, name="channel:canary", channel="canary")
    text = section_text()
    (block,) = shell_blocks(text)
    commands = [command.text for command in block.commands]
    assert len(commands) == 5, commands
    raw_block = text.split("```sh\n", 1)[1].split("```", 1)[0]

    async with live_api(store) as url:
        script = "set -euo pipefail\n" + "\n".join(commands).replace(DEFAULT_API_URL, url)
        shell = await asyncio.to_thread(
            subprocess.run, ["bash", "-c", script], capture_output=True, text=True, timeout=60
        )
        snippet = python_block(text).replace(DEFAULT_API_URL, url)
        python = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", snippet], capture_output=True, text=True,
            timeout=60, cwd=tmp_path,
        )  # fmt: skip

    assert shell.returncode == 0, shell.stderr
    printed = shell.stdout.splitlines()
    assert len(printed) == 4, shell.stdout
    canary, other, not_modified, missing = printed
    wanted = expected_lines(raw_block)
    assert len(wanted) == 3, wanted
    # Each answer holds what the README shows of it ("..." stands for what it leaves out).
    for got, shown in ((canary, wanted[0]), (other, wanted[1])):
        document = json.loads(got)
        for part in shown.split("..."):
            assert part.strip(",") in got, (part, got)
        assert document["metadata"]["version"] == document["variant"]
    assert json.loads(other)["variant"] == stable.version
    assert not_modified == "304"
    assert block.commands[3].comment == "304"
    assert missing == wanted[2]

    assert python.returncode == 0, python.stderr
    shown = python_block(text).strip().splitlines()[-1]
    assert shown.startswith("# ")
    assert python.stdout.strip() == shown[2:]
