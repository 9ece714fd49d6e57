"""The operator's commands against a live `tempoconf dev`, their output asserted as a person reads it:
`rollout status` (table, health figures, `--watch` to the outcome), `history`, `rollback`
(immediate and `--staged`), `rollout plan` (publishes nothing) and strategy expansion."""

from __future__ import annotations

import getpass
import json
import re
import socket
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.canonical import version_id
from tempoconf.resolution.bucketing import in_percentile
from tempoconf.store.store import Store
from tests.cli.conftest import EXAMPLES, TEMPOCONF, RunningDev, unique_path
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(180)

STABLE = {"is_debug": False, "max_connections": 1000}
NEW = {"is_debug": False, "max_connections": 3000}
EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
ME = f"{getpass.getuser()}@{socket.gethostname()}"


def _write(dev: RunningDev, name: str, content: Any) -> Path:
    path = dev.workdir / name
    path.write_text(json.dumps(content))
    return path


def _config(dev: RunningDev, name: str) -> str:
    """A fresh config with the example schema and STABLE as its stable value."""
    path = unique_path(name)
    assert dev.cli("schema", "set", path, EXAMPLES / "server_config.schema.json").returncode == 0
    started = dev.cli(
        "rollout",
        "start",
        _write(dev, f"{name}-stable.json", {"path": path, "value": STABLE}),
        "--wait",
    )
    assert "outcome: promoted" in started.stdout, started.stdout + started.stderr
    return path


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _wait_for_state(
    dev: RunningDev, path: str, *states: str, timeout: float = 30.0
) -> dict[str, Any]:
    def reached() -> dict[str, Any]:
        status = json.loads(_ok(dev.cli("rollout", "status", path, "--json")))
        assert status["state"] in states, f"{status['state']} ({status['phase']})"
        return dict(status)

    return eventually_sync(
        reached,
        what=f"the rollout of {path} to be {' or '.join(states)}",
        timeout=timeout,
        interval=0.3,
    )


def _report(
    dev: RunningDev,
    path: str,
    client: str,
    version: str,
    ok: int,
    failed: int,
    channel: str | None = None,
) -> None:
    identity = {"channel": channel} if channel else {}
    response = httpx.post(
        f"{dev.api_url}/v1/reports",
        json={
            "path": path,
            "client": client,
            "version": version,
            "ok": ok,
            "failed": failed,
            **identity,
        },
        timeout=10,
    )
    assert response.status_code < 300, response.text


def _store(dev: RunningDev) -> Store:
    return Store(f"sqlite:///{(dev.data_dir / 'tempoconf.db').resolve()}")


def _row(output: str, *cells: str) -> str:
    """The line of a table whose cells (separated by 2+ spaces) start with `cells`."""
    for line in output.splitlines():
        if re.split(r"\s{2,}", line.strip())[: len(cells)] == list(cells):
            return line
    pytest.fail(f"no row starting {cells} in:\n{output}")


def _watch_while(dev: RunningDev, watch: list[str], *steer: str) -> tuple[int, str, str]:
    """Run `tempoconf rollout status --watch ...`, steer the rollout with `tempoconf *steer` once
    the watch has shown its first view, and return the watch's exit code and output once it ends."""
    out, err = (dev.workdir / f"watch-{uuid.uuid4().hex[:8]}.{kind}" for kind in ("out", "err"))
    with out.open("w") as stdout_file, err.open("w") as stderr_file:
        process = subprocess.Popen(
            [str(TEMPOCONF), "rollout", "status", *watch],
            env=dev.env, cwd=dev.workdir, stdout=stdout_file, stderr=stderr_file, text=True,
        )  # fmt: skip
    try:
        # Each view is flushed as it is printed: the watch is following the rollout.
        eventually_sync(
            lambda: out.read_text().strip() or process.poll() is not None,
            what="the watch's first view",
            timeout=30,
        )
        _ok(dev.cli(*steer))
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, out.read_text(), err.read_text()


def test_status_table_health_figures_strategy_and_watch_to_the_outcome(dev: RunningDev) -> None:
    path = _config(dev, "status")
    new = version_id(NEW)
    request = {
        "path": path,
        "value": NEW,
        "stages": [{"channel": "canary", "cooldown": "120s", "manual": True}],
        "strategy": {"linear": {"step": 50, "every": "1s"}},
        # The later stages' evidence starts at their publish, and nobody reports in their 1s holds.
        "health": [
            {"kind": "reports", "max_error_ratio": 0.2, "min_clients": 1, "on_no_data": "pass"}
        ],
        "author": "alice@example.com",
        "commit": "3f2a9c1",
        "message": "triple max_connections",
    }
    _ok(dev.cli("rollout", "start", _write(dev, "status.json", request)))
    _wait_for_state(dev, path, "holding")
    # A hold is what `advance` ends: the commands say how, both ways.
    holding = _ok(dev.cli("rollout", "status", path))
    assert re.search(rf"^    advance  \S*tempoconf rollout advance {path}$", holding, re.M), holding
    assert f"-w 'rollout:default/{path}' --name advance" in holding, holding
    _report(dev, path, "host-a", new, ok=9, failed=1, channel="canary")
    _ok(dev.cli("rollout", "advance", path, "--reason", "reports are in"))
    _wait_for_state(dev, path, "awaiting_approval")

    view = _ok(dev.cli("rollout", "status", path))

    for text in [
        f"rollout of default/{path}  (workflow rollout:default/{path}, Running)",
        "state      awaiting_approval: Waiting for approval to leave stage channel:canary",
        f"version    {new}  (alice@example.com, 3f2a9c1, triple max_connections); "
        f"stable is {version_id(STABLE)}",
        f"started    by alice@example.com via tempoconf:{ME} at ",
        "stage      1/3 channel:canary",
        "health     healthy at ",
        f"by {ME}: advance: hold ended early (reports are in)",
        "--name approve",
        """--name halt --input '{"reason": "..."}'""",
        f"rollout approve {path} --digest sha256:",
    ]:
        assert text in view, f"{text!r} missing from:\n{view}"
    # Every time says its zone: in running text `... UTC`, in the stage table its header.
    assert "PUBLISHED (UTC)" in view, view
    running_text = [line for line in view.splitlines() if not re.match(r"\s+\d+\s{2}\S", line)]
    assert [
        line
        for line in running_text
        if re.search(r"(?<![\dT:])\d\d:\d\d:\d\d(?![\d.:]| UTC)", line)
    ] == [], view
    assert re.search(r"started    by .* at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: ", view), view
    canary = re.split(r"\s{2,}", _row(view, "1", "channel:canary").strip())
    assert canary[:4] == ["1", "channel:canary", "channel=canary", "live"], canary
    assert re.fullmatch(r"\d\d:\d\d:\d\d", canary[4]) and canary[5:] == ["done", "manual"], canary
    # the strategy's stages, expanded, each with its own hold
    assert re.split(r"\s{2,}", _row(view, "2", "50%").strip())[2:] == [
        "50% of clients", "pending", "-", "1s hold",
    ]  # fmt: skip
    assert "pending" in _row(view, "3", "100%", "100% of clients")
    figures = _row(view, "reports #1", "reports", "healthy")
    assert (
        "clients=1 error_ratio=0.1 failed=1 left_out_clients=0 left_out_reports=0 ok=9 since="
        in figures
    ), figures
    assert "reports #1: error ratio 0.1 (1 failed of 10 operations, 1 client(s))" in view

    code, stdout, stderr = _watch_while(
        dev,
        [path, "--watch", "--interval", "0.3"],
        *("rollout", "approve", path, "--reason", "canary is fine"),
    )
    assert code == 0, stdout + stderr
    assert "\x1b[" not in stdout, "no screen control codes when stdout is not a terminal"
    blocks = stdout.split("\n--- ")
    assert len(blocks) >= 3, stdout  # a new block per change, not per refresh
    assert "state      awaiting_approval" in blocks[0]
    assert any("stage      2/3 50%" in block for block in blocks), stdout
    assert "(workflow rollout:default/" in blocks[-1] and ", Completed)" in blocks[-1]
    assert "outcome    promoted: every stage passed its hold and checks" in blocks[-1]
    assert stdout.rstrip().endswith(
        "rollout ended: promoted (every stage passed its hold and checks)"
    )

    ended = _ok(dev.cli("rollout", "status", path))
    assert "outcome    promoted" in ended and "now stable" in ended
    assert "commands" not in ended  # nothing left to halt or approve
    assert [stage["name"] for stage in json.loads(_ok(dev.cli("rollout", "status", path, "--json")))["stages"]] == [
        "channel:canary", "50%", "100%",
    ]  # fmt: skip


def test_watch_exits_non_zero_on_a_halt(dev: RunningDev) -> None:
    path = _config(dev, "watchhalt")
    request = {"path": path, "value": NEW, "stages": [{"channel": "canary", "cooldown": "120s"}]}
    _ok(dev.cli("rollout", "start", _write(dev, "watchhalt.json", request)))
    _wait_for_state(dev, path, "holding")
    code, stdout, stderr = _watch_while(
        dev,
        [path, "--watch", "--json", "--interval", "0.3"],
        *("rollout", "halt", path, "--reason", "pager went off"),
    )
    assert code == 1, stdout + stderr
    states = [json.loads(line)["state"] for line in stdout.splitlines()]
    assert states[0] == "holding" and states[-1] == "halted", states


def test_history_lists_a_halt_with_its_reason(dev: RunningDev) -> None:
    path = _config(dev, "history")
    request = {"path": path, "value": NEW, "stages": [{"channel": "canary", "cooldown": "120s"}]}
    _ok(dev.cli("rollout", "start", _write(dev, "history.json", request)))
    _wait_for_state(dev, path, "holding")
    _ok(dev.cli("rollout", "halt", path, "--reason", "error budget burned"))
    _wait_for_state(dev, path, "halted")

    history = _ok(dev.cli("history", path))

    lines = history.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == ["WHEN (UTC)", "ACTOR", "ACTION", "VERSION", "REASON"]
    halted = next(line for line in lines if " rollout.halted " in line)
    assert re.search(
        rf"^\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d  {re.escape(ME)}\s+rollout\.halted\s+{version_id(NEW)}\s+",
        halted,
    ), halted
    assert halted.rstrip().endswith("error budget burned"), halted
    requested = next(line for line in lines if "halt requested" in line)
    assert ME in requested and "[channel:canary] halt requested: error budget burned" in requested
    # One vocabulary, one numbering, every row with its actor; started by who started it.
    run = [
        entry
        for entry in json.loads(_ok(dev.cli("history", path, "--json", "--limit", "500")))
        if entry["workflow_id"] == f"rollout:default/{path}" and entry["version"] == version_id(NEW)
    ]
    assert all(entry["actor"] for entry in run), run
    assert [(entry["action"], entry["actor"]) for entry in run[:4]] == [
        (
            "rollout.started",
            f"tempoconf:{ME}",
        ),  # no author in the request: the starter, not "workflow"
        ("rollout.publishing", "workflow"),
        ("stage.published", "workflow"),
        ("rollout.holding", "workflow"),
    ], run
    assert run[2]["reason"] == "stage 1 'channel:canary' published"
    assert f"started    by tempoconf:{ME} at " in _ok(dev.cli("rollout", "status", path))
    entries = json.loads(_ok(dev.cli("history", path, "--json", "--limit", "3")))
    assert len(entries) == 3
    assert entries[-1]["action"] == "rollout.halted"
    assert entries[-1]["reason"] == "error budget burned" and entries[-1]["actor"] == ME
    assert dev.cli("history", unique_path("nothing")).returncode == 1


def test_rollback_immediate_and_staged_with_the_audit_trail(dev: RunningDev) -> None:
    path = _config(dev, "rollback")
    old, new = version_id(STABLE), version_id(NEW)
    promoted = dev.cli(
        "rollout", "start", _write(dev, "rb-new.json", {"path": path, "value": NEW}), "--wait"
    )
    assert "outcome: promoted" in _ok(promoted)

    staged = _ok(
        dev.cli(
            "rollback", path, old, "--staged", "--cooldown", "1s", "--reason", "3000 was too many", "--wait",
            timeout=90,
        )
    )  # fmt: skip

    assert f"started the rollout of default/{path} to version {old}" in staged
    assert "stages       channel:canary → 10% → 50%" in staged
    assert "outcome: promoted" in staged
    status = json.loads(_ok(dev.cli("rollout", "status", path, "--json")))
    assert [stage["cooldown_seconds"] for stage in status["stages"]] == [1.0, 1.0, 1.0]
    assert (
        httpx.get(f"{dev.api_url}/v1/configs/{path}", params={"client": "x"}).json()["version"]
        == old
    )

    immediate = _ok(dev.cli("rollback", path, new, "--reason", "fixed the pool size"))
    assert "stages       none: promote directly" in immediate and "outcome: promoted" in immediate
    assert "next:" not in immediate and "rollout halt" not in immediate  # nothing left to steer

    from_file = _write(
        dev, "rb-stages.json",
        {"path": path, "value": STABLE, "stages": [{"channel": "canary", "name": "canaries"}],
         "strategy": {"linear": {"step": 50, "every": "1s"}}, "default_cooldown_time": "1s"},
    )  # fmt: skip
    third = _ok(
        dev.cli("rollback", path, old, "--staged", "--stages-from", from_file, "--wait", timeout=90)
    )
    assert "stages       canaries → 50% → 100%" in third and "outcome: promoted" in third

    started = [
        entry
        for entry in json.loads(_ok(dev.cli("history", path, "--json", "--limit", "500")))
        if entry["action"] == "rollout.started"
    ]
    assert [(entry["version"], entry["reason"], entry["actor"]) for entry in started[-3:]] == [
        (old, "3000 was too many", ME),
        (new, "fixed the pool size", ME),
        (old, f"rollback to {old}", ME),
    ]
    versions = _ok(dev.cli("versions", path))
    assert re.split(r"\s{2,}", versions.splitlines()[0]) == [
        "VERSION", "CREATED (UTC)", "STABLE", "STABLE SINCE (UTC)", "AUTHOR", "COMMIT", "MESSAGE",
    ]  # fmt: skip
    assert re.search(rf"^{old}\s+\S+ \S+\s+yes\s+\S+ \S+ \(3x\)", versions, re.MULTILINE), versions
    assert re.search(rf"^{new}\s+\S+ \S+\s+was\s+\S+ \S+ \(2x\)", versions, re.MULTILINE), versions
    listed = json.loads(_ok(dev.cli("versions", path, "--json")))
    assert {info["version"]: (info["is_stable"], len(info["stable_since"])) for info in listed} == {
        old: (True, 3),
        new: (False, 2),
    }

    refused = dev.cli("rollback", path, new, "--cooldown", "1s")
    assert refused.returncode == 2 and "apply to a --staged rollback only" in refused.stderr


def test_plan_publishes_nothing_and_counts_clients_per_stage(dev: RunningDev) -> None:
    path = _config(dev, "plan")
    _report(dev, path, "reporter-1", version_id(STABLE), ok=5, failed=0)
    clients = [
        {"client": f"host-{n:02d}", "channel": "canary" if n < 2 else None, "labels": {}}
        for n in range(30)
    ]
    request = {
        "path": path,
        "value": NEW,
        "stages": [{"channel": "canary", "cooldown": "30s", "manual": True}],
        "strategy": {"exponential": {"start": 10, "factor": 2, "every": "2m"}},
        "health": [{"kind": "reports", "max_error_ratio": 0.05}],
        "message": "plan me",
    }
    request_file = _write(dev, "plan.json", request)
    clients_file = _write(dev, "clients.json", clients)
    with _store(dev) as store:
        before = (
            store.revision(),
            store.history("default", path, limit=1000),
            store.list_versions("default", path),
        )

    output = _ok(dev.cli("rollout", "plan", request_file, "--clients", clients_file))
    planned = json.loads(
        _ok(dev.cli("rollout", "plan", request_file, "--clients", clients_file, "--json"))
    )

    with _store(dev) as store:
        after = (
            store.revision(),
            store.history("default", path, limit=1000),
            store.list_versions("default", path),
        )
        assert (
            store.get_rollout("default", path) is None and store.get_lock("default", path) is None
        )
    assert after == before, "plan wrote to the store"
    assert httpx.get(
        f"{dev.api_url}/v1/configs/{path}", params={"client": "host-00", "channel": "canary"}
    ).json()["version"] == version_id(STABLE)

    assert f"for default/{path} (nothing was published)" in output
    assert f"version    {version_id(NEW)}  (new: stored when the rollout starts)" in output
    assert (
        f"--- stable {version_id(STABLE)}" in output and f"+++ version {version_id(NEW)}" in output
    )
    assert '  -  "max_connections": 1000' in output and '  +  "max_connections": 3000' in output
    assert "stages (6, 5 from the strategy)" in output

    # the expected cohorts, from the published formula: each client counted at its first stage
    known = [(client["client"], client["channel"]) for client in clients] + [("reporter-1", None)]
    percentiles = [None, 10, 20, 40, 80, 100]
    first: list[int] = [0] * len(percentiles)
    for client, channel in known:
        for index, percentile in enumerate(percentiles):
            if (percentile is None and channel == "canary") or (
                percentile is not None and in_percentile(path, client, percentile)
            ):
                first[index] += 1
                break
    total, cumulative = len(known), 0
    for index, (name, count) in enumerate(
        zip(["channel:canary", "10% *", "20% *", "40% *", "80% *", "100% *"], first, strict=True)
    ):
        cumulative += count
        row = _row(output, str(index + 1), name)
        assert re.split(r"\s{2,}", row.strip())[-2:] == [
            f"+{count}",
            f"{cumulative}/{total} ({cumulative / total:.0%})",
        ], row
    assert cumulative == total
    canary = _row(output, "1", "channel:canary")
    assert (
        "30s" in canary
        and "yes" in canary
        and "reports(max_error_ratio=0.05, min_clients=1)" in canary
    )
    assert "2m" in _row(output, "2", "10% *")
    # what each stage adds, as far as the request says it (the canaries among them: NEW counts)
    assert "all the clients with channel=canary" in canary
    assert "10% of the clients, less those earlier stages reach" in _row(output, "2", "10% *")
    assert "20% of the clients, less those earlier stages reach" in _row(output, "4", "40% *")
    assert re.search(
        rf"known clients: 31 \(1 seen \(polls or reports\) in the last 1h, "
        rf"30 listed in {re.escape(str(clients_file))}\)",
        output,
    ), output

    assert [(stage["name"], stage["from_strategy"]) for stage in planned["stages"]] == [
        ("channel:canary", False), ("10%", True), ("20%", True), ("40%", True), ("80%", True), ("100%", True),
    ]  # fmt: skip
    assert [stage["clients"] for stage in planned["stages"]][-1] == 31
    assert [stage["adds"] for stage in planned["stages"]] == [
        "all the clients with channel=canary",
        *(
            f"{share}% of the clients, less those earlier stages reach"
            for share in (10, 10, 20, 40, 20)
        ),
    ]
    assert planned["published"] is False and planned["version_exists"] is False

    bad = dev.cli(
        "rollout",
        "plan",
        _write(dev, "plan-bad.json", {**request, "value": {"max_connections": "many"}}),
    )
    assert bad.returncode == 2 and "nothing was published." in bad.stderr
    assert "/value/max_connections" in bad.stderr


def test_plan_shows_the_windows_whether_one_is_open_now_and_a_freeze_override(
    dev: RunningDev,
) -> None:
    path = _config(dev, "plan-windows")
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%a").lower()
    closed = {"days": [tomorrow], "from": "10:00", "to": "11:00", "timezone": "UTC"}
    request = {"path": path, "value": NEW, "stages": [{"channel": "canary"}], "windows": [closed]}
    output = _ok(dev.cli("rollout", "plan", _write(dev, "plan-closed.json", request)))
    assert f"  windows    {tomorrow} 10:00-11:00 UTC" in output, output
    assert re.search(
        rf"closed now: the first stage waits until {tomorrow.title()} 10:00 UTC \(in \d", output
    ), output
    assert "freezes" not in output

    always = {**closed, "days": EVERY_DAY, "from": "00:00", "to": "24:00"}
    request = {**request, "windows": [always], "override_freeze": {"reason": "hotfix"}}
    request_file = _write(dev, "plan-open.json", request)
    output = _ok(dev.cli("rollout", "plan", request_file))
    assert "open now: a stage started now is published at once" in output, output
    assert "  freezes    passed: hotfix" in output
    planned = json.loads(_ok(dev.cli("rollout", "plan", request_file, "--json")))
    assert planned["windows"] == ["mon-sun 00:00-24:00 UTC"]
    assert planned["override_freeze"] == "hotfix"
    opening = datetime.fromisoformat(planned["next_window_opening"])
    assert abs((opening - datetime.now(UTC)).total_seconds()) < 60
