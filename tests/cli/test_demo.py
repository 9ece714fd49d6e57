"""`tempoconf demo`: the happy path on a small fleet, promoted; then a bad value caught by the
canaries and reverted, as the fleet itself observed; the live table in stage order."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import signal
import subprocess
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tempoconf.canonical import version_id
from tempoconf.cli.demo import check_text, second_act_verdict
from tempoconf.cli.demo_view import StageOrder, fleet_table
from tempoconf.cli.fleet import REPORT_OPERATIONS, failure_ratio
from tempoconf.rollout.health_specs import ReportsCheckSpec
from tempoconf.rollout.progress import Verdict
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.rollout.sequential import RatioSums
from tempoconf.rollout.sequential_verdicts import GroupSums, judge_sequential
from tempoconf.schema_validation import value_problems
from tempoconf.temporal.binaries import temporal_cli_path
from tests.cli.conftest import (
    EXAMPLES,
    TEMPOCONF,
    cli_env,
    processes_with,
    run_cli,
    wait_for_output,
)

REPO = Path(__file__).resolve().parents[2]
STABLE = version_id({"is_debug": False, "max_connections": 1000})
NEW = version_id({"is_debug": False, "max_connections": 2000})
BAD_VALUE = {"is_debug": False, "max_connections": 200}
STABLE_VALUE = {"is_debug": False, "max_connections": 1000}
BAD = version_id(BAD_VALUE)
UNHEALTHY, HEALTHY = Verdict.UNHEALTHY, Verdict.HEALTHY
# The fleet puts every 20th host on channel canary, starting with host-0001 (cli/fleet.py).
CANARIES_OF_40 = ["host-0001", "host-0021"]
CANARIES_OF_20 = ["host-0001"]


def _demo_args(data_dir: Path, *flags: str, clients: int, cooldown: str) -> list[str]:
    return [
        str(TEMPOCONF), "demo", "--data-dir", str(data_dir), "--temporal-port", "0",
        "--ui-port", "0", "--api-port", "0", "--clients", str(clients), "--cooldown", cooldown,
        *flags,
    ]  # fmt: skip


def _assert_first_act(output: str, *, clients: int, canaries: int, cooldown: str) -> None:
    for text in [
        "tempoconf dev stack is up",
        "1. register the schema of demo/server_config",
        "promoted: version",  # the stable value, set through a stage-less rollout
        f"3. start a fleet of {clients} simulated clients",
        f"every client runs the stable version; {canaries} are on channel canary",
        f"as version {NEW}: channel:canary → 10% → 50%, {cooldown} hold each",
        "Web UI: http://127.0.0.1:",
        "stage 1/3 channel:canary",
        "stage 2/3 10%",
        "stage 3/3 50%",
        "rollout ended: promoted",
    ]:
        assert text in output, f"{text!r} missing from:\n{output}"
    # Stage by stage, the canaries move first, then the percentiles, each counted in stage order
    # (not alphabetical: 10% and 50% would come before channel:canary); at the end everyone is new.
    assert re.search(
        rf"stage 1/3 channel:canary .*\| {canaries} new \(channel:canary\), {clients - canaries} stable$",
        output,
        re.MULTILINE,
    ), output
    assert re.search(
        rf"stage 3/3 50% .*\| {canaries} new \(channel:canary\), \d+ new \(10%\), \d+ new \(50%\), "
        r"\d+ stable$",
        output,
        re.MULTILINE,
    ), output
    assert re.search(rf"\| {clients} new \(promoted, now stable\)$", output, re.MULTILINE), output
    # The demo's own config: the walkthrough's myproject/server_config starts clean after it.
    demo_part = output.split("\n1. register the schema")[1]
    assert "myproject/server_config" not in demo_part, demo_part
    assert "rollout%3Adefault%2Fdemo%2Fserver_config" in demo_part


@pytest.mark.timeout(120)
def test_demo_exit_after_rollout_ends_after_the_first_rollout(tmp_path: Path) -> None:
    """--exit-after-rollout keeps its meaning: the happy path, promoted, exit 0, nothing after."""
    data_dir = tmp_path / "state"
    result = subprocess.run(
        _demo_args(data_dir, "--exit-after-rollout", clients=40, cooldown="2s"),
        env=cli_env(), cwd=tmp_path, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr

    assert result.returncode == 0, output
    _assert_first_act(output, clients=40, canaries=2, cooldown="2s")
    assert "now a bad value" not in output and output.count("rollout ended") == 1, output
    assert "Traceback" not in output
    assert processes_with(str(data_dir.resolve())) == [], "the demo left its Temporal server behind"
    api_url = re.search(r"simulated clients polling (http://\S+)", output)
    assert api_url is not None
    assert processes_with(f"--api-url {api_url.group(1)} ") == [], "the demo left its fleet behind"


@pytest.mark.timeout(120)
def test_demo_happy_path_only_runs_the_first_rollout_only(tmp_path: Path) -> None:
    result = subprocess.run(
        _demo_args(
            tmp_path / "state", "--happy-path-only", "--exit-after-demo", clients=20, cooldown="1s"
        ),
        env=cli_env(), cwd=tmp_path, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr

    assert result.returncode == 0, output
    assert "rollout ended: promoted" in output
    assert "now a bad value" not in output and output.count("rollout ended") == 1, output
    assert "The stack stays up" not in output, "--exit-after-demo must not stay up"
    assert "Traceback" not in output


def test_demo_refuses_two_exit_points(tmp_path: Path) -> None:
    result = run_cli(
        "demo", "--exit-after-rollout", "--exit-after-demo", env=cli_env(), cwd=tmp_path
    )
    assert result.returncode == 2
    assert "--exit-after-rollout" in result.stderr and "contradict" in result.stderr
    assert not (tmp_path / ".tempoconf").exists(), "refused before starting anything"


def _assert_every_rollout_has_its_details(address: str) -> None:
    """Each rollout the demo started (the stable value, the good one, the reverted bad one) has
    the Web UI's summary and details, as `tempoconf rollout start` gives them: never "No details
    available"."""
    temporal = str(temporal_cli_path())
    listed = subprocess.run(
        [temporal, "workflow", "list", "--address", address, "-o", "json",
         "--query", 'TempoconfPath="demo/server_config"'],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    runs = [item["execution"] for item in json.loads(listed.stdout)]
    assert len(runs) == 3, runs
    for run in runs:
        described = subprocess.run(
            [temporal, "workflow", "describe", "--address", address, "-o", "json",
             "-w", run["workflowId"], "-r", run["runId"]],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        metadata = json.loads(described.stdout)["executionConfig"].get("userMetadata", {})
        assert "demo/server_config" in metadata.get("summary", ""), (run, metadata)
        details = metadata.get("details", "")
        assert "- stages: " in details, (run, metadata)
        assert re.search(r"version `[0-9a-f]{16}`", details), (run, details)


class _Terminal:
    """A child's output through a pseudo-terminal (so the demo draws its live table), copied
    into a file that `wait_for_output` reads."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.master, self.slave = pty.openpty()
        self._thread = threading.Thread(target=self._copy, daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        with open(self.log, "wb") as sink:
            while True:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: the child side is closed
                    return
                if not chunk:
                    return
                sink.write(chunk)
                sink.flush()

    def text(self) -> str:
        # Drop the redraw codes (cursor up, erase) and the terminal's \r.
        raw = self.log.read_text(errors="replace") if self.log.exists() else ""
        return re.sub(r"\x1b\[\d*[A-Za-z]", "", raw).replace("\r", "")

    def close(self) -> None:
        os.close(self.slave)
        self._thread.join(timeout=10)
        os.close(self.master)


def _tables(text: str) -> list[tuple[str, list[str]]]:
    """Every fleet table drawn: (its header line, its rows)."""
    lines = text.splitlines()
    tables = []
    for number, line in enumerate(lines):
        if line.startswith("  VERSION ") and line.rstrip().endswith("HOSTS"):
            rows = []
            for row in lines[number + 1 :]:
                if not re.match(r"  \S.*\s\d+\s+█+$", row):
                    break
                rows.append(row)
            tables.append((lines[number - 1], rows))
    return tables


@pytest.mark.timeout(180)
def test_demo_catches_the_bad_value_on_the_canaries_and_stays_up(tmp_path: Path) -> None:
    """By default: the happy path, then the bad value, whose canaries report errors, whose check
    fails, which is reverted; only canaries ever ran it, and the API serves stable to everyone.
    On a terminal the live table lists stages in order. Then the stack stays up: the printed
    `temporal workflow start` works, the live view follows it, and Ctrl-C ends all."""
    data_dir = tmp_path / "state"
    terminal = _Terminal(tmp_path / "demo.out")
    demo = subprocess.Popen(
        _demo_args(data_dir, clients=40, cooldown="2s"),
        env={**cli_env(), "TERM": "xterm"}, cwd=REPO, stdin=subprocess.DEVNULL,
        stdout=terminal.slave, stderr=terminal.slave,
    )  # fmt: skip
    try:
        wait_for_output(terminal.log, "tempoconf history demo/server_config", demo, 120)
        text = terminal.text()

        # The second act: the rule that makes the value bad is said, the check fails, it reverts.
        assert (
            f"5. now a bad value: roll out {json.dumps({'is_debug': False, 'max_connections': 200})} as version {BAD}"
            in text
        )
        prose = " ".join(text.split())  # the explanation is wrapped to the terminal
        assert "each simulated server carries 500 open connections" in prose
        assert (
            "with max_connections 200 it refuses the rest, and reports 60% of its operations as failed"
            in prose
        )
        assert (
            "The health check: the stage's reports against the baseline's (the hosts outside the "
            "stage), checked every 1s during the hold; a regression, which reverts the rollout, is "
            "when the 95% confidence interval of the error rate's increase lies wholly above "
            "max_increase 2 pp." in prose
        )
        # The revert's reason shows the interval, and that it lies above the tolerance.
        assert re.search(
            r"rollout ended: reverted \(stage channel:canary is unhealthy: reports #1: regression: "
            r"error rate \+[\d.]+ pp \[[\d.]+, [\d.]+\] at 95%, ",
            text,
        ), text
        assert re.search(
            r"the canary caught it: reverted [\d.]+ s after the first one got it; "
            r"no other host ever ran it\n",
            text,
        ), text
        # Two counts of canaries, each saying when it was made: the check's (in the revert's
        # reason: the clients it had reports from when it tripped), and the fleet's, later.
        checked = re.search(
            r"[\d,]+ operations from (\d+) cohort clients? vs [\d,]+ from \d+ baseline clients?; "
            r"the interval lies wholly above max_increase 2 pp; evidence: ",
            text,
        )
        assert checked is not None, text
        caught = re.search(
            r"   counted by the check when it tripped: the client\(s\) in its reason above; "
            r"counted by the fleet by the time every host was back on stable: "
            r"(\d+)/(\d+) canaries reported errors(?: \(\d+ ran it\))?$",
            text,
            re.MULTILINE,
        )
        assert caught is not None, text
        assert int(checked.group(1)) <= int(caught.group(1)), text
        assert 1 <= int(caught.group(1)) <= int(caught.group(2)) == len(CANARIES_OF_40), text
        # What the fleet saw: the bad version on canary hosts, and on no other.
        seen = re.search(
            r"seen by the fleet: (\d+) of 40 hosts ever ran it \(([^)]*)\), all on channel canary; "
            r"40 of 40 now run the stable version",
            text,
        )
        assert seen is not None, text
        ran = seen.group(2).split(", ")
        assert ran and set(ran) <= set(CANARIES_OF_40) and int(seen.group(1)) == len(ran), text
        assert re.search(
            r"stage 1/3 channel:canary .*\| [12] bad \(channel:canary\), 3[89] stable$",
            text,
            re.MULTILINE,
        ), text

        # The API serves stable (the first act's value) to every client, canary or not.
        api_url = re.search(r"simulated clients polling (http://\S+)", text)
        assert api_url is not None, text
        for number in range(1, 41):
            for channel in (None, "canary"):
                params = {
                    "client": f"host-{number:04d}",
                    **({"channel": channel} if channel else {}),
                }
                answer = httpx.get(
                    f"{api_url.group(1)}/v1/configs/demo/server_config", params=params, timeout=10
                ).json()
                assert (answer["version"], answer["stage"]) == (NEW, "stable"), (params, answer)

        # The live table: stage rows in the rollout's order, then stable; after the revert, one
        # row: the whole fleet back on stable.
        tables = _tables(text)
        assert tables, text

        def rank(row: str) -> int:
            why = row[19:]
            stage = re.match(r"stage (\d+)/\d+ ", why)
            return int(stage.group(1)) if stage else (98 if why.startswith("promoted") else 99)

        for _, rows in tables:
            assert [rank(row) for row in rows] == sorted(rank(row) for row in rows), rows
        assert any(
            [re.sub(r"\s{2,}.*", "", row[19:]) for row in rows]
            == [
                "stage 1/3 channel:canary",
                "stage 2/3 10%",
                "stage 3/3 50%",
                "stable: not reached yet",
            ]
            for _, rows in tables
        ), tables
        reverted = [
            rows for header, rows in tables if f"→ {BAD}" in header and "reverted" in header
        ]
        assert reverted and len(reverted[-1]) == 1, tables[-3:]
        assert re.match(rf"  {NEW[:8]} stable\s+stable\s+40 ", reverted[-1][0]), reverted[-1]

        # The stack stays up with the next steps.
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
            and "--workflow-id 'rollout:default/demo/server_config'" in start
            and "--input-file examples/demo-manual.json" in start
        ), start
        for name in ("approve", "halt", "bypass"):
            assert re.search(
                rf"workflow (signal|update execute) --address {address.group(1)} .* --name {name}",
                text,
            ), name
        _assert_every_rollout_has_its_details(address.group(1))

        started = subprocess.run(
            shlex.split(start), cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
        assert started.returncode == 0, started.stdout + started.stderr
        # the live view follows a rollout it did not start: the canaries move to its version
        wait_for_output(terminal.log, "stage 1/3 canaries", demo, 30)
        wait_for_output(terminal.log, "new (canaries)", demo, 30)
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=30)
        terminal.close()
    assert code == 0, terminal.text()
    assert "Traceback" not in terminal.text()
    assert processes_with(str(data_dir.resolve())) == [], "the demo left its Temporal server behind"


def test_the_demo_examples_pass_the_schema_and_the_bad_one_fails_the_fleet() -> None:
    """The second act's value is valid (so prepare accepts it) and bad by the fleet's rule;
    every other value the demo or the examples roll out is fine for the fleet."""
    schema = json.loads((EXAMPLES / "server_config.schema.json").read_text())
    bad = parse_rollout_request(json.loads((EXAMPLES / "demo-bad-value.json").read_text()))
    assert value_problems(schema, bad.value) == []
    check = bad.health[0]
    assert isinstance(check, ReportsCheckSpec) and check.judge is not None
    bound = check.judge.sequential.max_increase
    assert bound is not None and failure_ratio(bad.value) > bound
    assert check.interval is not None, "the check must run during the hold, to fail fast"
    for name in ("demo-manual.json", "rollout.json", "rollout-manual.json"):
        request = parse_rollout_request(json.loads((EXAMPLES / name).read_text()))
        assert value_problems(schema, request.value) == [], name
        assert failure_ratio(request.value) == 0, name
    stable = json.loads((EXAMPLES / "server_config.stable.json").read_text())
    assert failure_ratio(stable) == 0


@pytest.mark.parametrize(("value", "expected"), [(BAD_VALUE, UNHEALTHY), (STABLE_VALUE, HEALTHY)])
def test_the_second_acts_judge_decides_on_one_canarys_first_report(
    value: dict[str, object], expected: Verdict
) -> None:
    """With the fleet's report volume, one canary's first report (the fewest operations a report
    counts) against 19 hosts on stable settles the judge: a regression on the bad value, no
    regression on a good one. The smallest fleet the tests run (20 hosts) has one canary."""
    bad = parse_rollout_request(json.loads((EXAMPLES / "demo-bad-value.json").read_text()))
    check = bad.health[0]
    assert isinstance(check, ReportsCheckSpec) and check.judge is not None
    operations = REPORT_OPERATIONS[0]
    failed = round(operations * failure_ratio(value))
    no_latency = RatioSums()
    verdict, summary, _ = judge_sequential(
        check.judge.sequential,
        GroupSums(RatioSums.of([(failed, operations)]), no_latency),
        GroupSums(RatioSums.of([(0, operations)] * 19), no_latency),
    )
    assert verdict == expected, summary


def test_the_demo_says_what_its_check_judges() -> None:
    """The second act's sentence on its check: the judge's interval and tolerance, or (for a
    request with the old thresholds) the bound."""
    bad = json.loads((EXAMPLES / "demo-bad-value.json").read_text())
    assert check_text(bad["health"][0]).endswith(
        "checked every 1s during the hold; a regression, which reverts the rollout, is when the "
        "95% confidence interval of the error rate's increase lies wholly above max_increase 2 pp."
    )
    both = {"kind": "reports", "judge": {"sequential": {
        "max_latency_increase_ms": 20, "max_increase": 0.005, "confidence": 0.99}}}  # fmt: skip
    assert check_text(both).endswith(
        "checked at the end of the hold; a regression, which reverts the rollout, is when the 99% "
        "confidence interval of the error rate's increase lies wholly above max_increase 0.5 pp "
        "or the one of the mean latency's increase lies wholly above max_latency_increase_ms 20 ms."
    )
    threshold = {"kind": "reports", "max_error_ratio": 0.05, "interval": "2s"}
    assert check_text(threshold) == (
        "The health check: the stage's reports, error ratio at most 0.05, checked every 2s "
        "during the hold."
    )
    factor = {"kind": "reports", "max_baseline_factor": 3}
    assert check_text(factor) == (
        "The health check: the stage's reports, error ratio at most 3 times the baseline's, "
        "checked at the end of the hold."
    )


def test_fleet_table_lists_stages_in_rollout_order_then_stable() -> None:
    progress = {
        "stages": [{"index": 0, "name": "channel:canary"}, {"index": 1, "name": "10%"},
                   {"index": 2, "name": "50%"}],
    }  # fmt: skip
    counts = Counter(
        {(STABLE, "stable"): 30, (NEW, "50%"): 5, (NEW, "10%"): 3, (NEW, "channel:canary"): 2}
    )
    rows = fleet_table(counts, stable=STABLE, new=NEW, header="h", order=StageOrder(progress))[2:]
    assert [row.split()[:2] + [row.split()[-2]] for row in rows] == [
        [NEW[:8], "new", "2"],
        [NEW[:8], "new", "3"],
        [NEW[:8], "new", "5"],
        [STABLE[:8], "stable", "30"],
    ], rows
    assert "stage 1/3 channel:canary" in rows[0] and "stage 3/3 50%" in rows[2]
    assert "stable: not reached yet" in rows[3]
    promoted = fleet_table(
        Counter({(NEW, "stable"): 40}), stable=STABLE, new=NEW, header="h",
        order=StageOrder({**progress, "outcome": "promoted"}),
    )[2]  # fmt: skip
    assert "new" in promoted and "promoted: now the stable one" in promoted


@pytest.mark.parametrize(
    ("seen", "outcome", "expected"),
    [
        # promoted: the canary did not catch it
        ({"hosts": ["host-0001", "host-0002"], "error_hosts": [], "exposure": 9.0, "running": False},
         "promoted", "the canary did not catch it"),
        # reverted, but a host outside the canary channel ran it
        ({"hosts": ["host-0001", "host-0002"], "error_hosts": ["host-0001"], "exposure": 9.0,
          "running": False}, "reverted", "not by the canary alone: 1 host(s)"),
        # reverted before anyone ran it: nothing was caught
        (None, "reverted", "before any host ran the bad version"),
    ],
)  # fmt: skip
def test_second_act_verdict_says_when_the_canary_did_not_catch_it(
    seen: dict[str, object] | None, outcome: str, expected: str
) -> None:
    caught, lines = second_act_verdict(
        seen, canaries=["host-0001"], size=20, outcome=outcome, back_on_stable=20
    )
    assert not caught
    assert expected in lines[0], lines


def test_second_act_verdict_says_when_each_count_of_canaries_was_made() -> None:
    """The revert's reason counts the clients the check had reports from when it tripped; the
    verdict counts what the fleet saw until it was back on stable: each says which it is."""
    seen = {
        "hosts": ["host-0001", "host-0002"],
        "error_hosts": ["host-0001", "host-0002"],
        "exposure": 7.6,
        "running": False,
    }
    canaries = ["host-0001", "host-0002", "host-0003"]
    caught, lines = second_act_verdict(
        seen, canaries=canaries, size=20, outcome="reverted", back_on_stable=20
    )
    assert caught
    assert lines[:2] == [
        "the canary caught it: reverted 7.6 s after the first one got it; no other host ever ran it",
        "   counted by the check when it tripped: the client(s) in its reason above; counted by "
        "the fleet by the time every host was back on stable: 2/3 canaries reported errors "
        "(2 ran it)",
    ]
    _, still = second_act_verdict(
        seen, canaries=canaries, size=20, outcome="reverted", back_on_stable=19
    )
    assert "counted by the fleet by now: 2/3 canaries" in still[1]
