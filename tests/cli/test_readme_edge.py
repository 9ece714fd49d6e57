"""The README's section "Edge relays", run as written: its ```sh block as one bash script (the
edge started in the background, asked, then stopped) against the live API over a store in the
state the section names (the walkthrough's config, its staged rollout holding the canary stage)."""

from __future__ import annotations

import asyncio
import json
import subprocess

from tempoconf.store.store import Store
from tests.api.helpers import make_stable, publish, start_rollout
from tests.cli.conftest import README, ROOT, cli_env, free_port, shell_blocks
from tests.cli.test_walkthrough import DEFAULT_API_URL
from tests.fixtures.services import live_api

SECTION = "Edge relays: a tier between the API and a large fleet"
PATH = "myproject/server_config"
STABLE = {"is_debug": False, "max_connections": 1000}
STAGED = {"is_debug": False, "max_connections": 2000}
EDGE_PORT = 8081
EDGE_ADDRESS = f"127.0.0.1:{EDGE_PORT}"


def section_text() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"\n## {SECTION}\n", 1)[1].split("\n## ", 1)[0]


async def test_the_readmes_edge_section_runs_as_written(sqlite_store: Store) -> None:
    make_stable(sqlite_store, PATH, STABLE)
    staged = start_rollout(sqlite_store, PATH, STAGED)
    publish(sqlite_store, PATH, index=0, name="channel:canary", channel="canary")
    text = section_text()
    (block,) = shell_blocks(text)
    commands = [command.text for command in block.commands]
    assert len(commands) == 4, commands
    raw_block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    wanted = [line[2:] for line in raw_block.splitlines() if line.startswith("# {")]
    assert len(wanted) == 2, wanted

    async with live_api(sqlite_store) as url:
        port = free_port()
        # The trap: a failing command must not leave the edge holding the output open.
        script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + "\n".join(
            commands
        ).replace(DEFAULT_API_URL, url).replace(EDGE_ADDRESS, f"127.0.0.1:{port}").replace(
            f"--port {EDGE_PORT}", f"--port {port}"
        )
        shell = await asyncio.to_thread(
            subprocess.run, ["bash", "-c", script], capture_output=True, text=True, timeout=90,
            cwd=ROOT, env=cli_env(),
        )  # fmt: skip

    assert shell.returncode == 0, shell.stdout + shell.stderr
    printed = [line for line in shell.stdout.splitlines() if not line.startswith("edge: ")]
    assert len(printed) == 2, shell.stdout
    canary, admin = printed
    for part in wanted[0].split("..."):
        assert part.strip(",") in canary, (part, canary)
    assert json.loads(canary)["version"] == staged.version
    assert admin == wanted[1].replace(DEFAULT_API_URL, url)
