"""The model check's state machine (tests/fuzz/test_model.py): hypothesis draws operator steps,
each is sent to the live stack and checked against the reference model (tests/fuzz/model.py)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any, ClassVar

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
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from tempoconf.canonical import version_id
from tempoconf.cli._api_backend import ApiBackend
from tempoconf.cli._backend import (
    CommandRefused,
    LockBusy,
    OperatorCommandInput,
)
from tempoconf.rollout.stages import StageSpec as RequestStage
from tempoconf.rollout.stages import unwidening_stages
from tests.fixtures.temporal import (
    rollout_result,
)
from tests.fixtures.waiting import eventually
from tests.fuzz.model import (
    COMMANDS,
    HEALTH_CHECK,
    LEASE_SECONDS,
    NAMESPACES,
    OUTCOME_ACTIONS,
    STAGES,
    ConfigModel,
    Ended,
    Identity,
    Lapsing,
    Principal,
    Report,
    RolloutModel,
    Served,
    StageSpec,
    changeset_workflow_id,
    identities_for,
)
from tests.fuzz.model_stack import (
    CONFIGS,
    EXAMPLES,
    MARGIN,
    PRINCIPALS,
    ROOT,
    SHRINK,
    STEPS,
    TERMINATED_OUTCOME,
    LiveStack,
    ModelViolation,
    answered_view,
    token_of,
)


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
    "changeset",
    "changeset",
    "replay_approval",
    "replay_approval",
)
"""Drawn uniformly: a staged start twice as often as the rest, a report three times (a stage is
reverted only when failing reports from its cohort precede an `advance`), and the two commands
that move a rollout on, so that rollouts get past their first stage. `start_unstaged` promotes a
value at once (a config's first stable value, say). `changeset` starts or steers the changeset
across both namespaces; `replay_approval` sends a signed approval taken from a workflow's
history again, straight to Temporal."""
principals = st.sampled_from((ROOT,) * len(PRINCIPALS) + PRINCIPALS)
"""Who sends a start or a command: the model's own admin half the time (so that rollouts move),
else any token of the policy, allowed or not."""


class RolloutMachine(RuleBasedStateMachine):
    stack: ClassVar[LiveStack]

    def __init__(self) -> None:
        super().__init__()
        self.configs: list[ConfigModel] = []
        self.changeset: ConfigModel | None = None
        """The changeset across both namespaces (no client polls it: its steps are access's)."""
        self.approvals: list[tuple[str, list[Any]]] = []
        """Signed approvals that counted, as the workflow's history holds them (workflow id, the
        update's arguments): sent again, none may ever count."""
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
            snapshot = await answered_view(
                self.backend, config.path, rollout.workflow_id, config.namespace
            )
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
        for index in range(CONFIGS):
            path = f"model/config-{uuid.uuid4().hex[:10]}"
            namespace = NAMESPACES[index % len(NAMESPACES)]
            self.configs.append(ConfigModel(path, identities_for(path), namespace))
        key = uuid.uuid4().hex[:10]
        first, second = f"model/changeset-{key}-a", f"model/changeset-{key}-b"
        self.changeset = ConfigModel(first, (), NAMESPACES[0], others=((NAMESPACES[1], second),))

    @rule(index=config_indices, action=st.sampled_from(ACTIONS), data=st.data())
    def step(self, index: int, action: str, data: st.DataObject) -> None:
        """One operator step. A single rule, not one per action: hypothesis's swarm testing turns
        off about half of a machine's rules in each example, which a bounded run of a few
        examples cannot afford. An action that needs a running rollout takes the other config's,
        or starts one when neither runs."""
        if action == "changeset":
            self.steer_changeset(data)
            return
        if action == "replay_approval":
            self.replay_approval(data)
            return
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
                principal = data.draw(principals, label="principal")
                self.log.append(
                    f"{where} as {principal.name}, stages "
                    f"{[(s.name, manual) for s, manual in drawn]}"
                )
                self.start(config, drawn, principal)
            elif action == "start_unstaged":
                principal = data.draw(principals, label="principal")
                self.log.append(f"{where} as {principal.name}")
                self.start(config, [], principal)
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
                principal = data.draw(principals, label="principal")
                self.log.append(f"{where} as {principal.name}")
                self.command(config, action, principal)
        except BaseException as failure:
            # The live stack answers a replay differently: say what this example did.
            failure.add_note("the example's steps:\n  " + "\n  ".join(self.log))
            raise

    def start(
        self,
        config: ConfigModel,
        drawn: list[tuple[StageSpec, bool]],
        principal: Principal = ROOT,
    ) -> None:
        config.rollouts += 1
        value = {"path": config.path, "rollout": config.rollouts}
        stages = tuple(replace(stage, manual=manual) for stage, manual in drawn)
        request: dict[str, Any] = {
            "default_cooldown_time": "1h",
            "default_expiration_time": f"{LEASE_SECONDS:g}s",
            "stages": [stage.request() for stage in stages],
            "health": [HEALTH_CHECK],
            "author": "model",
            "message": f"model rollout {config.rollouts}",
        }
        if config.others:
            configs = [(config.namespace, config.path), *config.others]
            request["changes"] = [
                {"path": path, "namespace": namespace, "value": value}
                for namespace, path in configs
            ]
            # Its own id with a suffix: each rollout of the changeset has a trail of its own.
            workflow_id = f"{changeset_workflow_id(configs)}:{config.rollouts}"
        else:
            request |= {"path": config.path, "namespace": config.namespace, "value": value}
            # The config's own id with a suffix: the only ids a start through the API may take.
            workflow_id = f"rollout:{config.namespace}/{config.path}:{config.rollouts}"
        with self.stack.timed("start"):
            self.stack.run(self._start(config, request, workflow_id, stages, principal))

    async def _start(
        self,
        config: ConfigModel,
        request: dict[str, Any],
        workflow_id: str,
        stages: tuple[StageSpec, ...],
        principal: Principal,
    ) -> None:
        changeset = "changeset " if config.others else ""
        if not principal.may("start", config.namespaces):
            # Refused before anything is read or started: the model does not move.
            config.rollouts -= 1
            await self.refused_as(principal, "POST", "/v1/admin/rollouts", body=request)
            self.stack.access[f"{changeset}start refused"] += 1
            return
        self.stack.access[f"{changeset}start allowed"] += 1
        backend = self.stack.backends[principal]
        prepared = await backend.prepare(request)
        version = version_id(request["changes"][0]["value"] if config.others else request["value"])
        assert prepared.version == version
        if config.running is not None:
            # One running rollout per config: the second start is refused, nothing changes.
            try:
                await backend.start(request, prepared, workflow_id)
            except LockBusy as busy:
                assert busy.lock.workflow_id == config.running.workflow_id
            else:
                raise AssertionError(f"a second rollout of {config.path} was started")
            config.rollouts -= 1  # its value was never stored: the next start may reuse it
            return
        await backend.start(request, prepared, workflow_id)
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

    async def refused_as(
        self, principal: Principal, method: str, url: str, *, body: Any = None, **params: str
    ) -> None:
        """`principal` is refused this (403, naming the role it lacks): the model says so."""
        answer = await self.stack.http.request(
            method,
            url,
            params=params or None,
            json=body,
            headers={"Authorization": f"Bearer {token_of(principal)}"},
        )
        assert answer.status_code == 403, (principal, url, answer.status_code, answer.text)
        assert f"{principal.name!r} needs the " in answer.json()["error"], answer.text

    def command(self, config: ConfigModel, name: str, principal: Principal = ROOT) -> None:
        with self.stack.timed(name):
            self.stack.run(self._command(config, name, principal))

    async def _command(self, config: ConfigModel, name: str, principal: Principal) -> None:
        rollout = config.running
        assert rollout is not None
        allowed = principal.may(name, config.namespaces)
        changeset = "changeset " if config.others else ""
        refused = rollout.refusal(name)
        try:
            answer = (
                await self.stack.backends[principal].command(
                    OperatorCommandInput(
                        config.namespace,
                        config.path,
                        name,
                        f"model step {self.steps}",
                        workflow_id=rollout.workflow_id,
                    )
                )
            ).result
        except CommandRefused as refusal:
            if not allowed:
                # The object decides the namespace: every namespace the rollout touches.
                assert f"{principal.name!r} needs the " in str(refusal), str(refusal)
                self.stack.access[f"{changeset}command refused"] += 1
                return
            assert refused, f"{name} was refused, the model takes it: {refusal}"
            return
        assert allowed, f"{name} by {principal.name} was taken ({answer}), the model refuses it"
        self.stack.access[f"{changeset}command allowed"] += 1
        assert not refused, f"{name} was taken ({answer}), the model refuses it"
        assert answer["accepted"] is True, answer
        config.command(name)
        if name == "approve":
            self.stack.access["approvals counted"] += 1
            await self.capture_approval(rollout.workflow_id)
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

    def steer_changeset(self, data: st.DataObject) -> None:
        """A step on the changeset across both namespaces, as a drawn principal: its start when
        it does not run, else a drawn command. Only a principal holding the role in both
        namespaces is let through."""
        changeset = self.changeset
        assert changeset is not None
        principal = data.draw(principals, label="principal")
        where = f"step {len(self.log) + 1}: changeset {changeset.path}"
        try:
            if changeset.running is None:
                drawn = data.draw(stage_lists, label="stages")
                self.log.append(
                    f"{where}: start as {principal.name}, stages "
                    f"{[(s.name, manual) for s, manual in drawn]}"
                )
                self.start(changeset, drawn, principal)
            else:
                name = data.draw(st.sampled_from(COMMANDS), label="command")
                self.log.append(f"{where}: {name} as {principal.name}")
                self.command(changeset, name, principal)
        except BaseException as failure:
            failure.add_note("the example's steps:\n  " + "\n  ".join(self.log))
            raise

    async def capture_approval(self, workflow_id: str) -> None:
        """The signed approval that just counted, as its workflow's history holds it (in the
        newest run, or the one it continued from: a rollout continues as new often here)."""
        run_id: str | None = None
        for _ in range(3):
            handle = self.stack.temporal.get_workflow_handle(workflow_id, run_id=run_id)
            found: list[Any] | None = None
            run_id = None
            async for event in handle.fetch_history_events():
                if event.HasField("workflow_execution_started_event_attributes"):
                    started = event.workflow_execution_started_event_attributes
                    run_id = started.continued_execution_run_id or None
                if event.HasField("workflow_execution_update_accepted_event_attributes"):
                    update = event.workflow_execution_update_accepted_event_attributes
                    if update.accepted_request.input.name == "approve":
                        payloads = update.accepted_request.input.args.payloads
                        found = [json.loads(payload.data) for payload in payloads]
            if found is not None:
                self.approvals.append((workflow_id, found))
                self.stack.access["approvals captured"] += 1
                return
            if run_id is None:
                return

    def replay_approval(self, data: st.DataObject) -> None:
        """A signed approval taken from a history, sent again straight to Temporal (an update or
        a signal), at whatever the rollout does now: it never counts."""
        if not self.approvals:
            return
        workflow_id, arguments = data.draw(st.sampled_from(self.approvals), label="approval")
        as_signal = data.draw(st.booleans(), label="as a signal")
        self.log.append(
            f"step {len(self.log) + 1}: replay an approval to {workflow_id} "
            f"as {'a signal' if as_signal else 'an update'}"
        )
        with self.stack.timed("replay_approval"):
            self.stack.run(self._replay_approval(workflow_id, arguments, as_signal=as_signal))

    async def _replay_approval(
        self, workflow_id: str, arguments: list[Any], *, as_signal: bool
    ) -> None:
        handle = self.stack.temporal.get_workflow_handle(workflow_id)
        try:
            if as_signal:
                await handle.signal("approve", *arguments)  # ignored and noted, or it ended
            else:
                answer = await handle.execute_update("approve", *arguments)
                raise AssertionError(f"a replayed approval to {workflow_id} counted: {answer}")
        except (WorkflowUpdateFailedError, RPCError):
            pass  # refused, or the rollout ended: either way it did not count
        self.stack.access[f"approvals replayed as {'signals' if as_signal else 'updates'}"] += 1
        # Counted or not, the workflow is where the model says (checked after every step too).
        for config in [*self.configs, self.changeset]:
            if config is not None and config.running is not None:
                if config.running.workflow_id == workflow_id:
                    await self.wait_state(config)

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
            "namespace": config.namespace,
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
                f"/v1/configs/{config.path}",
                params=[*identity.query(), ("namespace", config.namespace)],
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
        for config in [*self.configs, *([self.changeset] if self.changeset else [])]:
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
        history = await self.backend.history(config.namespace, config.path, limit=1000)
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
        history = await self.backend.history(config.namespace, config.path, limit=1000)
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
            for config in [*self.configs, self.changeset]:
                if config is not None and config.running is not None:
                    await self.backend.command(
                        OperatorCommandInput(
                            config.namespace,
                            config.path,
                            "halt",
                            "model: done",
                            workflow_id=config.running.workflow_id,
                        )
                    )

        self.stack.run(halt_all())


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
