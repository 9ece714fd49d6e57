"""ConfigRollout is sandbox-clean: the worker runs it outside the SDK's workflow sandbox (its cost,
cli/worker.py), so the sandbox's check that the workflow code makes no non-deterministic call
(the clock, randomness, I/O, a restricted import) runs here. The saved histories replay inside it
(test_replay.py); these run rollouts live inside it, with the queries, signals and updates
operators send, which no history holds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from tempoconf.cli.worker import worker_options
from tests.fixtures.temporal import RolloutHarness, sqlite_harness
from tests.workflows import test_rollout

SCENARIOS: list[Callable[[RolloutHarness], Awaitable[None]]] = [
    test_rollout.test_three_stages_serve_each_kind_of_client_then_promote,
    test_rollout.test_halt_puts_every_client_back_on_stable,
    test_rollout.test_pause_blocks_advancing_until_resume,
    test_rollout.test_manual_stage_waits_for_approve,
    test_rollout.test_cancellation_reverts_then_ends_cancelled,
    test_rollout.test_status_and_search_attributes_show_progress,
    test_rollout.test_second_rollout_of_a_config_is_refused_naming_the_running_one,
]


@pytest_asyncio.fixture
async def sandboxed_harness(
    temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> AsyncIterator[RolloutHarness]:
    """`rollout_harness`, but its worker runs ConfigRollout inside the sandbox."""
    async with sqlite_harness(
        temporal_env, realtime_client, tmp_path, workflow_runner=SandboxedWorkflowRunner()
    ) as harness:
        yield harness


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[each.__name__[5:] for each in SCENARIOS])
async def test_rollouts_run_inside_the_sandbox(
    sandboxed_harness: RolloutHarness, scenario: Callable[[RolloutHarness], Awaitable[None]]
) -> None:
    await scenario(sandboxed_harness)


def test_the_worker_runs_rollouts_outside_the_sandbox() -> None:
    """What the checks above stand in for; should the worker go back into the sandbox, this file
    and the reason in cli/worker.py go with it."""
    assert isinstance(worker_options()["workflow_runner"], UnsandboxedWorkflowRunner)
