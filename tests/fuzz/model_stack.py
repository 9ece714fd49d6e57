"""The live stack the model check drives (tests/fuzz/test_model.py): its settings, the
worker, API and operator backend of one store, and the figures it keeps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Iterator
from concurrent.futures import Future
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tempoconf.activities.abandoned import sweep_abandoned
from tempoconf.cli._api_backend import ApiBackend
from tempoconf.cli._backend import (
    ViewUnavailable,
)
from tempoconf.cli.worker import build_worker
from tempoconf.operations.view import RolloutSnapshot
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api
from tests.fixtures.temporal import (
    IMMEDIATE_CONTINUE_AS_NEW_FLAGS,
    start_test_server,
)
from tests.fuzz.model import NAMESPACES, ROLES, Principal

T = TypeVar("T")

NAMESPACE = NAMESPACES[0]
ROOT = Principal("model", "*", "admin")
"""The model's own principal: it starts the rollouts and reads what the checks read."""
PRINCIPALS = (
    ROOT,
    *(
        Principal(f"{role}-{namespace}", namespace, role)
        for namespace in NAMESPACES
        for role in ROLES
    ),
)
FLEET_TOKEN = "model-check-fleet"
"""The client token of the fleet the checks poll as, and report as, in both namespaces."""
EXAMPLES = int(os.environ.get("TEMPOCONF_MODEL_EXAMPLES") or 50)
STEPS = int(os.environ.get("TEMPOCONF_MODEL_STEPS") or 30)
SHRINK = os.environ.get("TEMPOCONF_MODEL_SHRINK", "") not in ("", "0")
CONFIGS = 2
"""Configs steered at once in one example: their rollouts interleave on one worker and one API."""
MARGIN = 1.0
"""Seconds allowed for a store write to reach the API's snapshot, on a loaded machine."""
TERMINATED_OUTCOME: str | None = "rollout.terminated"
"""The audit action a terminated rollout's trail must end with: the sweep that runs beside every
worker (activities/abandoned.py, issue 12 hole 7) writes it. None would only require that a
terminated rollout has none of the other outcomes (what tempoconf did before the sweep)."""
SWEEP_INTERVAL = 0.5
"""How often the sweep beside the worker looks for ended lock holders (`tempoconf worker`: 5 s)."""
CONTINUE_AS_NEW_AFTER_EVENTS = 40
"""A short history bound, so that the longer rollouts of an example go on as a new run (with the
state continue-as-new carries) under the model's eyes; the figures count them."""
SUMMARY_PREFIX = "model check summary: "
STEP_TIMEOUT = 90.0
"""Bound of one step's work on the event loop (a hang fails the example, it does not hang CI)."""


class ModelViolation(Exception):
    """A poll broke a rule that holds at every moment, not only once a step has propagated: not
    retried by `eventually`."""


@dataclass
class LiveStack:
    """The live stack of one backend, driven from hypothesis's thread on the test's event loop."""

    loop: asyncio.AbstractEventLoop
    backends: dict[Principal, ApiBackend]
    """The CLI's API backend of each principal (PRINCIPALS), each with its own token."""
    http: httpx.AsyncClient
    """The fleet's client of the API (its client token)."""
    temporal: Client
    label: str
    steps: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    outcomes: Counter[str] = field(default_factory=Counter)
    access: Counter[str] = field(default_factory=Counter)
    """Steps by what access made of them: allowed, refused (by the role the model says is
    missing), approvals replayed from a history (none may count)."""
    examples: int = 0
    """Examples run (hypothesis may run fewer than `max_examples`)."""

    @property
    def backend(self) -> ApiBackend:
        """The model's own backend (ROOT)."""
        return self.backends[ROOT]

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.steps[step] += 1
            self.seconds[step] += time.monotonic() - started

    def summary(self) -> dict[str, Any]:
        """The figures as one JSON object (bench/bench_model.py reads it from the output)."""
        return {
            "backend": self.label,
            "examples_run": self.examples,
            "operator_steps": sum(
                n for name, n in self.steps.items() if not name.startswith("check")
            ),
            "steps": dict(self.steps),
            "seconds": {name: round(total, 3) for name, total in self.seconds.items()},
            "outcomes": dict(self.outcomes),
            "access": dict(self.access),
        }

    def figures(self) -> str:
        steps = ", ".join(
            f"{name} {count} ({self.seconds[name] / count:.2f}s each)"
            for name, count in sorted(self.steps.items())
        )
        outcomes = ", ".join(f"{name} {count}" for name, count in sorted(self.outcomes.items()))
        access = ", ".join(f"{name} {count}" for name, count in sorted(self.access.items()))
        return f"steps: {steps}\noutcomes: {outcomes or 'none'}\naccess: {access or 'none'}"

    def run(self, work: Awaitable[T]) -> T:
        async def bounded() -> T:
            return await asyncio.wait_for(work, STEP_TIMEOUT)

        future: Future[T] = asyncio.run_coroutine_threadsafe(bounded(), self.loop)
        return future.result()


# The fixtures of the modules that import them (test_model.py, test_model_findings.py), under
# the names the shared ones have (tests/fixtures/temporal.py), which they replace there.
@pytest_asyncio.fixture(scope="module", name="temporal_env")
async def model_temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """The module's own dev server, on which a run that continues as new is not held back: the
    model's short history bound makes most rollouts continue as new within a second of their
    start, and the server's guard against continue-as-new loops held each new run back for the
    rest of that second (tests/fixtures/temporal.py), two thirds of an example's time."""
    env = await start_test_server(IMMEDIATE_CONTINUE_AS_NEW_FLAGS)
    try:
        yield env
    finally:
        await env.shutdown()


@pytest_asyncio.fixture(scope="module", name="realtime_client")
async def model_realtime_client(temporal_env: WorkflowEnvironment) -> Client:
    return await temporal_env.connect_client()


@pytest.fixture(name="backend_name")
def model_backend_name(database_url: str) -> str:
    return "postgresql" if database_url.startswith("postgresql") else "sqlite"


def token_of(principal: Principal) -> str:
    return f"{principal.name}-secret"


@asynccontextmanager
async def operator_stack(
    store: Store,
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    *,
    continue_as_new_after_events: int,
) -> AsyncIterator[tuple[dict[Principal, ApiBackend], httpx.AsyncClient]]:
    """A worker on its own task queue, the API over HTTP on `store` under a two-team access
    policy (a token of each role in each namespace, the model's own admin everywhere, one fleet
    reading both, the signing key: approvals are signed), and the operators' view of them: the
    CLI's `ApiBackend` of each principal, and the fleet's HTTP client of the API."""
    task_queue = f"tempoconf-model-{uuid.uuid4().hex[:8]}"
    policy = write_policy(
        tmp_path / "access",
        tokens={
            principal.name: (token_of(principal), [([principal.namespace], [principal.role])])
            for principal in PRINCIPALS
        },
        clients={"fleet": (FLEET_TOKEN, list(NAMESPACES))},
    )
    settings_ = Settings(
        data_dir=tmp_path,
        temporal_address=temporal_env.client.service_client.config.target_host,
        task_queue=task_queue,
        access_file=policy,
    )
    worker = build_worker(
        temporal_env.client,
        store,
        task_queue=task_queue,
        continue_as_new_after_events=continue_as_new_after_events,
    )
    # As `tempoconf worker` runs it: the sweep that ends rollouts whose workflow was terminated.
    sweep = asyncio.create_task(
        sweep_abandoned(temporal_env.client, store, interval=SWEEP_INTERVAL)
    )
    try:
        async with worker, live_api(store, settings_) as api, contextlib.AsyncExitStack() as stack:
            backends = {
                principal: await stack.enter_async_context(
                    ApiBackend.connect(
                        replace(settings_, api_url=api, api_token=token_of(principal))
                    )
                )
                for principal in PRINCIPALS
            }
            http = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=api,
                    timeout=30,
                    headers={"Authorization": f"Bearer {FLEET_TOKEN}"},
                )
            )
            yield backends, http
    finally:
        sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep


async def answered_view(
    backend: ApiBackend, path: str, workflow_id: str, namespace: str = NAMESPACE
) -> RolloutSnapshot:
    """The rollout's view once its workflow answered: a status query its worker did not answer
    within its bound (a busy worker, a run to replay after continue-as-new) is a "not yet"."""
    try:
        snapshot, _ = await backend.rollout_view(namespace, path, workflow_id)
    except ViewUnavailable as unavailable:
        assert unavailable.kind != "no_answer", str(unavailable)  # asked again by `eventually`
        raise
    return snapshot
