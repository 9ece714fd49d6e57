"""The how-to guides that read a config held at its canary stage, run as written, in order, on one
fresh `tempoconf dev`: docs/how-to/openfeature.md, edge-relays.md and clients.md. Each guide starts
the rollout it reads and halts it at its end, so the next one starts from the same state."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.cli.conftest import RunningDev, free_port, page, shell_blocks, start_dev
from tests.cli.howto import (
    DEFAULT_API_URL,
    as_written,
    make_clone,
    ok,
    printed_comments,
    python_blocks,
    quoted,
    run,
    wait_as_told,
)
from tests.cli.page_runner import section

pytestmark = pytest.mark.timeout(300)

PATH = "myproject/held_canary"
STABLE = "c839a1b794e06bfb"
STAGED = "86e40215c04507a9"
EDGE_PORT = 8081


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    running = start_dev(make_clone(tmp_path_factory.mktemp("held-canary")))
    try:
        yield running
    finally:
        running.stop()


def set_up_as_told(dev: RunningDev, text: str) -> None:
    """The guide's "Before you start": the stable value, the held rollout, the wait."""
    before = section(text, "Before you start")
    (block,) = shell_blocks(before)
    stable, held = block.commands
    assert "promoted" in ok(dev, stable.text)
    ok(dev, held.text)
    wait_as_told(dev, before.split("```sh", 1)[1].split("```", 1)[1])


def clean_up_as_told(dev: RunningDev, text: str) -> None:
    (block,) = shell_blocks(section(text, "Clean up"))
    (halt,) = block.commands
    ok(dev, halt.text)
    assert json.loads(ok(dev, f".venv/bin/tempoconf rollout status {PATH} --json"))["state"] in (
        "reverting",
        "halted",
    )


def run_python(dev: RunningDev, snippet: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", as_written(snippet)],
        cwd=dev.workdir, env={**dev.env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_openfeature_guide(dev: RunningDev) -> None:
    text = page("how-to/openfeature.md")
    set_up_as_told(dev, text)

    provider, ofrep_python = python_blocks(text)
    assert run_python(dev, provider).splitlines() == printed_comments(provider)
    assert any((dev.workdir / ".tempoconf-cache").iterdir())  # the last good value, on disk

    ofrep = section(text, "Ask the API over OFREP")
    (block,) = shell_blocks(ofrep)
    assert len(block.commands) == 5, block.commands
    shell = run(dev, "set -euo pipefail\n" + "\n".join(c.text for c in block.commands))
    assert shell.returncode == 0, shell.stdout + shell.stderr
    canary, other, not_modified, missing = shell.stdout.splitlines()
    raw = ofrep.split("```sh\n", 1)[1].split("```", 1)[0]
    wanted = [line[2:] for line in raw.splitlines() if line.startswith("# {")]
    assert len(wanted) == 3, wanted
    assert quoted(wanted[0]).fullmatch(canary), (wanted[0], canary)
    assert quoted(wanted[1]).fullmatch(other), (wanted[1], other)
    assert json.loads(canary)["variant"] == STAGED and json.loads(other)["variant"] == STABLE
    assert block.commands[3].comment == "304" and not_modified == "304"
    assert missing == wanted[2]

    shown = ofrep_python.strip().splitlines()[-1]
    assert shown.startswith("# ")
    assert run_python(dev, ofrep_python).strip() == shown[2:]

    clean_up_as_told(dev, text)


def test_edge_relays_guide(dev: RunningDev) -> None:
    text = page("how-to/edge-relays.md")
    set_up_as_told(dev, text)

    edge = section(text, "Run an edge")
    (block,) = shell_blocks(edge)
    assert len(block.commands) == 4, block.commands
    raw = edge.split("```sh\n", 1)[1].split("```", 1)[0]
    wanted = [line[2:] for line in raw.splitlines() if line.startswith("# {")]
    assert len(wanted) == 2, wanted
    port = free_port()
    # The trap: a failing command must not leave the edge holding the output open.
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + "\n".join(
        command.text for command in block.commands
    ).replace(f"127.0.0.1:{EDGE_PORT}", f"127.0.0.1:{port}").replace(
        f"--port {EDGE_PORT}", f"--port {port}"
    )
    shell = run(dev, script, timeout=90)
    assert shell.returncode == 0, shell.stdout + shell.stderr
    printed = [line for line in shell.stdout.splitlines() if not line.startswith("edge: ")]
    canary, admin = printed
    assert quoted(wanted[0]).fullmatch(canary), (wanted[0], canary)
    assert admin == wanted[1].replace(DEFAULT_API_URL, dev.api_url)

    clean_up_as_told(dev, text)


def test_clients_guide(dev: RunningDev) -> None:
    text = page("how-to/clients.md")
    set_up_as_told(dev, text)

    sdk, local = python_blocks(text)
    for snippet in (sdk, local):
        assert run_python(dev, snippet).splitlines() == printed_comments(snippet)

    agent_section = section(text, "Use the agent")
    (block,) = shell_blocks(agent_section)
    # The agent's default cache dir is under XDG_CACHE_HOME: this test's, not the user's.
    cache = dev.workdir / "xdg-cache"
    script = f"set -euo pipefail\nexport XDG_CACHE_HOME={cache}\n" + "\n".join(
        c.text for c in block.commands
    )
    agent = run(dev, script, timeout=90)
    assert agent.returncode == 0, agent.stdout + agent.stderr
    shown = agent_section.split("```text\n", 1)[1].split("```", 1)[0]
    assert agent.stdout == shown
    assert f"now running {STAGED}" in shown

    clean_up_as_told(dev, text)
