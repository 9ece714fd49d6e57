"""`tempoconf demo --exit-after-rollout`: the whole story on a small fleet, promoted, under a minute."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tempoconf.canonical import version_id
from tests.cli.conftest import TEMPOCONF, cli_env, processes_with


@pytest.mark.timeout(120)
def test_demo_rolls_the_example_out_to_a_small_fleet(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    started = time.monotonic()
    result = subprocess.run(
        [
            str(TEMPOCONF),
            "demo",
            "--data-dir",
            str(data_dir),
            "--temporal-port",
            "0",
            "--ui-port",
            "0",
            "--api-port",
            "0",
            "--clients",
            "40",
            "--cooldown",
            "2s",
            "--exit-after-rollout",
        ],  # fmt: skip
        env=cli_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr

    assert result.returncode == 0, output
    assert elapsed < 60, f"the demo took {elapsed:.0f}s"
    new = version_id({"is_debug": False, "max_connections": 2000})
    for text in [
        "tempoconf dev stack is up",
        "1. register the schema of myproject/server_config",
        "promoted: version",  # the stable value, set through a stage-less rollout
        "3. start a fleet of 40 simulated clients",
        "every client runs the stable version; 2 are on channel canary",
        f"as version {new}: channel:canary → 10% → 50%, 2s hold each",
        "Web UI: http://127.0.0.1:",
        "stage 1/3 channel:canary",
        "stage 2/3 10%",
        "stage 3/3 50%",
        "rollout ended: promoted",
    ]:
        assert text in output, f"{text!r} missing from:\n{output}"
    # Stage by stage, the canaries move first, then the percentiles; at the end everyone is new.
    assert re.search(
        r"stage 1/3 channel:canary .*\| 2 new \(channel:canary\), 38 stable", output
    ), output
    assert re.search(r"\| 40 new \(as stable\)$", output, re.MULTILINE), output
    assert "Traceback" not in output
    assert processes_with(str(data_dir.resolve())) == [], "the demo left its Temporal server behind"
    api_url = re.search(r"simulated clients polling (http://\S+)", output)
    assert api_url is not None
    assert processes_with(f"--api-url {api_url.group(1)} ") == [], "the demo left its fleet behind"
