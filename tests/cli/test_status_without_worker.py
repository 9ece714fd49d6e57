"""`rollout status` without a worker answers at once from the store (state, stage, lock holder) and
says the workflow did not answer, in direct mode and in API mode (one operation behind both),
instead of waiting for a worker that is not there."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tempoconf.operations.view import STATUS_QUERY_TIMEOUT
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tempoconf.temporal.names import rollout_workflow_id
from tests.cli.conftest import cli_env, run_cli
from tests.fixtures.services import live_api
from tests.fixtures.temporal import running_harness
from tests.workflows.test_rollout import (
    NAMESPACE,
    example_request,
    make_stable,
    unique_path,
    wait_for_state,
)

QUERY_SECONDS = STATUS_QUERY_TIMEOUT.total_seconds()
HANG_SECONDS = 15.0
"""Far past the query's bound: a command that waited for a worker would still be waiting. How fast
it answers is printed here, not judged (a loaded CI machine's start-up varies by seconds)."""
TOKEN = "operator-token"
EXIT_NO_ANSWER = 3  # cli/status.py, documented in `tempoconf --help`


async def test_status_without_a_worker_answers_from_the_store_after_the_query_bound(
    temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> None:
    database_url = f"sqlite:///{tmp_path / 'tempoconf.db'}"
    store = Store(database_url, migrate=True)
    path = unique_path()
    workflow_id = rollout_workflow_id(NAMESPACE, path)
    try:
        async with running_harness(temporal_env, realtime_client, store) as harness:
            await make_stable(harness, path)
            handle = await harness.start(
                example_request(path), real_clock=True, workflow_id=workflow_id
            )  # holds an hour: still running when the worker is gone
            await wait_for_state(handle, "holding", stage_index=0)
        # The worker stopped: nothing polls the task queue any more.
        lock = store.get_lock(NAMESPACE, path)
        assert lock is not None and lock.workflow_id == workflow_id
        address = temporal_env.client.service_client.config.target_host
        direct = cli_env(
            TEMPORAL_ADDRESS=address,
            TEMPOCONF_DATABASE_URL=database_url,
            TEMPOCONF_TASK_QUEUE=harness.task_queue,
        )
        args = ("rollout", "status", path, "--namespace", NAMESPACE)
        async with live_api(
            store,
            Settings(temporal_address=address, task_queue=harness.task_queue, admin_token=TOKEN),
        ) as api_url:
            api = cli_env(TEMPOCONF_API_URL=api_url, TEMPOCONF_ADMIN_TOKEN=TOKEN)
            for mode, env in (("direct", direct), ("api", api)):
                # The same command for a config without a rollout answers at once ("no rollout
                # found"): its time is this machine's start-up, imports and round trips.
                baseline, found = await _timed(env, tmp_path, "rollout", "status", unique_path())
                assert found.returncode == 1 and "no rollout of" in found.stderr, found.stderr
                took, result = await _timed(env, tmp_path, *args)
                output = result.stdout + result.stderr
                assert result.returncode == EXIT_NO_ANSWER, (mode, output)
                print(f"{mode}: {took:.2f}s (a status found missing at once: {baseline:.2f}s)")
                # It gave up on the workflow after the query's bound (the stderr line below says
                # so) rather than waiting for a worker.
                assert took < baseline + QUERY_SECONDS + HANG_SECONDS, (mode, took, output)
                assert "state      stage.published (the last step" in result.stdout, output
                assert "stage      1 published" in result.stdout, (mode, output)
                assert f"held by workflow {workflow_id}, run {lock.run_id}" in result.stdout
                assert "started    by " in result.stdout, (mode, output)
                # One line on stderr says the workflow did not answer, and where to look.
                assert result.stderr.count("\n") == 1, (mode, output)
                assert f"the workflow {workflow_id!r} did not answer" in result.stderr, output
                assert (
                    f"no worker answered its status query within {QUERY_SECONDS:g}s (is a worker "
                    f"polling the task queue {harness.task_queue!r}, and not too busy to answer?)"
                    in result.stderr
                ), (mode, output)
                assert "Traceback" not in output
                # --json: the store's rows, and that the workflow did not answer.
                _, raw = await _timed(env, tmp_path, *args, "--json")
                assert raw.returncode == EXIT_NO_ANSWER, raw.stdout + raw.stderr
                answer = json.loads(raw.stdout)
                assert (answer["answered"], answer["workflow_id"]) == (False, workflow_id)
                assert answer["lock"]["run_id"] == lock.run_id
                assert answer["rollout"]["state"] == "stage.published"
    finally:
        store.close()


async def _timed(
    env: dict[str, str], cwd: Path, *args: str
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """`tempoconf ARGS` and its wall time; in a thread, as the API that answers it runs on this
    event loop."""
    started = time.monotonic()
    result = await asyncio.to_thread(run_cli, *args, env=env, cwd=cwd)
    return time.monotonic() - started, result
