"""The README, run literally right after the demo (`make run`): what "What you just saw" quotes of
the demo, then every command of its walkthrough in order, from a copy of what a clone has, each
printing what the README says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.conftest import README, ROOT, bash, cli_env, shell_commands, start_dev
from tests.cli.howto import make_clone
from tests.cli.page_runner import PageRunner, section

pytestmark = pytest.mark.timeout(300)

# Commands of the walkthrough the test does not run as written, and why.
NOT_RUN_AS_WRITTEN = {
    ".venv/bin/tempoconf dev": "never ends by itself: the test starts it first, in the same "
    "folder and data dir (.tempoconf), on free ports instead of the defaults",
}


def make_run_with_ports() -> str:
    """The README's `make run` on other ports, as its first section writes it."""
    [command] = [
        command
        for command in shell_commands(section(README.read_text(encoding="utf-8"), "Two commands"))
        if command.startswith("make run ARGS=")
    ]
    return command


def run_demo(clone: Path) -> str:
    """The README's `make run` with ports, ending by itself: both acts on a small fleet, the
    clone's default data dir. Its ports are made free ones (0), the flags the README names kept:
    make must hand them to the demo, or it takes 7233, 8233 and 8080."""
    command = make_run_with_ports()
    ports = re.findall(r"--(temporal|ui|api)-port (\d+)", command)
    assert sorted(name for name, _ in ports) == ["api", "temporal", "ui"], command
    for name, port in ports:
        command = command.replace(f"--{name}-port {port}", f"--{name}-port 0")
    extra = f"--data-dir {clone / '.tempoconf'} --clients 20 --cooldown 1s --exit-after-demo"
    assert command.endswith('"'), command
    command = f'{command[:-1]} {extra}"'
    demo = bash(command, cwd=ROOT, env=cli_env(), timeout=240)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    # the demo ran on the ports make handed it (free ones), not on its defaults
    polled = re.search(r"simulated clients polling http://127\.0\.0\.1:(\d+)", demo.stdout)
    assert polled and polled.group(1) != "8080", demo.stdout
    assert (clone / ".tempoconf").is_dir()
    return demo.stdout


def assert_what_you_just_saw(demo_output: str) -> None:
    """Every phrase "What you just saw" quotes (in backticks) is in what the demo printed."""
    text = section(README.read_text(encoding="utf-8"), "What you just saw")
    quotes = re.findall(r"`([^`]+)`", text)
    assert {"rollout ended: promoted", "rollout ended: reverted", "the canary caught it"} <= set(
        quotes
    ), quotes
    for quote in quotes:
        if quote == "make run":
            continue
        assert quote in demo_output, (
            f"the README quotes {quote!r}; the demo printed:\n{demo_output}"
        )
    assert len(text.strip().splitlines()) <= 14, "What you just saw: ten lines and a few more"


def test_the_readme_walkthrough_gives_what_the_readme_says_right_after_make_run(
    tmp_path: Path,
) -> None:
    clone = make_clone(tmp_path)
    assert_what_you_just_saw(run_demo(clone))
    dev = start_dev(clone, default_data_dir=True)
    try:
        banner = dev.output.read_text()
        # "It keeps its state in `.tempoconf/`": the demo's data dir, beside the README's commands
        assert f"Data dir   {clone / '.tempoconf'}  " in banner, banner
        exports = next(
            line.strip() for line in banner.splitlines() if line.strip().startswith("export ")
        )
        runner = PageRunner(clone, exports, dev.api_url)
        walkthrough = section(README.read_text(encoding="utf-8"), "Walkthrough")
        runner.run_page(walkthrough, not_run=NOT_RUN_AS_WRITTEN)
        assert len(runner.ran) >= 13, runner.ran

        # "The plan shows the diff against stable, and which of the example clients each stage
        # reaches" (the demo's fleet polled its own config: none seen on this one yet).
        plan = next(
            output for command, output in runner.outputs.items() if "rollout plan" in command
        )
        for text in ["(nothing was published)", '-  "max_connections": 1000',
                     '+  "max_connections": 2000', "stages (3)", "listed in examples/clients.json",
                     "  channel:canary: host-0001, host-0011",
                     "known clients: 20 (0 seen (polls or reports) in the last 1h"]:  # fmt: skip
            assert text in plan, f"{text!r} not in:\n{plan}"
        # "Its stages are the canary channel, then 10 % and 50 % of the hosts, ten minutes each.
        # The 50 % stage waits for a person's approval."
        # (ADDS, between the cohort and the cooldown: what each stage adds to the earlier ones)
        assert re.search(
            r"^\s+1\s+channel:canary\s+channel=canary\s+all the clients with channel=canary\s+10m\s",
            plan,
            re.M,
        ), plan
        assert re.search(
            r"^\s+3\s+50%\s+50% of clients\s+40% of the clients.*\s10m\s+1h\s+yes\s", plan, re.M
        ), plan
    finally:
        dev.stop()


def test_the_readme_stays_one_screen_and_links_only_into_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for command in ("make run", "make test", "make docs"):
        assert f"`{command}`" in text or f"\n{command} " in text, command
    steps = re.findall(r"^(\d+)\. ", section(text, "Walkthrough"), re.M)
    assert steps == [str(n) for n in range(1, len(steps) + 1)] and len(steps) <= 10, steps
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        assert "://" in target or target.startswith("docs/"), target
