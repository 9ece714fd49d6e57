"""`tempoconf demo --exit-after-rollout`: the whole story on a small fleet, promoted."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from tempoconf.canonical import version_id
from tests.cli.conftest import TEMPOCONF, cli_env, processes_with, wait_for_output


@pytest.mark.timeout(120)
def test_demo_rolls_the_example_out_to_a_small_fleet(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
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
    output = result.stdout + result.stderr

    assert result.returncode == 0, output
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


@pytest.mark.timeout(150)
def test_demo_stays_up_with_the_fleet_and_prints_commands_that_work(tmp_path: Path) -> None:
    """Without --exit-after-rollout: the next steps are printed with the stack's own --address,
    the printed `temporal workflow start` works, the fleet line follows it, and Ctrl-C ends all."""
    data_dir = tmp_path / "state"
    output = tmp_path / "demo.out"
    with open(output, "wb") as sink:
        demo = subprocess.Popen(
            [
                str(TEMPOCONF), "demo", "--data-dir", str(data_dir), "--temporal-port", "0",
                "--ui-port", "0", "--api-port", "0", "--clients", "20", "--cooldown", "1s",
            ],  # fmt: skip
            env=cli_env(), cwd=Path(__file__).resolve().parents[2], stdout=sink,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        text = wait_for_output(output, "tempoconf history myproject/server_config", demo, 90)
        address = re.search(r"Temporal\s+(127\.0\.0\.1:\d+)", text)
        assert address is not None, text
        ui = re.search(r"Web UI\s+(http://127\.0\.0\.1:\d+)/namespaces/default/workflows", text)
        assert ui is not None, text
        assert "The stack stays up, and the fleet keeps polling, until Ctrl-C." in text
        start = next(
            line.strip()
            for line in text.splitlines()
            if "workflow start --address" in line and "--input-file" in line
        )
        assert (
            f"--address {address.group(1)}" in start
            and "--input-file examples/rollout-manual.json" in start
        )
        for name in ("approve", "halt", "bypass"):
            assert re.search(
                rf"workflow (signal|update execute) --address {address.group(1)} .* --name {name}",
                text,
            ), name

        started = subprocess.run(
            shlex.split(start), cwd=Path(__file__).resolve().parents[2], capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        # the live view follows a rollout it did not start: the canaries move to its version
        wait_for_output(output, "stage 1/3 canaries", demo, 30)
        wait_for_output(output, "new (canaries)", demo, 30)
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=30)
    assert code == 0, output.read_text()
    assert "Traceback" not in output.read_text()
    assert processes_with(str(data_dir.resolve())) == [], "the demo left its Temporal server behind"
