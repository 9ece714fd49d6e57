"""A failing webhook is one readable line in the worker's log, and nothing more (issue 12, hole 8):
no "_ActivityHandle exception was never retrieved" and its tracebacks when a worker process that
let go of a rollout whose delivery failed (stopped mid-hold, as in a deploy) exits, and no
traceback per attempt. The rollout goes on as before: a webhook never holds up or fails it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.fixtures.services import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_a_failing_webhook_is_one_line_per_attempt_and_never_an_unretrieved_exception(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    origin = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    refused = f"{origin}/hook/s3cr3t"
    address = str(temporal_env.client.service_client.config.target_host)
    worker = subprocess.run(
        [sys.executable, "-m", "tests.workflows.webhook_worker", address,
         f"sqlite:///{tmp_path / 'tempoconf.db'}", refused],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    log = worker.stdout + worker.stderr
    assert worker.returncode == 0, log[-3000:]
    assert "RUNNING" in log and "worker stopped" in log, log[-3000:]
    assert "never retrieved" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "s3cr3t" not in log  # a hook's path may be its secret: only where it goes is named
    attempts = [line for line in log.splitlines() if "notify_webhook" in line or origin in line]
    print(f"\n{len(attempts)} webhook line(s):", *attempts, sep="\n  ")
    assert len(attempts) == 3, attempts  # WEBHOOK_RETRY: three attempts, a line each
    assert all(" WARNING " in line and "ConnectError" in line for line in attempts), attempts
