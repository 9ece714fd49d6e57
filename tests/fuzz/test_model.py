"""The model check (issue 12): random sequences of operator commands against a live stack, each
step checked against the small reference model of tests/fuzz/model.py.

The stack is real: the Temporal dev server (tests/fixtures/temporal.py), a worker on the store,
the API over HTTP (tests/fixtures/services.py `live_api`), on SQLite and on PostgreSQL. Every
operator step goes the way `tempoconf rollout ...` goes with TEMPOCONF_API_URL set: the CLI's own
`ApiBackend` through the admin API, which sends the workflow's updates; `terminate` is Temporal's
own (`temporal workflow terminate`), since tempoconf has none. Rollouts run on the real clock
(the model, not a timer, decides when a stage widens: every hold is an hour).

A hypothesis `RuleBasedStateMachine` draws start, halt, bypass, advance, pause, resume, approve,
report (healthy or failing, from inside or outside the cohort), terminate and "wait until a
terminated rollout's leases lapse", on two configs at once. After every step:
- each of 12 client identities per config (tests/fuzz/model.py `identities_for`) is served
  exactly what the model says (version and stage), once the step has propagated;
- no poll, ever, answers a version every client had seen taken away (halted, reverted as
  unhealthy, replaced as stable, a terminated rollout's once its leases ran out);
- a served lease is never expired and never longer than one expiration from now;
- the workflow is where the model says (state, stage, paused), a refused update is refused and
  an accepted one accepted;
- every rollout that ended has exactly one outcome in its audit trail, last, the one the model
  expects, with each of its stages published once (a terminated one: `rollout.terminated`, from
  the sweep that runs beside the worker); a start after a terminate takes or reclaims the lock.

In CI: TEMPOCONF_MODEL_EXAMPLES (default 50) examples of up to TEMPOCONF_MODEL_STEPS (default
30) steps per backend. A longer run sets them higher:
`TEMPOCONF_MODEL_EXAMPLES=200 .venv/bin/python -m pytest -s -m fuzz tests/fuzz/test_model.py`,
or `bench/bench_model.py --minutes 30` (`make bench` runs it). The seed is printed
(`-s`, and with a failure's output); HYPOTHESIS_SEED=N replays it. Shrinking is off (an example
costs seconds of real time); TEMPOCONF_MODEL_SHRINK=1 turns it on to minimise a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from tempoconf.activities.abandoned import sweep_abandoned
from tempoconf.canonical import version_id
from tempoconf.cli._api_backend import ApiBackend
from tempoconf.cli._backend import (
    CommandRefused,
    DirectBackend,
    LockBusy,
    OperatorCommandInput,
    ViewUnavailable,
)
from tempoconf.cli.worker import build_worker
from tempoconf.operations.view import RolloutSnapshot
from tempoconf.rollout.stages import StageSpec as RequestStage
from tempoconf.rollout.stages import unwidening_stages
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.fixtures.services import live_api
from tests.fixtures.temporal import (
    IMMEDIATE_CONTINUE_AS_NEW_FLAGS,
    rollout_result,
    start_test_server,
)
from tests.fixtures.waiting import eventually
from tests.fuzz.model import (
    COMMANDS,
    HEALTH_CHECK,
    LEASE_SECONDS,
    OUTCOME_ACTIONS,
    STAGES,
    ConfigModel,
    Ended,
    Identity,
    Lapsing,
    Report,
    RolloutModel,
    Served,
    StageSpec,
    identities_for,
)

pytestmark = pytest.mark.fuzz

T = TypeVar("T")

NAMESPACE = "default"
ADMIN_TOKEN = "model-check-admin"
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
    backend: ApiBackend
    http: httpx.AsyncClient
    temporal: Client
    label: str
    steps: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    outcomes: Counter[str] = field(default_factory=Counter)
    examples: int = 0
    """Examples run (hypothesis may run fewer than `max_examples`)."""

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
        }

    def figures(self) -> str:
        steps = ", ".join(
            f"{name} {count} ({self.seconds[name] / count:.2f}s each)"
            for name, count in sorted(self.steps.items())
        )
        outcomes = ", ".join(f"{name} {count}" for name, count in sorted(self.outcomes.items()))
        return f"steps: {steps}\noutcomes: {outcomes or 'none'}"

    def run(self, work: Awaitable[T]) -> T:
        async def bounded() -> T:
            return await asyncio.wait_for(work, STEP_TIMEOUT)

        future: Future[T] = asyncio.run_coroutine_threadsafe(bounded(), self.loop)
        return future.result()


# -- the state machine --------------------------------------------------------------------------
def _widening(drawn: list[tuple[StageSpec, bool]]) -> list[tuple[StageSpec, bool]]:
    """The drawn stages that widen the ones kept before them (docs/contract.md, Stages): a map,
    not a filter, so every draw is used and a replay draws exactly as the first run did."""
    kept: list[tuple[StageSpec, bool]] = []
    for stage, manual in drawn:
        specs = [RequestStage.model_validate(s.request()) for s, _ in [*kept, (stage, manual)]]
        if not unwidening_stages(specs):
            kept.append((stage, manual))
    return kept


stage_lists = st.lists(
    st.tuples(st.sampled_from(STAGES), st.booleans()),
    min_size=1,
    max_size=3,
    unique_by=lambda s: s[0].name,
).map(_widening)
config_indices = st.integers(0, CONFIGS - 1)
NEEDS_RUNNING = frozenset({*COMMANDS, "report", "terminate"})
ACTIONS = (
    "start",
    "start",
    "start_unstaged",
    *COMMANDS,
    "advance",
    "approve",
    "report",
    "report",
    "report",
    "terminate",
    "wait_for_lapse",
)
"""Drawn uniformly: a staged start twice as often as the rest, a report three times (a stage is
reverted only when failing reports from its cohort precede an `advance`), and the two commands
that move a rollout on, so that rollouts get past their first stage. `start_unstaged` promotes a
value at once (a config's first stable value, say)."""


class RolloutMachine(RuleBasedStateMachine):
    stack: ClassVar[LiveStack]

    def __init__(self) -> None:
        super().__init__()
        self.configs: list[ConfigModel] = []
        self.steps = 0
        self.log: list[str] = []

    # -- helpers -------------------------------------------------------------------------------
    @property
    def backend(self) -> ApiBackend:
        return self.stack.backend

    async def wait_state(self, config: ConfigModel) -> None:
        """The workflow is where the model says, as `tempoconf rollout status --json` sees it."""
        rollout = config.running
        assert rollout is not None
        want = (rollout.phase.value, rollout.stage, rollout.paused)

        async def there() -> dict[str, Any]:
            snapshot = await answered_view(self.backend, config.path, rollout.workflow_id)
            progress = snapshot.progress or {}
            seen = (progress.get("state"), progress.get("stage_index"), progress.get("paused"))
            assert seen == want, f"(state, stage index, paused) is {seen}, the model says {want}"
            return progress

        await eventually(there, what=f"{rollout.workflow_id} to be where the model says")

    async def wait_outcome(self, config: ConfigModel, ended: Ended) -> None:
        # The workflow's result directly: the admin API's wait polls once a second.
        result = await rollout_result(self.stack.temporal.get_workflow_handle(ended.workflow_id))
        assert result["outcome"] == ended.outcome, (result, ended.outcome)
        assert result["stable_version"] == config.stable, (result, config.stable)

    # -- rules ---------------------------------------------------------------------------------
    @initialize()
    def configs_of_this_example(self) -> None:
        self.stack.examples += 1
        for _ in range(CONFIGS):
            path = f"model/config-{uuid.uuid4().hex[:10]}"
            self.configs.append(ConfigModel(path, identities_for(path)))

    @rule(index=config_indices, action=st.sampled_from(ACTIONS), data=st.data())
    def step(self, index: int, action: str, data: st.DataObject) -> None:
        """One operator step. A single rule, not one per action: hypothesis's swarm testing turns
        off about half of a machine's rules in each example, which a bounded run of a few
        examples cannot afford. An action that needs a running rollout takes the other config's,
        or starts one when neither runs."""
        config = self.configs[index]
        others = [other for other in self.configs if other is not config]
        if action in NEEDS_RUNNING and config.running is None:
            running = [other for other in others if other.running is not None]
            if running:
                config = running[0]
            else:
                action = "start"
        elif action.startswith("start") and config.running is not None:
            # The refusal of a second start is checked when every config runs a rollout.
            config = next((other for other in others if other.running is None), config)
        where = f"step {len(self.log) + 1}: {action} on {config.path}"
        try:
            if action == "start":
                drawn = data.draw(stage_lists, label="stages")
                self.log.append(f"{where}, stages {[(s.name, manual) for s, manual in drawn]}")
                self.start(config, drawn)
            elif action == "start_unstaged":
                self.log.append(where)
                self.start(config, [])
            elif action == "report":
                client = data.draw(st.integers(0, len(config.identities) - 1), label="client")
                claims = data.draw(st.booleans(), label="claims the rollout's version")
                ok = data.draw(st.integers(0, 5), label="ok")
                failed = data.draw(st.integers(0, 5), label="failed")
                self.log.append(
                    f"{where}: {config.identities[client]} claims_rollout={claims} ok={ok} "
                    f"failed={failed}"
                )
                self.report(config, client=client, claims_rollout=claims, ok=ok, failed=failed)
            elif action == "terminate":
                self.log.append(where)
                self.terminate(config)
            elif action == "wait_for_lapse":
                self.log.append(where)
                self.wait_for_lapse()
            else:
                self.log.append(where)
                self.command(config, action)
        except BaseException as failure:
            # The live stack answers a replay differently: say what this example did.
            failure.add_note("the example's steps:\n  " + "\n  ".join(self.log))
            raise

    def start(self, config: ConfigModel, drawn: list[tuple[StageSpec, bool]]) -> None:
        config.rollouts += 1
        value = {"path": config.path, "rollout": config.rollouts}
        stages = tuple(replace(stage, manual=manual) for stage, manual in drawn)
        request: dict[str, Any] = {
            "path": config.path,
            "namespace": NAMESPACE,
            "value": value,
            "default_cooldown_time": "1h",
            "default_expiration_time": f"{LEASE_SECONDS:g}s",
            "stages": [stage.request() for stage in stages],
            "health": [HEALTH_CHECK],
            "author": "model",
            "message": f"model rollout {config.rollouts}",
        }
        workflow_id = f"model-{config.path.rsplit('-', 1)[-1]}-{config.rollouts}"
        with self.stack.timed("start"):
            self.stack.run(self._start(config, request, workflow_id, stages))

    async def _start(
        self,
        config: ConfigModel,
        request: dict[str, Any],
        workflow_id: str,
        stages: tuple[StageSpec, ...],
    ) -> None:
        prepared = await self.backend.prepare(request)
        version = version_id(request["value"])
        assert prepared.version == version
        if config.running is not None:
            # One running rollout per config: the second start is refused, nothing changes.
            try:
                await self.backend.start(request, prepared, workflow_id)
            except LockBusy as busy:
                assert busy.lock.workflow_id == config.running.workflow_id
            else:
                raise AssertionError(f"a second rollout of {config.path} was started")
            config.rollouts -= 1  # its value was never stored: the next start may reuse it
            return
        await self.backend.start(request, prepared, workflow_id)
        reclaimed, config.reclaim_from = config.reclaim_from, None
        # Its begin_rollout clears a terminated rollout's stages: they are not served any more.
        if config.lapsing is not None:
            config.retiring.append(config.lapsing.rollout.version)
            config.lapsing = None
        if not stages:
            config.running = RolloutModel(workflow_id, version, stages, published=0)
            config.end("promoted", "rollout.promoted", "no stages")
            await self.wait_outcome(config, config.ended[-1])
        else:
            config.running = RolloutModel(workflow_id, version, stages)
            await self.wait_state(config)
        if reclaimed is not None:
            await self.check_reclaimed(config, workflow_id, reclaimed)

    def command(self, config: ConfigModel, name: str) -> None:
        with self.stack.timed(name):
            self.stack.run(self._command(config, name))

    async def _command(self, config: ConfigModel, name: str) -> None:
        rollout = config.running
        assert rollout is not None
        refused = rollout.refusal(name)
        try:
            answer = (
                await self.backend.command(
                    OperatorCommandInput(
                        NAMESPACE,
                        config.path,
                        name,
                        f"model step {self.steps}",
                        workflow_id=rollout.workflow_id,
                    )
                )
            ).result
        except CommandRefused as refusal:
            assert refused, f"{name} was refused, the model takes it: {refusal}"
            return
        assert not refused, f"{name} was taken ({answer}), the model refuses it"
        assert answer["accepted"] is True, answer
        config.command(name)
        # The answer comes once the command took effect (docs/contract.md): where it says the
        # rollout is, is where the model says.
        if not answer["message"].startswith("requested:"):
            if config.running is not None:
                want = (config.running.phase.value, config.running.stage + 1)
            else:
                want = (config.ended[-1].outcome, answer["stage_number"])
            assert (answer["state"], answer["stage_number"]) == want, (answer, want)
        if config.running is not None:
            await self.wait_state(config)
        else:
            await self.wait_outcome(config, config.ended[-1])

    def report(
        self, config: ConfigModel, *, client: int, claims_rollout: bool, ok: int, failed: int
    ) -> None:
        rollout = config.running
        assert rollout is not None
        identity = config.identities[client]
        (served,) = config.allowed(identity, time.time(), time.time())
        # A client reports on the version it runs; or claims the rollout's, which counts only
        # from the cohort (a host outside it says nothing about the rollout).
        version = rollout.version if claims_rollout or served is None else served.version
        report = Report(identity, version, ok or (0 if failed else 1), failed, rollout.stage)
        with self.stack.timed("report"):
            self.stack.run(self._report(config, report))
        rollout.reports.append(report)

    async def _report(self, config: ConfigModel, report: Report) -> None:
        body: dict[str, Any] = {
            "path": config.path,
            "namespace": NAMESPACE,
            "client": report.identity.client,
            "version": report.version,
            "ok": report.ok,
            "failed": report.failed,
        }
        if report.failed:
            body["error"] = "model: failing"
        # A client with neither channel nor labels names neither: the API matches it with the
        # identity it polls with (the same one).
        if report.identity.channel is not None:
            body["channel"] = report.identity.channel
        if report.identity.labels:
            body["labels"] = dict(report.identity.labels)
        response = await self.stack.http.post("/v1/reports", json=body)
        assert response.status_code == 202, response.text

    def terminate(self, config: ConfigModel) -> None:
        with self.stack.timed("terminate"):
            self.stack.run(self._terminate(config))

    async def _terminate(self, config: ConfigModel) -> None:
        rollout = config.running
        assert rollout is not None
        handle = self.stack.temporal.get_workflow_handle(rollout.workflow_id)
        # Each live stage is served at least until the lease the workflow last renewed.
        progress = await handle.query("status", result_type=dict)
        live_until = {
            stage["index"]: datetime.fromisoformat(stage["expires_at"]).timestamp() - MARGIN
            for stage in progress["stages"]
            if stage.get("expires_at") and stage["index"] < rollout.published
        }
        await handle.terminate(reason="model: terminated without cleanup")
        config.running = None
        # A renewal already running when the terminate lands may still extend the lease a little.
        gone_by = time.time() + LEASE_SECONDS + MARGIN
        config.lapsing = Lapsing(rollout, live_until, gone_by=gone_by)
        config.reclaim_from = rollout.workflow_id
        config.ended.append(
            Ended(rollout.workflow_id, rollout.version, "terminated", None, "", rollout.published)
        )

    def wait_for_lapse(self) -> None:
        """Let a terminated rollout's leases run out: after one expiration nobody gets it."""
        now = time.time()
        lapsing = [c.lapsing.gone_by for c in self.configs if c.lapsing and c.lapsing.gone_by > now]
        if not lapsing:
            return
        gone_by = max(lapsing)
        with self.stack.timed("wait_for_lapse"):
            time.sleep(max(gone_by - time.time(), 0.0) + MARGIN)

    # -- checks after every step ---------------------------------------------------------------
    @invariant()
    def served_as_the_model_says(self) -> None:
        if not self.configs:
            return
        self.steps += 1
        try:
            checked_from = time.time()
            with self.stack.timed("check: clients served"):
                self.stack.run(self._served_as_the_model_says())
            for config in self.configs:
                config.retire(checked_from)
            with self.stack.timed("check: audit trails"):
                self.stack.run(self._audit_trails())
        except BaseException as failure:
            failure.add_note("the example's steps:\n  " + "\n  ".join(self.log))
            raise

    async def _served_as_the_model_says(self) -> None:
        async def poll(config: ConfigModel, identity: Identity) -> str | None:
            sent = time.time()
            response = await self.stack.http.get(
                f"/v1/configs/{config.path}", params=identity.query()
            )
            received = time.time()
            if response.status_code == 404:
                answer = None
            else:
                assert response.status_code == 200, response.text
                body = response.json()
                answer = Served(body["version"], body["stage"])
                if body["version"] in config.retired:
                    raise ModelViolation(
                        f"{config.path}: {identity} was served {answer}, a version every client "
                        "had seen taken away"
                    )
                if body["stage"] != "stable":
                    expires = datetime.fromisoformat(body["expires_at"]).timestamp()
                    if not sent - MARGIN < expires <= received + LEASE_SECONDS + MARGIN:
                        raise ModelViolation(
                            f"{config.path}: {identity} was served {answer} with a lease to "
                            f"{body['expires_at']} at {datetime.fromtimestamp(sent).isoformat()}"
                        )
            allowed = config.allowed(identity, sent, received)
            if answer in allowed:
                return None
            wanted = " or ".join(sorted(str(a) if a else "404" for a in allowed))
            return f"{config.path}: {identity} got {answer or '404'}, the model says {wanted}"

        async def all_served() -> bool:
            problems = await asyncio.gather(
                *(poll(c, identity) for c in self.configs for identity in c.identities)
            )
            wrong = [problem for problem in problems if problem is not None]
            assert not wrong, "\n".join(wrong)
            return True

        await eventually(all_served, what="every client to be served what the model says")

    async def _audit_trails(self) -> None:
        for config in self.configs:
            unchecked = [ended for ended in config.ended if not ended.checked]
            if not unchecked:
                continue
            for ended in unchecked:
                await eventually(
                    partial(self.check_trail, config, ended),
                    what=f"the audit trail of {ended.workflow_id} to end with its outcome",
                )
                ended.checked = True
                self.stack.outcomes[ended.outcome] += 1
                description = await self.stack.temporal.get_workflow_handle(
                    ended.workflow_id
                ).describe()
                first_run = description.raw_description.workflow_execution_info.first_run_id
                if description.run_id != first_run:
                    self.stack.outcomes["(of which continued as new)"] += 1

    async def check_trail(self, config: ConfigModel, ended: Ended) -> bool:
        history = await self.backend.history(NAMESPACE, config.path, limit=1000)
        trail = [entry for entry in history if entry.workflow_id == ended.workflow_id]
        actions = [entry.action for entry in trail]
        # A start after a terminated rollout reclaims its lock first, then begins.
        begun = [action for action in actions if action != "lock.reclaimed"]
        assert begun and begun[0] == "rollout.started", actions
        assert actions.count("stage.published") == ended.published, actions
        outcomes = [entry for entry in trail if entry.action in OUTCOME_ACTIONS]
        if ended.action is None:  # terminated
            if TERMINATED_OUTCOME is None:
                assert not outcomes, f"a terminated rollout's trail has an outcome: {actions}"
                return True
            outcomes = [entry for entry in trail if entry.action == TERMINATED_OUTCOME]
            assert len(outcomes) == 1 and trail[-1] is outcomes[0], actions
            return True
        assert len(outcomes) == 1, f"{len(outcomes)} outcomes in {actions}"
        assert trail[-1] is outcomes[0], f"the outcome is not last: {actions}"
        outcome = outcomes[0]
        assert outcome.action == ended.action, (outcome.action, ended.action, actions)
        assert outcome.version == ended.version, (outcome.version, ended.version)
        assert outcome.reason.startswith(ended.reason_prefix), (outcome.reason, ended.reason_prefix)
        return True

    async def check_reclaimed(self, config: ConfigModel, workflow_id: str, old: str) -> None:
        history = await self.backend.history(NAMESPACE, config.path, limit=1000)
        reclaims = [
            entry
            for entry in history
            if entry.action == "lock.reclaimed" and entry.workflow_id == workflow_id
        ]
        # None when the sweep had released the lock before the start, else one naming `old`.
        assert len(reclaims) <= 1 and all(old in entry.reason for entry in reclaims), [
            (entry.action, entry.workflow_id, entry.reason) for entry in history
        ]

    def teardown(self) -> None:
        """Halt what still runs: an hour's hold must not renew leases through the next example."""

        async def halt_all() -> None:
            for config in self.configs:
                if config.running is not None:
                    await self.backend.command(
                        OperatorCommandInput(
                            NAMESPACE,
                            config.path,
                            "halt",
                            "model: done",
                            workflow_id=config.running.workflow_id,
                        )
                    )

        self.stack.run(halt_all())


# -- the test -----------------------------------------------------------------------------------
def machine_settings() -> settings:
    phases = [Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if SHRINK else [])]
    return settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


def run_machine(stack: LiveStack, seed: int) -> None:
    machine = type("RolloutMachineOnStack", (RolloutMachine,), {"stack": stack})
    run_state_machine_as_test(hypothesis_seed(seed)(machine), settings=machine_settings())


@pytest_asyncio.fixture(scope="module")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """This module's own dev server, on which a run that continues as new is not held back: the
    model's short history bound makes most rollouts continue as new within a second of their
    start, and the server's guard against continue-as-new loops held each new run back for the
    rest of that second (tests/fixtures/temporal.py), two thirds of an example's time."""
    env = await start_test_server(IMMEDIATE_CONTINUE_AS_NEW_FLAGS)
    try:
        yield env
    finally:
        await env.shutdown()


@pytest_asyncio.fixture(scope="module")
async def realtime_client(temporal_env: WorkflowEnvironment) -> Client:
    return await temporal_env.connect_client()


@pytest.fixture
def backend_name(database_url: str) -> str:
    return "postgresql" if database_url.startswith("postgresql") else "sqlite"


@asynccontextmanager
async def operator_stack(
    store: Store,
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    *,
    continue_as_new_after_events: int,
) -> AsyncIterator[tuple[ApiBackend, httpx.AsyncClient]]:
    """A worker on its own task queue, the API over HTTP on `store`, and the operator's view of
    them: the CLI's `ApiBackend` (admin token) and a plain HTTP client of the API."""
    task_queue = f"tempoconf-model-{uuid.uuid4().hex[:8]}"
    settings_ = Settings(
        data_dir=tmp_path,
        temporal_address=temporal_env.client.service_client.config.target_host,
        task_queue=task_queue,
        admin_token=ADMIN_TOKEN,
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
        async with worker, live_api(store, settings_) as api:
            async with (
                ApiBackend.connect(replace(settings_, api_url=api)) as backend,
                httpx.AsyncClient(base_url=api, timeout=30) as http,
            ):
                yield backend, http
    finally:
        sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep


# A longer run (TEMPOCONF_MODEL_EXAMPLES) gets a longer bound than the suite's 300 s per test.
@pytest.mark.timeout(max(300, EXAMPLES * STEPS * 3))
async def test_the_live_stack_serves_what_the_model_says(
    store: Store,
    backend_name: str,
    temporal_env: WorkflowEnvironment,
    realtime_client: Client,
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("HYPOTHESIS_SEED") or random.randrange(2**32))
    print(
        f"\nmodel check on {backend_name}: seed {seed} (replay: HYPOTHESIS_SEED={seed}), "
        f"{EXAMPLES} example(s) of up to {STEPS} steps"
    )
    started = time.monotonic()
    async with operator_stack(
        store, temporal_env, tmp_path, continue_as_new_after_events=CONTINUE_AS_NEW_AFTER_EVENTS
    ) as (backend, http):
        stack = LiveStack(asyncio.get_running_loop(), backend, http, realtime_client, backend_name)
        try:
            await asyncio.to_thread(run_machine, stack, seed)
        except BaseException as failure:
            # Hypothesis attaches the failing steps as notes, which pytest.fail's message
            # (pytrace=False) would not show.
            print("\n".join(getattr(failure, "__notes__", [])))
            raise
        print(f"model check on {backend_name}: {stack.figures()}")
    elapsed = time.monotonic() - started
    print(f"model check on {backend_name}: {stack.examples} examples passed in {elapsed:.1f}s")
    summary = {**stack.summary(), "seed": seed, "examples": EXAMPLES, "max_steps": STEPS}
    print(f"{SUMMARY_PREFIX}{json.dumps({**summary, 'elapsed_seconds': round(elapsed, 1)})}")


# -- explicit examples: what the model found ---------------------------------------------------
async def history_length(client: Client, workflow_id: str) -> int:
    return (await client.get_workflow_handle(workflow_id).describe()).history_length


@asynccontextmanager
async def continued_between_stages(
    store: Store, temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> AsyncIterator[tuple[ApiBackend, str, str, dict[str, Any]]]:
    """A two-stage rollout whose `advance` out of its first hold makes it continue as new before
    it publishes the second stage: the worker's history bound is set just above the history
    length a rollout has while it holds its first stage (measured on a first rollout). Yields the
    operator's backend, the config, the workflow id and the advance's answer."""
    request = {
        "path": "",
        "value": {"n": 1},
        "default_cooldown_time": "1h",
        "stages": [{"name": "canary", "channel": "canary"}, {"name": "all", "percentile": 100}],
    }
    async with operator_stack(store, temporal_env, tmp_path, continue_as_new_after_events=0) as (
        backend,
        _,
    ):
        path = f"model/measure-{uuid.uuid4().hex[:8]}"
        measure = {**request, "path": path}
        await backend.start(measure, await backend.prepare(measure), f"{path}-1")
        await eventually(
            lambda: backend_state(backend, path, f"{path}-1", "holding", 0),
            what="the measured rollout to hold its first stage",
        )
        holding = await history_length(realtime_client, f"{path}-1")
        await backend.command(
            OperatorCommandInput(NAMESPACE, path, "halt", "measured", workflow_id=f"{path}-1")
        )
    async with operator_stack(
        store, temporal_env, tmp_path, continue_as_new_after_events=holding + 2
    ) as (backend, _):
        path = f"model/continued-{uuid.uuid4().hex[:8]}"
        rollout = {**request, "path": path}
        workflow_id = f"{path}-1"
        await backend.start(rollout, await backend.prepare(rollout), workflow_id)
        await eventually(
            lambda: backend_state(backend, path, workflow_id, "holding", 0),
            what="the rollout to hold its first stage",
        )
        answer = (
            await backend.command(
                OperatorCommandInput(NAMESPACE, path, "advance", "go on", workflow_id=workflow_id)
            )
        ).result
        await eventually(
            lambda: backend_state(backend, path, workflow_id, "holding", 1),
            what="the rollout to hold its second stage, in its next run",
        )
        description = await realtime_client.get_workflow_handle(workflow_id).describe()
        first_run = description.raw_description.workflow_execution_info.first_run_id
        assert description.run_id != first_run, "the rollout did not continue as new"
        try:
            yield backend, path, workflow_id, answer
        finally:
            await backend.command(
                OperatorCommandInput(
                    NAMESPACE, path, "halt", "end of test", workflow_id=workflow_id
                )
            )


async def answered_view(backend: ApiBackend, path: str, workflow_id: str) -> RolloutSnapshot:
    """The rollout's view once its workflow answered: a status query its worker did not answer
    within its bound (a busy worker, a run to replay after continue-as-new) is a "not yet"."""
    try:
        snapshot, _ = await backend.rollout_view(NAMESPACE, path, workflow_id)
    except ViewUnavailable as unavailable:
        assert unavailable.kind != "no_answer", str(unavailable)  # asked again by `eventually`
        raise
    return snapshot


async def backend_state(
    backend: ApiBackend, path: str, workflow_id: str, state: str, stage_index: int
) -> bool:
    snapshot = await answered_view(backend, path, workflow_id)
    progress = snapshot.progress or {}
    seen = (progress.get("state"), progress.get("stage_index"))
    assert seen == (state, stage_index), seen
    return True


async def test_a_start_is_refused_while_the_rollout_runs_on_after_continue_as_new(
    sqlite_store: Store,
    temporal_env: WorkflowEnvironment,
    realtime_client: Client,
    tmp_path: Path,
) -> None:
    """Found by the model check: the admin API judged the lock's holder by its first run, which
    had continued as new, and started a second rollout (202) that then failed in prepare with
    RolloutAlreadyRunning. A running rollout is refused up front: 409."""
    async with continued_between_stages(sqlite_store, temporal_env, realtime_client, tmp_path) as (
        backend,
        path,
        workflow_id,
        _,
    ):
        again = {"path": path, "value": {"n": 2}, "stages": [{"channel": "canary"}]}
        with pytest.raises(LockBusy) as busy:
            await backend.start(again, await backend.prepare(again), f"{path}-2")
        assert busy.value.lock.workflow_id == workflow_id


async def test_an_advance_that_continues_as_new_between_stages_answers_requested(
    sqlite_store: Store,
    temporal_env: WorkflowEnvironment,
    realtime_client: Client,
    tmp_path: Path,
) -> None:
    """Found by the model check: the workflow answers an update once it is parked again; a
    continue-as-new between two stages parks it (every handler must finish before it), so
    `advance` answered before the next run published the next stage, as done ("the hold of stage
    1/2 canary ended early") with `state` checking_health, stage 1. docs/contract.md: it answers
    once the command took effect (the next stage held), or says `requested:`."""
    async with continued_between_stages(sqlite_store, temporal_env, realtime_client, tmp_path) as (
        _,
        _,
        _,
        answer,
    ):
        took_effect = (answer["state"], answer["stage_number"]) == ("holding", 2)
        assert took_effect or answer["message"].startswith("requested:"), answer


async def test_a_direct_start_is_refused_while_the_rollout_runs_on_after_continue_as_new(
    sqlite_url: str,
    sqlite_store: Store,
    temporal_env: WorkflowEnvironment,
    realtime_client: Client,
    tmp_path: Path,
) -> None:
    """The admin API's twin: `tempoconf rollout start` in direct mode (cli/_backend.py) judged
    the lock's holder by its first run, CONTINUED_AS_NEW, and started a workflow that failed in
    prepare with RolloutAlreadyRunning instead of refusing (LockBusy: exit 1, "already has a
    running rollout")."""
    async with continued_between_stages(sqlite_store, temporal_env, realtime_client, tmp_path) as (
        _,
        path,
        workflow_id,
        _,
    ):
        settings_ = Settings(
            data_dir=tmp_path,
            database_url=sqlite_url,
            temporal_address=temporal_env.client.service_client.config.target_host,
            task_queue=f"tempoconf-model-direct-{uuid.uuid4().hex[:8]}",  # no worker: never runs
        )
        again = {"path": path, "value": {"n": 2}, "stages": [{"channel": "canary"}]}
        with ExitStack() as stack:
            direct = DirectBackend(settings_, stack)
            prepared = await direct.prepare(again)
            try:
                with pytest.raises(LockBusy) as busy:
                    await direct.start(again, prepared, f"{path}-direct")
            finally:
                # What the bug starts (on a queue no worker polls) must not outlive the test.
                with contextlib.suppress(RPCError):
                    await realtime_client.get_workflow_handle(f"{path}-direct").terminate()
            assert busy.value.lock.workflow_id == workflow_id
