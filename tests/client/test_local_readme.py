"""The README's local-evaluation snippet, run as written against a live API in the walkthrough's
state (the rollout at its canary stage), prints what its comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.api.helpers import make_stable, publish, start_rollout
from tests.client.helpers import PATH
from tests.client.live_api import LiveApi

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "## Local evaluation\n"


def local_snippet() -> str:
    """The one Python block of the README's local-evaluation section."""
    section = README.read_text(encoding="utf-8").split(HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, f"{len(blocks)} python blocks in the README's local-evaluation section"
    return str(blocks[0])


def test_the_readme_snippet_runs_as_written(live_api: LiveApi, tmp_path: Path) -> None:
    make_stable(live_api.store, PATH, {"is_debug": False, "max_connections": 1000})
    staged = start_rollout(live_api.store, PATH, {"is_debug": False, "max_connections": 2000})
    publish(live_api.store, PATH, index=0, name="channel:canary", channel="canary")
    live_api.wait_served(PATH, staged.version, channel="canary")

    snippet = local_snippet()
    # Each print(...) line says what it prints in its comment.
    expected = re.findall(r"^\s*print\(.*?\)\s+# (.*)$", snippet, re.MULTILINE)
    assert len(expected) == 2
    result = subprocess.run(
        [sys.executable, "-c", snippet],
        cwd=tmp_path,
        env={**os.environ, "TEMPOCONF_API_URL": live_api.url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected
    assert any((tmp_path / ".tempoconf-cache").iterdir())  # the last good bundle, on disk
