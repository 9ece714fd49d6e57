"""A new worker build while a rollout holds: docs/how-to/upgrades.md's "Deploy a new worker while
rollouts run", run as written against the test server, with the real `tempoconf worker` as build A and
build B (tests/cli/worker_builds.py) a `ConfigRollout` with a new step.

Rollouts here hold for an hour on the real clock, so that the deploy happens mid-hold; `advance`
ends the hold once build B is the only worker. No test waits on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import VersioningBehavior
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tempoconf.cli import worker as worker_module
from tempoconf.cli.devstack import DevStack
from tempoconf.cli.worker import (
    WorkerSettingsError,
    build_worker,
    default_build_id,
    deployment_config,
    make_version_current,
    worker_activities,
)
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE
from tempoconf.workflows.rollout import ConfigRollout
from tests.cli.conftest import bash, cli_env, page, shell_blocks, wait_for_output
from tests.cli.worker_builds import (
    NEW_STEP_ACTIVITY,
    ConfigRolloutWithNewStep,
    ConfigRolloutWithUnguardedStep,
    new_step,
)
from tests.fixtures.temporal import rollout_result
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.timeout(180)

SECTION = "\n## Deploy a new worker while rollouts run\n"
BUILD_A = "2025-06-01.1"
BUILD_B = "2025-06-02.1"
WORKER_START_TIMEOUT = 60.0
WORKER_STOP_TIMEOUT = 30.0


# -- the guide's procedure ---------------------------------------------------------------------
@dataclass(frozen=True)
class DeployProcedure:
    """The commands of the guide's deploy block, as written."""

    export: str
    worker: str
    describe_version: str
    set_current_version: str


def deploy_procedure() -> DeployProcedure:
    text = page("how-to/upgrades.md")
    assert SECTION in text, f"the upgrades guide has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = shell_blocks(section)
    assert len(blocks) == 1, "the deploy section has one ```sh block"
    commands = [command.text for command in blocks[0].commands]
    assert len(commands) == 4, commands
    export, worker, describe, set_current = commands
    assert (
        export.startswith("export TEMPOCONF_DEPLOYMENT_NAME=") and " TEMPOCONF_BUILD_ID=" in export
    )
    assert worker == ".venv/bin/tempoconf worker"
    assert "worker deployment describe-version" in describe
    assert "worker deployment set-current-version" in set_current
    return DeployProcedure(export, worker, describe, set_current)


@dataclass
class Stack:
    """The session's server, a task queue and deployment of this test's own, and the shell
    environment the guide's commands run in (a clone's `.venv` is this test's)."""

    env: WorkflowEnvironment
    realtime_client: Client
    clone: Path
    database_url: str
    task_queue: str
    deployment: str

    def shell_env(self, build_id: str) -> dict[str, str]:
        """What the guide's `export` line (and the deployment's usual settings) give a shell.

        The test's own deployment name, not the guide's `tempoconf`: every test of the session
        shares the server, and a deployment's current version is one per namespace."""
        return cli_env(
            TEMPORAL_ADDRESS=self.env.client.service_client.config.target_host,
            TEMPOCONF_TASK_QUEUE=self.task_queue,
            TEMPOCONF_DATABASE_URL=self.database_url,
            TEMPOCONF_DEPLOYMENT_NAME=self.deployment,
            TEMPOCONF_BUILD_ID=build_id,
        )

    def start_worker(self, command: str, build_id: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as output:
            return subprocess.Popen(
                ["bash", "-c", command], cwd=self.clone, env=self.shell_env(build_id),
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    async def make_current(self, procedure: DeployProcedure, build_id: str) -> None:
        """Steps 2 and 3 of the guide, as written: wait until the build polls, make it current."""

        def polls() -> bool:
            described = bash(
                procedure.describe_version, cwd=self.clone, env=self.shell_env(build_id)
            )
            assert described.returncode == 0, described.stdout + described.stderr
            queue_lines = [
                line.split() for line in described.stdout.splitlines() if self.task_queue in line
            ]
            # "lists the task queue (workflow and activity)", as the guide says
            assert sorted(kind for _, kind in queue_lines) == ["activity", "workflow"], (
                described.stdout
            )
            return True

        await eventually(polls, what=f"build {build_id} to poll {self.task_queue}")
        made = bash(procedure.set_current_version, cwd=self.clone, env=self.shell_env(build_id))
        assert made.returncode == 0, made.stdout + made.stderr


@pytest_asyncio.fixture
async def stack(
    temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> AsyncIterator[Stack]:
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(Path(sys.prefix))
    yield Stack(
        env=temporal_env,
        realtime_client=realtime_client,
        clone=clone,
        database_url=f"sqlite:///{tmp_path / 'tempoconf.db'}",
        task_queue=f"tempoconf-deploy-{uuid.uuid4().hex[:8]}",
        deployment=f"tempoconf-test-{uuid.uuid4().hex[:8]}",
    )


@pytest.fixture
def store(stack: Stack) -> Iterator[Store]:
    opened = Store(stack.database_url, migrate=True)
    yield opened
    opened.close()


def build_b(stack: Stack, store: Store, workflow: type) -> Worker:
    """Build B: `workflow` (ConfigRollout with a new step) and every activity, plus the new one."""
    client = stack.env.client
    return Worker(
        client,
        task_queue=stack.task_queue,
        workflows=[workflow],
        activities=[*worker_activities(client, store), new_step],
        deployment_config=deployment_config(
            Settings(deployment_name=stack.deployment, build_id=BUILD_B)
        ),
    )


def stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM, as a deployment stops a worker; the exit code."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=WORKER_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise


# -- rollouts ----------------------------------------------------------------------------------
def one_stage_request(cooldown: str = "1h") -> dict[str, Any]:
    return {
        "path": f"myproject/deploys_{uuid.uuid4().hex[:8]}",
        "value": {"max_connections": 2000},
        "default_cooldown_time": cooldown,
        "default_expiration_time": "2h",
        "stages": [{"channel": "canary"}],
        "author": "alice@example.com",
    }


async def start(client: Client, stack: Stack, request: dict[str, Any]) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        WORKFLOW_TYPE,
        request,
        id=f"rollout-deploy-{uuid.uuid4().hex[:10]}",
        task_queue=stack.task_queue,
    )


async def wait_holding(handle: WorkflowHandle[Any, Any]) -> None:
    async def holding() -> bool:
        progress = await handle.query("status", result_type=dict)
        assert progress["state"] == "holding", progress["state"]
        return True

    await eventually(holding, what=f"{handle.id} to hold its stage")


async def outcome(handle: WorkflowHandle[Any, Any], *, on: str) -> dict[str, Any]:
    """The rollout's result once it ended; fails saying so if it never does (e.g. pinned to a
    build that no longer runs)."""

    async def ended() -> bool:
        return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING

    await eventually(ended, what=f"{handle.id} to end on {on}", timeout=60.0)
    result: dict[str, Any] = await rollout_result(handle)
    return result


async def history(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [event async for event in handle.fetch_history_events()]


def events(history: list[HistoryEvent], kind: EventType.ValueType) -> list[HistoryEvent]:
    return [event for event in history if event.event_type == kind]


def activities(history: list[HistoryEvent]) -> list[str]:
    scheduled = events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name for event in scheduled
    ]


def task_builds(history: list[HistoryEvent]) -> list[str]:
    """The build that completed each workflow task, in order."""
    return [
        event.workflow_task_completed_event_attributes.deployment_version.build_id
        for event in events(history, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    ]


async def running_build(handle: WorkflowHandle[Any, Any]) -> str:
    described = await handle.describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return info.deployment_version.build_id


async def running_behavior(handle: WorkflowHandle[Any, Any]) -> VersioningBehavior:
    described = await handle.describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return VersioningBehavior(info.behavior)


# -- the tests ---------------------------------------------------------------------------------
async def test_a_rollout_started_on_build_a_is_promoted_by_build_b(
    stack: Stack, store: Store, tmp_path: Path
) -> None:
    procedure = deploy_procedure()
    # Before versioning: an unversioned worker (as every one was) and a rollout holding on it.
    unversioned_worker = build_worker(stack.env.client, store, task_queue=stack.task_queue)
    running_unversioned = asyncio.create_task(unversioned_worker.run())
    log = tmp_path / "worker-a.log"
    worker_a: subprocess.Popen[bytes] | None = None
    try:
        before = await start(stack.realtime_client, stack, one_stage_request())
        await wait_holding(before)

        # Build A, the first deploy with versioning: the real `tempoconf worker` beside the
        # unversioned one, made current by the guide's commands, then the unversioned one stopped.
        worker_a = stack.start_worker(procedure.worker, BUILD_A, log)
        wait_for_output(
            log, f"as version {stack.deployment}.{BUILD_A}", worker_a, WORKER_START_TIMEOUT
        )
        await stack.make_current(procedure, BUILD_A)
        await unversioned_worker.shutdown()
        old = await start(stack.realtime_client, stack, one_stage_request())
        await wait_holding(old)
        assert await running_build(old) == BUILD_A

        # Build B beside A, made current, then A stopped: the guide's deploy, mid-hold.
        async with build_b(stack, store, ConfigRolloutWithNewStep):
            await stack.make_current(procedure, BUILD_B)
            assert stop(worker_a) == 0, log.read_text(errors="replace")

            for rollout, first_build in ((old, BUILD_A), (before, "")):
                await rollout.signal("advance")
                result = await outcome(rollout, on=f"build {BUILD_B}, build {BUILD_A} stopped")
                assert result["outcome"] == "promoted", result
                rollout_history = await history(rollout)
                failed = events(rollout_history, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
                assert failed == [], failed
                # Started before the deploy, ended by B, which skipped the step not taken before.
                builds = task_builds(rollout_history)
                assert builds[0] == first_build and builds[-1] == BUILD_B, builds
                assert NEW_STEP_ACTIVITY not in activities(rollout_history)
                assert await running_behavior(rollout) == VersioningBehavior.AUTO_UPGRADE
                # What the guide says `temporal workflow describe -w ID` shows.
                described = bash(
                    f".venv/bin/temporal workflow describe -w {rollout.id}",
                    cwd=stack.clone,
                    env=stack.shell_env(BUILD_B),
                )
                assert described.returncode == 0, described.stderr
                info = described.stdout.split("Versioning Info:", 1)[1]
                assert re.search(r"Behavior\s+AutoUpgrade", info), info
                assert re.search(rf"BuildId\s+{re.escape(BUILD_B)}\n", info), info

            # A rollout started after the deploy runs on B, new step included (time skipped).
            new = await start(stack.env.client, stack, one_stage_request())
            result = await outcome(new, on=f"build {BUILD_B}")
            assert result["outcome"] == "promoted", result
            new_history = await history(new)
            assert events(new_history, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) == []
            assert set(task_builds(new_history)) == {BUILD_B}
            assert activities(new_history).count(NEW_STEP_ACTIVITY) == 1
            assert events(new_history, EventType.EVENT_TYPE_MARKER_RECORDED)  # the patch
    finally:
        if worker_a is not None and worker_a.poll() is None:
            stop(worker_a)
        if not unversioned_worker.is_shutdown:
            await unversioned_worker.shutdown()
        await running_unversioned


async def test_the_new_step_without_patched_breaks_a_rollout_started_on_build_a(
    stack: Stack, store: Store
) -> None:
    """What `workflow.patched` prevents, shown: without it B cannot replay A's history."""
    client = stack.env.client
    a = deployment_config(Settings(deployment_name=stack.deployment, build_id=BUILD_A))
    assert a is not None
    worker_a = Worker(
        client,
        task_queue=stack.task_queue,
        workflows=[ConfigRollout],
        activities=worker_activities(client, store),
        deployment_config=a,
    )
    running_a = asyncio.create_task(worker_a.run())
    old: WorkflowHandle[Any, Any] | None = None
    try:
        await make_version_current(client, a.version)
        old = await start(stack.realtime_client, stack, one_stage_request())
        await wait_holding(old)
        async with build_b(stack, store, ConfigRolloutWithUnguardedStep):
            await make_version_current(client, replace(a.version, build_id=BUILD_B))
            await worker_a.shutdown()
            await old.signal("advance")

            handle = old

            async def failed_task() -> HistoryEvent:
                failed = events(await history(handle), EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
                assert failed, "no workflow task failed yet"
                return failed[0]

            failure = await eventually(failed_task, what="build B to fail the old rollout's task")
            attributes = failure.workflow_task_failed_event_attributes
            assert (
                attributes.cause
                == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR
            ), attributes
            assert "nondetermin" in attributes.failure.message.lower(), attributes.failure.message
    finally:
        if old is not None:
            await old.terminate(reason="test: the broken build cannot go on")
        if not worker_a.is_shutdown:
            await worker_a.shutdown()
        running_a.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running_a


async def test_a_versioned_dev_stack_makes_its_own_build_current(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "state",
        temporal_port=0,
        ui_port=0,
        api_port=0,
        deployment_name="tempoconf",
    )
    async with DevStack(settings, api=False) as dev:
        handle = await dev.client.start_workflow(
            WORKFLOW_TYPE,
            {"path": "myproject/versioned_dev", "value": {"a": 1}, "author": "alice"},
            id="rollout-versioned-dev",
            task_queue=dev.settings.task_queue,
        )
        result = await outcome(handle, on="the dev stack's own build")
        assert result["outcome"] == "promoted", result
        assert await running_build(handle) == default_build_id()


# -- settings ----------------------------------------------------------------------------------
def test_a_worker_without_a_deployment_name_is_unversioned() -> None:
    assert deployment_config(Settings()) is None


def test_the_build_id_defaults_to_the_version_and_a_hash_of_the_code() -> None:
    config = deployment_config(Settings(deployment_name="tempoconf"))
    assert config is not None and config.use_worker_versioning
    assert config.default_versioning_behavior == VersioningBehavior.AUTO_UPGRADE
    build_id = default_build_id()
    assert config.version.build_id == build_id
    version, digest = build_id.rsplit("-", 1)
    assert version and len(digest) == 12 and int(digest, 16) >= 0
    assert default_build_id() == build_id  # the same code, the same build


def test_the_build_id_covers_every_module_a_worker_runs() -> None:
    """Each tempoconf module the workflow and the activities load is in a package the build id
    hashes: a change to any of them is a new build (a subpackage missed would not be)."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tempoconf.workflows.rollout, tempoconf.activities.rollout, "
            "tempoconf.activities.prepare, tempoconf.activities.health, "
            "tempoconf.activities.applied, tempoconf.activities.gates, "
            "tempoconf.activities.notify, tempoconf.activities.abandoned, "
            "tempoconf.activities.failures, tempoconf.activities.heartbeats; "
            "print('\\n'.join(m for m in sys.modules if m.startswith('tempoconf')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hashed = set(worker_module._BUILD_PACKAGES)
    missed = [
        module
        for module in loaded
        if module not in hashed and module.rpartition(".")[0] not in hashed
    ]
    assert not missed, f"modules a worker runs that the build id does not hash: {missed}"


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (Settings(build_id="v2"), "needs a deployment name: set TEMPOCONF_DEPLOYMENT_NAME"),
        (Settings(deployment_name="tempoconf.prod"), "must be non-empty and contain no '.'"),
    ],
)
def test_versioning_settings_that_do_not_fit_are_refused(settings: Settings, says: str) -> None:
    with pytest.raises(WorkerSettingsError, match=re.escape(says)):
        deployment_config(settings)


def test_tempoconf_worker_refuses_a_build_id_without_a_deployment_name(tmp_path: Path) -> None:
    worker = subprocess.run(
        [str(Path(sys.executable).parent / "tempoconf"), "worker", "--build-id", "v2"],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert worker.returncode == 1, worker.stdout + worker.stderr
    assert "build id 'v2' (TEMPOCONF_BUILD_ID or --build-id) needs a deployment name" in (
        worker.stdout + worker.stderr
    )
