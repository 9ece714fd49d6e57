"""A `tempoconf worker` whose Temporal server goes away logs it in a few plain lines, not ten
coloured warnings a second into its log file (issue 12, hole 8): Core's logs go through Python's
logging (no colour codes) and each kind is logged once a minute (CoreLogThrottle). `tempoconf api`
(and `tempoconf dev`) use the same kind of runtime: the API's requests during the outage do not
log a coloured warning per failed call either."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx

from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.connection import CoreLogThrottle
from tests.cli.conftest import TEMPOCONF, cli_env, free_port, run_cli, wait_for_output
from tests.fixtures.waiting import eventually_sync

OUTAGE_SECONDS = 3.0
"""Watched after the first warning: Core used to log about ten a second meanwhile."""


def test_a_worker_logs_a_temporal_outage_in_a_few_plain_lines(tmp_path: Path) -> None:
    port = free_port()
    env = cli_env(
        TEMPOCONF_DATABASE_URL=f"sqlite:///{tmp_path / 'tempoconf.db'}",
        TEMPORAL_ADDRESS=f"127.0.0.1:{port}",
    )
    assert run_cli("db", "upgrade", env=env, cwd=tmp_path).returncode == 0
    server = subprocess.Popen(
        [str(temporal_cli_path()), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
         "--headless", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(TEMPOCONF), "worker"], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_for_output(log, "polling task queue", worker, timeout=60)
        server.kill()
        server.wait(timeout=30)

        def warned() -> bool:
            return "retried" in log.read_text(errors="replace")

        eventually_sync(warned, what="the worker to log the outage", timeout=60, interval=0.2)
        # What is under test is what the outage's time brings: nothing to wait for but time.
        time.sleep(OUTAGE_SECONDS)
    finally:
        for process in (worker, server):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        worker.wait(timeout=30)
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)

    output = log.read_text(errors="replace")
    warnings = [line for line in output.splitlines() if "retried" in line]
    print(f"\n{len(warnings)} outage line(s) in {OUTAGE_SECONDS:g}s and more of the outage")
    assert "\x1b[" not in output, output[-2000:]
    # One per kind of poll (workflow tasks, activity tasks) a minute.
    assert 1 <= len(warnings) <= 2, "\n".join(warnings)
    assert all(" WARNING temporalio.core" in line for line in warnings), warnings


def test_the_api_logs_a_temporal_outage_its_requests_meet_in_a_few_plain_lines(
    tmp_path: Path,
) -> None:
    port, api_port = free_port(), free_port()
    env = cli_env(
        TEMPOCONF_DATABASE_URL=f"sqlite:///{tmp_path / 'tempoconf.db'}",
        TEMPORAL_ADDRESS=f"127.0.0.1:{port}",
    )
    assert run_cli("db", "upgrade", env=env, cwd=tmp_path).returncode == 0
    server = subprocess.Popen(
        [str(temporal_cli_path()), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
         "--headless", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    log = tmp_path / "api.log"
    with log.open("wb") as out:
        api = subprocess.Popen(
            [str(TEMPOCONF), "api", "--port", str(api_port)],
            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    # A route that asks Temporal (describes the config's workflow): the API's client connects.
    status_url = f"http://127.0.0.1:{api_port}/v1/admin/rollouts/logs/outage"
    stop = threading.Event()
    answers: list[int] = []

    def ask_meanwhile() -> None:
        while not stop.is_set():
            try:
                answers.append(httpx.get(status_url, timeout=30).status_code)
            except httpx.HTTPError:
                answers.append(0)
            time.sleep(0.2)

    asker = threading.Thread(target=ask_meanwhile, daemon=True)
    try:
        wait_for_output(log, "listening", api, timeout=60)

        def served() -> bool:
            return httpx.get(status_url, timeout=30).status_code == 200

        eventually_sync(served, what="the API to describe through Temporal", timeout=60)
        server.kill()
        server.wait(timeout=30)
        asker.start()

        def warned() -> bool:
            return "retried" in log.read_text(errors="replace")

        eventually_sync(warned, what="the API to log the outage", timeout=60, interval=0.2)
        # What is under test is what the outage's time brings: nothing to wait for but time.
        time.sleep(OUTAGE_SECONDS * 2)
    finally:
        stop.set()
        if api.poll() is None:
            api.send_signal(signal.SIGINT)
        api.wait(timeout=60)
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        if asker.is_alive():
            asker.join(timeout=60)

    output = log.read_text(errors="replace")
    warnings = [line for line in output.splitlines() if "retried" in line]
    print(
        f"\n{len(warnings)} outage line(s) in {OUTAGE_SECONDS * 2:g}s and more of the outage, "
        f"{len(answers)} request(s) meanwhile"
    )
    assert "\x1b[" not in output, output[-2000:]
    # One per kind of call the route makes, a minute (it used to be one per failed call).
    assert 1 <= len(warnings) <= 2, "\n".join(warnings)
    assert all(" WARNING temporalio.core" in line for line in warnings), warnings


def test_the_throttle_lets_one_of_a_kind_through_per_window_and_counts_the_rest() -> None:
    import logging

    now = [0.0]
    throttle = CoreLogThrottle(window=60, clock=lambda: now[0])

    def record(text: str) -> logging.LogRecord:
        return logging.LogRecord("temporalio.core", logging.WARNING, "", 0, text, (), None)

    assert throttle.filter(record("gRPC call poll retried 6 times"))
    assert not throttle.filter(record("gRPC call poll retried 7 times"))
    assert throttle.filter(record("another kind"))
    now[0] = 61.0
    later = record("gRPC call poll retried 6 times")
    assert throttle.filter(later)
    assert later.getMessage().endswith("(1 more like it in the last 60s)")
