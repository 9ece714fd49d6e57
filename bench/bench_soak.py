"""Soak: long-polling clients and concurrent rollouts for a bounded time, twice: once steady, once
with the worker SIGKILLed and restarted every minute. Goals: no errors, API and worker RSS grow
by less than 10%, every rollout ends as intended.

    python bench/bench_soak.py [--minutes 10] [--clients 2000] [--rollouts 20]
                               [--database-url postgresql+psycopg://...] [--kill-every 60]
                               [--tiny]

The stack runs as separate processes, as deployed: the venv's Temporal dev server, `tempoconf
worker`, `tempoconf api` (SQLite in a temporary directory by default; `--database-url` names a
PostgreSQL server, on which a fresh database is created and dropped after), and the clients
(bench/_soak_fleet.py: httpx on asyncio, 500 per process). This process plays the operators: it
keeps `--rollouts` ConfigRollout workflows running at all times (starting a new one as one ends)
on twice as many configs, steering some with signals and updates, and reads what clients were
served from the fleet. bench/README.md defines every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

import httpx
from _common import BENCH_DIR, PYTHON, cpu_seconds, database, emit, log, require_fds
from _scale import TINY_FLAG, TINY_HELP, sized
from _soak_fleet import identity
from temporalio.client import Client, WorkflowHandle

from tempoconf.canonical import version_id
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.outcomes import RolloutEnding, await_rollout_ending
from tempoconf.store.store import Store
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import WORKFLOW_TYPE, search_attribute_arguments

TEMPOCONF = Path(PYTHON).parent / "tempoconf"
NAMESPACE = "default"
TASK_QUEUE = "tempoconf"
CLIENTS_PER_PROCESS = 250
LONG_POLL_WAIT = 30.0
PROBE_EVERY = 1.0
SAMPLE_EVERY = 10.0
"""Seconds between two RSS samples."""
DRAIN_TIMEOUT = 180.0
"""After the load window, how long rollouts in flight get to end (holds are seconds long; a
killed worker's activity is retried after its heartbeat timeout, 10 s)."""
TINY_SIZES = (0.2, 20, 2, 6.0)
"""--tiny: minutes per phase, clients, rollouts at a time, seconds between worker kills."""
TINY_SOAK = "2 x 12 s, 20 clients, 2 rollouts, a kill every 6 s, holds of 2-4 s"
HOLD_SECONDS = sized((8.0, 15.0), (2.0, 4.0))
"""A stage's hold, drawn in this range, where no operator ends it (--tiny: so rollouts end soon)."""
ROLLOUT_TIMEOUT = 600.0
CHECK_WEDGED_EVERY = 15.0
WEDGED_ATTEMPTS = 4
CONVERGE_TIMEOUT = 60.0
STARTUP_TIMEOUT = 120.0
RSS_GOAL = 0.10
# Audit actions that change what a client resolves to: a 200 answer to a long-poll is timed from
# the latest of these on its config (see bench/README.md, poll latency).
CHANGE_ACTIONS = frozenset(
    {
        "stable.set",
        "stage.published",
        "rollout.promoted",
        "rollout.reverted",
        "rollout.halted",
        "rollout.cancelled",
    }
)
# kind: (weight, intended outcome). "halted" and "reverted" both put every client back on stable;
# "bypassed" is a promotion an operator forced.
KINDS: dict[str, tuple[int, str]] = {
    "promote": (30, "promoted"),
    "advance": (12, "promoted"),
    "approve": (12, "promoted"),
    "bypass": (6, "bypassed"),
    "halt_signal": (12, "halted"),
    "halt_update": (10, "halted"),
    "failing_health": (18, "reverted"),
}
OPERATOR = {"by": "soak"}


# -- processes ------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env() -> dict[str, str]:
    """The caller's environment without tempoconf's and Temporal's settings: the bench decides
    them (a TEMPOCONF_DATABASE_URL in the shell must not point the worker elsewhere)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPOCONF_", "TEMPORAL_"))
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env


def rss_mb(pid: int) -> float | None:
    """VmRSS of a process in MB (10^6 bytes); None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) * 1024 / 1e6, 1)
    except OSError:
        return None
    return None


class Service:
    """A long-running child process with its output in a log file of its own."""

    def __init__(self, name: str, args: list[str], logs: Path) -> None:
        self.name = name
        self.args = args
        self.log_path = logs / f"{name}.log"
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            start_new_session=True,  # a terminal's Ctrl-C reaches the bench, which stops them
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_output(self, text: str, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited ({self.process.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.name} never printed {text!r}:\n{self.tail()}")
            await asyncio.sleep(0.1)

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._log.close()

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def error_lines(text: str) -> list[str]:
    """Log lines at ERROR or worse, and tracebacks."""
    return [
        line
        for line in text.splitlines()
        if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")
    ]


# -- the fleet ------------------------------------------------------------------------------
class Fleet:
    """`count` clients in bench/_soak_fleet.py processes; `holding[i]` is client i's version."""

    def __init__(self, port: int, count: int, configs: list[str], workdir: Path) -> None:
        self.port = port
        self.count = count
        self.configs = configs
        self.workdir = workdir
        self.holding: dict[int, str] = {}
        self.summaries: list[dict[str, Any]] = []
        self.record_files: list[Path] = []
        self._ready = 0
        self._processes: list[asyncio.subprocess.Process] = []
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for first in range(0, self.count, CLIENTS_PER_PROCESS):
            records = self.workdir / f"polls-{first}.txt"
            self.record_files.append(records)
            spec = {
                "port": self.port,
                "configs": self.configs,
                "first": first,
                "count": min(CLIENTS_PER_PROCESS, self.count - first),
                "wait": LONG_POLL_WAIT,
                "records": str(records),
            }
            process = await asyncio.create_subprocess_exec(
                PYTHON,
                str(BENCH_DIR / "_soak_fleet.py"),
                json.dumps(spec),
                stdout=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
                limit=1 << 20,
            )
            self._processes.append(process)
            self._readers.append(asyncio.create_task(self._read(process)))

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            kind, _, rest = raw.decode().rstrip("\n").partition(" ")
            if kind == "v":
                index, version, _at = rest.split(" ")
                self.holding[int(index)] = version
            elif kind == "ready":
                self._ready += int(rest)
            elif kind == "done":
                self.summaries.append(json.loads(rest))

    async def ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self._ready < self.count:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"only {len(self.holding)} of {self.count} clients got a first answer "
                    f"within {timeout:g} s"
                )
            if any(p.returncode is not None for p in self._processes):
                raise SystemExit("a client process exited early (its error is above)")
            await asyncio.sleep(0.2)

    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    async def stop(self) -> None:
        for process in self._processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in self._processes:
            try:
                await asyncio.wait_for(process.wait(), 60)
            except TimeoutError:
                process.kill()
                await process.wait()
        for reader in self._readers:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(reader, 10)


# -- phases ---------------------------------------------------------------------------------
@dataclass
class RolloutOutcome:
    kind: str
    intended: str
    outcome: str
    workflow_id: str
    run_id: str
    seconds: float
    stable_ok: bool
    reason: str = ""

    @property
    def as_intended(self) -> bool:
        return self.outcome == self.intended and self.stable_ok


@dataclass
class Phase:
    name: str
    kills: bool
    start_ns: int = 0
    load_end_ns: int = 0
    end_ns: int = 0
    started: int = 0
    start_errors: list[str] = field(default_factory=list)
    ended: list[RolloutOutcome] = field(default_factory=list)
    not_ended: list[str] = field(default_factory=list)
    operator_errors: dict[str, int] = field(default_factory=dict)
    operator_error_examples: dict[str, list[str]] = field(default_factory=dict)
    kill_log: list[dict[str, Any]] = field(default_factory=list)
    converged: dict[str, Any] = field(default_factory=dict)
    api_metrics: dict[str, float] = field(default_factory=dict)
    log_marks: dict[str, tuple[int, int]] = field(default_factory=dict)
    cpu_start: dict[str, float] = field(default_factory=dict)
    cpu_end: dict[str, float] = field(default_factory=dict)


class Soak:
    def __init__(self, args: argparse.Namespace, url: str, workdir: Path) -> None:
        self.args = args
        self.url = url
        self.workdir = workdir
        self.rng = random.Random(args.seed)
        self.configs = [f"soak/config-{n:02d}" for n in range(max(2 * args.rollouts, 2))]
        self.stable: dict[str, str] = {}
        self.busy: set[str] = set()
        self.counter = 0
        self.samples: list[dict[str, Any]] = []
        self.probes: list[tuple[int, float | None, float]] = []
        self.in_flight: dict[str, tuple[str, WorkflowHandle[Any, Any]]] = {}
        self.wedged: set[str] = set()
        """Configs whose rollout never ends (its workflow task fails over and over)."""
        self.worker: Service | None = None
        self.worker_incarnation = 0
        self.worker_logs: list[Path] = []
        self.worker_cpu_of_killed = 0.0
        self.pids: dict[str, int] = {}
        self.client_pids: list[int] = []
        self.temporal_port = free_port()
        self.api_port = free_port()

    # -- stack ------------------------------------------------------------------------------
    def seed(self) -> None:
        store = Store(self.url)
        try:
            for n, path in enumerate(self.configs):
                value = {"soak": 0, "config": n, "max_connections": 1000}
                version = version_id(value)
                store.put_version(NAMESPACE, path, VersionRecord(version, value, author="soak"))
                store.set_stable(
                    NAMESPACE, path, version, actor="soak", reason="seed",
                    event_key=f"soak:seed:{path}",
                )  # fmt: skip
                self.stable[path] = version
        finally:
            store.close()

    def start_temporal(self) -> Service:
        args = [
            str(temporal_cli_path()), "server", "start-dev", "--headless",
            "--ip", "127.0.0.1", "--port", str(self.temporal_port),
            "--http-port", str(free_port()), "--metrics-port", str(free_port()),
            "--namespace", NAMESPACE, "--log-level", "error",
        ]  # fmt: skip
        args += search_attribute_arguments()
        return Service("temporal", args, self.workdir)

    def component_args(self, command: str) -> list[str]:
        return [
            str(TEMPOCONF), command,
            "--database-url", self.url,
            "--temporal-address", f"127.0.0.1:{self.temporal_port}",
            "--data-dir", str(self.workdir / "data"),
        ]  # fmt: skip

    async def start_worker(self) -> Service:
        name = f"worker-{self.worker_incarnation}"
        self.worker_incarnation += 1
        worker = Service(name, self.component_args("worker"), self.workdir)
        self.worker_logs.append(worker.log_path)
        await worker.wait_output("worker: polling task queue")
        self.worker = worker
        return worker

    async def start_api(self) -> Service:
        api = Service(
            "api", [*self.component_args("api"), "--port", str(self.api_port)], self.workdir
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        async with httpx.AsyncClient(timeout=5) as http:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (
                        await http.get(f"http://127.0.0.1:{self.api_port}/readyz")
                    ).status_code == 200:
                        return api
                if api.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the API never got ready:\n{api.tail()}")
                await asyncio.sleep(0.2)

    async def connect(self, temporal: Service) -> Client:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                return await Client.connect(f"127.0.0.1:{self.temporal_port}", namespace=NAMESPACE)
            except RuntimeError:
                if temporal.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"the Temporal dev server never answered:\n{temporal.tail()}"
                    ) from None
                await asyncio.sleep(0.3)

    async def api_metrics(self) -> dict[str, float]:
        wanted = (
            "tempoconf_api_long_polls_waiting",
            "tempoconf_api_seen_clients_dropped_total",
            "tempoconf_api_snapshot_age_seconds",
        )
        totals = dict.fromkeys(wanted, 0.0)
        series = 0
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(f"http://127.0.0.1:{self.api_port}/metrics")).text
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            series += 1
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in totals:
                totals[name] += float(line.rpartition(" ")[2])
        totals["metric_series"] = series
        return totals

    # -- sampling ---------------------------------------------------------------------------
    async def sample(self, pids: dict[str, int]) -> None:
        while True:
            worker = self.worker
            self.samples.append(
                {
                    "at_ns": time.time_ns(),
                    "api": rss_mb(pids["api"]),
                    "temporal": rss_mb(pids["temporal"]),
                    "worker": rss_mb(worker.pid) if worker else None,
                    "worker_name": worker.name if worker else None,
                }
            )
            await asyncio.sleep(SAMPLE_EVERY)

    async def probe(self) -> None:
        """GET /healthz every PROBE_EVERY seconds from this (lightly loaded) process: how fast the
        API answers a trivial request, and how late this process's own loop runs."""
        loop = asyncio.get_running_loop()
        async with httpx.AsyncClient(timeout=60) as http:
            while True:
                due = loop.time() + PROBE_EVERY
                await asyncio.sleep(PROBE_EVERY)
                own_lag = loop.time() - due
                began = time.perf_counter()
                try:
                    await http.get(f"http://127.0.0.1:{self.api_port}/healthz")
                    seconds: float | None = time.perf_counter() - began
                except httpx.HTTPError:
                    seconds = None
                self.probes.append((time.time_ns(), seconds, own_lag))

    # -- rollouts ---------------------------------------------------------------------------
    def request(self, kind: str, path: str) -> tuple[dict[str, Any], str]:
        self.counter += 1
        rng = self.rng
        value: dict[str, Any] = {
            "soak": self.counter,
            "kind": kind,
            "max_connections": 1000 + self.counter,
        }
        if kind == "failing_health":
            value["soak_fail"] = True
        shape = rng.choice(("canary-pct-region", "channels-pct", "labels-pct"))
        if shape == "canary-pct-region":
            stages: list[dict[str, Any]] = [
                {"channel": "canary"},
                {"percentile": 10},
                {"labels": {"region": rng.choice(("eu", "us", "ap"))}},
                {"percentile": 50},
            ]
        elif shape == "channels-pct":
            stages = [
                {"channel": "canary"},
                {"channel": "beta"},
                {"percentile": 25},
                {"percentile": 100},
            ]
        else:
            stages = [
                {"labels": {"tier": rng.choice(("web", "batch", "edge", "db"))}},
                {"percentile": 20},
                {"percentile": 60},
            ]
        check: dict[str, Any] = {
            "kind": "reports", "max_error_ratio": 0.2, "min_clients": 1, "on_no_data": "pass",
        }  # fmt: skip
        long_holds = kind in ("advance", "halt_signal", "halt_update", "bypass")
        if kind == "failing_health":
            # Fail during the hold, as soon as the cohort reports; a stage whose cohort has not
            # reported by the end of its hold fails too (the default), as a careful operator
            # would have it for a risky value.
            check.update(interval="2s", on_no_data="fail")
        if kind == "approve":
            stages[-1]["manual"] = True
        request = {
            "path": path,
            "namespace": NAMESPACE,
            "value": value,
            "stages": stages,
            "default_cooldown_time": "1h" if long_holds else f"{rng.uniform(*HOLD_SECONDS):.1f}s",
            "health": [check],
            "author": "soak@bench",
            "commit": f"soak-{self.counter}",
            "message": f"soak rollout {self.counter} ({kind}, {shape})",
        }
        return request, version_id(value)

    def pick_kind(self) -> str:
        kinds = list(KINDS)
        return self.rng.choices(kinds, weights=[KINDS[k][0] for k in kinds])[0]

    async def pick_config(self) -> str:
        while True:
            free = [path for path in self.configs if path not in self.busy]
            if free:
                break
            # Every config is taken: wedged rollouts hold more than half of them.
            await asyncio.sleep(1.0)
        path = self.rng.choice(free)
        self.busy.add(path)
        return path

    async def operate(self, kind: str, handle: WorkflowHandle[Any, Any], phase: Phase) -> None:
        """What the operator does to a rollout of this kind while it runs."""
        rng = self.rng

        async def attempt(what: str, call: Any) -> bool:
            task = asyncio.current_task()
            try:
                # asyncio.timeout, not wait_for: a cancelled operator leaves no task behind
                # whose exception nobody retrieves.
                async with asyncio.timeout(120):
                    await call
                return True
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                if task is not None and task.cancelling():
                    # The rollout ended while the update waited: the SDK turns the cancellation
                    # into its own error; it is no operator error.
                    raise asyncio.CancelledError from exc
                key = f"{what}: {type(exc).__name__}"
                phase.operator_errors[key] = phase.operator_errors.get(key, 0) + 1
                # A refusal's text says which state refused it: keep the first few to tell
                # refusals (expected) from failures.
                examples = phase.operator_error_examples.setdefault(key, [])
                text = str(getattr(exc, "cause", None) or exc)[:160]
                if len(examples) < 3 and text not in examples:
                    examples.append(text)
                return False

        reason = {"reason": f"soak: operator {kind}", **OPERATOR}
        if kind == "advance":
            while True:
                await asyncio.sleep(rng.uniform(1.0, 3.0))
                if await self.finished(handle):
                    return
                await attempt("advance", handle.execute_update("advance", reason))
        elif kind == "approve":
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            await attempt("pause", handle.signal("pause", reason))
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            await attempt("resume", handle.signal("resume", reason))
            while not await self.finished(handle):
                with contextlib.suppress(Exception):
                    status = await handle.query("status")
                    if status.get("state") == "awaiting_approval":
                        await attempt("approve", handle.execute_update("approve", reason))
                await asyncio.sleep(1.0)
        elif kind in ("halt_signal", "halt_update", "bypass"):
            await asyncio.sleep(rng.uniform(5.0, 20.0))
            if kind == "halt_signal":
                await attempt("halt signal", handle.signal("halt", reason))
            elif kind == "halt_update":
                await attempt("halt update", handle.execute_update("halt", reason))
            else:
                await attempt("bypass signal", handle.signal("bypass", reason))

    async def result(self, handle: WorkflowHandle[Any, Any], began: float) -> RolloutEnding | None:
        """How the rollout ended (tempoconf.rollout.outcomes); None once it is wedged (a workflow task
        failed WEDGED_ATTEMPTS times in a row: it will not end by itself) or ROLLOUT_TIMEOUT
        passed."""
        waiting = asyncio.ensure_future(await_rollout_ending(handle))
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=CHECK_WEDGED_EVERY)
                if done:
                    return waiting.result()
                if time.monotonic() - began > ROLLOUT_TIMEOUT:
                    return None
                with contextlib.suppress(Exception):
                    raw = (await handle.describe()).raw_description
                    if raw.pending_workflow_task.attempt >= WEDGED_ATTEMPTS:
                        return None
        finally:
            waiting.cancel()

    async def describe_stuck(
        self, workflow_id: str, kind: str, handle: WorkflowHandle[Any, Any]
    ) -> str:
        """Where a rollout that did not end within the drain is: its state and what it waits on."""
        facts = [f"{workflow_id} run {handle.result_run_id} ({kind})"]
        try:
            status = await asyncio.wait_for(handle.query("status"), 10)
            facts.append(
                f"state {status.get('state')} phase {status.get('phase')} "
                f"stage {status.get('stage_index')} paused {status.get('paused')} "
                f"{status.get('pause_reasons')}; last transition "
                f"{(status.get('history') or [None])[-1]}"
            )
        except Exception as exc:  # noqa: BLE001 - a fact of its own
            facts.append(f"status query failed: {type(exc).__name__}: {exc}"[:200])
        try:
            raw = (await handle.describe()).raw_description
            for activity in raw.pending_activities:
                facts.append(
                    f"pending activity {activity.activity_type.name} attempt {activity.attempt} "
                    f"state {activity.state} last failure {activity.last_failure.message[:120]!r}"
                )
            if raw.pending_workflow_task.attempt:
                facts.append(f"workflow task attempt {raw.pending_workflow_task.attempt}")
        except Exception as exc:  # noqa: BLE001 - a fact of its own
            facts.append(f"describe failed: {type(exc).__name__}")
        try:
            history = await handle.fetch_history()
            name = f"history-{workflow_id.replace('/', '_').replace(':', '_')}-{handle.result_run_id}.json"
            (self.workdir / name).write_text(history.to_json())
            facts.append(f"history in {name} (--keep)")
        except Exception as exc:  # noqa: BLE001 - a fact of its own
            facts.append(f"history not fetched: {type(exc).__name__}")
        log("not ended: " + "; ".join(facts))
        return "; ".join(facts)

    async def finished(self, handle: WorkflowHandle[Any, Any]) -> bool:
        try:
            description = await handle.describe()
        except Exception:  # noqa: BLE001 - the server answers again on the next try
            return False
        return description.close_time is not None

    async def one_rollout(self, client: Client, phase: Phase) -> None:
        kind = self.pick_kind()
        path = await self.pick_config()
        intended = KINDS[kind][1]
        request, version = self.request(kind, path)
        workflow_id = f"rollout:{NAMESPACE}/{path}"
        began = time.monotonic()
        try:
            try:
                handle = await client.start_workflow(
                    WORKFLOW_TYPE, request, id=workflow_id, task_queue=TASK_QUEUE
                )
            except Exception as exc:  # noqa: BLE001 - counted as a start that failed
                phase.start_errors.append(f"{workflow_id}: {type(exc).__name__}: {exc}")
                await asyncio.sleep(1.0)
                return
            phase.started += 1
            self.in_flight[workflow_id] = (kind, handle)
            operator = asyncio.create_task(self.operate(kind, handle, phase))
            try:
                ending = await self.result(handle, began)
                if ending is None:
                    # Wedged: it holds its config's lock, so no rollout goes there any more.
                    self.wedged.add(path)
                    phase.not_ended.append(await self.describe_stuck(workflow_id, kind, handle))
                    return
                outcome, reason = ending.outcome, ending.reason[:300]
                stable = ending.result.stable_version if ending.result is not None else None
            finally:
                operator.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await operator
            expected_stable = version if outcome in ("promoted", "bypassed") else self.stable[path]
            stable_ok = stable == expected_stable
            if stable_ok and outcome in ("promoted", "bypassed"):
                self.stable[path] = version
            phase.ended.append(
                RolloutOutcome(
                    kind, intended, outcome, workflow_id, handle.result_run_id or "",
                    round(time.monotonic() - began, 1), stable_ok, reason[:200],
                )
            )  # fmt: skip
        finally:
            if path not in self.wedged:
                self.busy.discard(path)
            self.in_flight.pop(workflow_id, None)

    async def drive(self, client: Client, phase: Phase, load_seconds: float) -> None:
        """Keep `--rollouts` rollouts running until the load window ends, then let them end."""
        stop_at = time.monotonic() + load_seconds

        async def slot(n: int) -> None:
            await asyncio.sleep(n * 0.3)  # not every start in the same instant
            while time.monotonic() < stop_at:
                await self.one_rollout(client, phase)

        slots = [asyncio.create_task(slot(n)) for n in range(self.args.rollouts)]
        await asyncio.sleep(load_seconds)
        phase.load_end_ns = time.time_ns()
        log(f"{phase.name}: load window over; letting {len(self.busy)} rollouts end")
        done, pending = await asyncio.wait(slots, timeout=DRAIN_TIMEOUT)
        for task in done:
            task.result()
        if pending:
            for workflow_id, (kind, handle) in list(self.in_flight.items()):
                phase.not_ended.append(await self.describe_stuck(workflow_id, kind, handle))
            for task in pending:
                task.cancel()

    async def kill_workers(self, phase: Phase, every: float, load_seconds: float) -> None:
        """SIGKILL the worker every `every` seconds of the load window, and start a new one."""
        stop_at = time.monotonic() + load_seconds
        while time.monotonic() + every < stop_at:
            await asyncio.sleep(every)
            old = self.worker
            assert old is not None
            before = rss_mb(old.pid)
            self.worker_cpu_of_killed += cpu_seconds(old.pid) or 0.0
            killed_at = time.monotonic()
            old.kill()
            self.worker = None
            await self.start_worker()
            restart = round(time.monotonic() - killed_at, 2)
            phase.kill_log.append(
                {"killed": old.name, "rss_before_kill_mb": before, "restart_s": restart}
            )
            log(f"{phase.name}: SIGKILLed {old.name} ({before} MB); next worker up in {restart} s")

    async def converge(self, fleet: Fleet) -> dict[str, Any]:
        """Every client on its config's stable version, once no rollout runs (a wedged
        rollout's clients keep its version: they are counted apart)."""
        config_of = {
            i: self.configs[identity(i, len(self.configs)).config] for i in range(fleet.count)
        }
        expected = {i: self.stable[config_of[i]] for i in range(fleet.count)}
        began = time.monotonic()
        while True:
            off = [i for i, version in expected.items() if fleet.holding.get(i) != version]
            if all(config_of[i] in self.wedged for i in off):
                break
            if time.monotonic() - began > CONVERGE_TIMEOUT:
                break
            await asyncio.sleep(0.5)
        return {
            "clients_on_stable": fleet.count - len(off),
            "clients": fleet.count,
            "clients_of_wedged_rollouts": sum(1 for i in off if config_of[i] in self.wedged),
            "seconds": round(time.monotonic() - began, 1),
            "off_examples": [
                f"client {i} ({config_of[i]}): {fleet.holding.get(i)} != {expected[i]}"
                for i in off[:5]
            ],
        }

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each part (the workers: every one started, killed ones
        included)."""
        worker = self.worker
        own = os.times()
        return {
            "api": cpu_seconds(self.pids["api"]) or 0.0,
            "worker": self.worker_cpu_of_killed
            + ((cpu_seconds(worker.pid) or 0.0) if worker else 0.0),
            "temporal": cpu_seconds(self.pids["temporal"]) or 0.0,
            "clients": sum(cpu_seconds(pid) or 0.0 for pid in self.client_pids),
            "bench": own.user + own.system,
        }

    def log_mark(self, api: Service) -> dict[str, tuple[int, int]]:
        marks = {"api": (0, len(api.output().splitlines()))}
        for n, path in enumerate(self.worker_logs):
            marks[f"worker-{n}"] = (n, len(path.read_text(errors="replace").splitlines()))
        return marks

    async def run_phase(
        self, phase: Phase, client: Client, fleet: Fleet, api: Service, load_seconds: float
    ) -> None:
        log(f"phase {phase.name}: {load_seconds:g} s of load, {self.args.rollouts} rollouts at a time"
            + (f", worker SIGKILLed every {self.args.kill_every:g} s" if phase.kills else ""))  # fmt: skip
        phase.start_ns = time.time_ns()
        phase.cpu_start = self.cpu()
        phase.log_marks = self.log_mark(api)
        killer = None
        if phase.kills:
            killer = asyncio.create_task(
                self.kill_workers(phase, self.args.kill_every, load_seconds)
            )
        await self.drive(client, phase, load_seconds)
        if killer is not None:
            await killer
        phase.cpu_end = self.cpu()
        phase.converged = await self.converge(fleet)
        phase.api_metrics = await self.api_metrics()
        phase.end_ns = time.time_ns()
        ended = len(phase.ended)
        good = sum(1 for r in phase.ended if r.as_intended)
        log(f"phase {phase.name}: {phase.started} rollouts started, {ended} ended, {good} as intended; "
            f"{phase.converged['clients_on_stable']}/{fleet.count} clients on stable")  # fmt: skip


# -- figures --------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 4)


def change_times(url: str, configs: list[str]) -> dict[int, list[int]]:
    """Per config index, the sorted times (ns) of the audit entries that changed what clients get."""
    store = Store(url)
    try:
        times: dict[int, list[int]] = {}
        for n, path in enumerate(configs):
            times[n] = sorted(
                int(entry.at.astimezone(UTC).timestamp() * 1e9)
                for entry in store.history(NAMESPACE, path, limit=10**7)
                if entry.action in CHANGE_ACTIONS
            )
        return times
    finally:
        store.close()


def read_records(files: list[Path]) -> Iterator[list[str]]:
    for path in files:
        if path.exists():
            with path.open(encoding="ascii") as lines:
                for line in lines:
                    yield line.split()


def poll_figures(
    records: list[list[str]], changes: dict[int, list[int]], start_ns: int, end_ns: int
) -> dict[str, Any]:
    """Polls served, errors and poll latency (bench/README.md defines them) in [start, end)."""
    latencies: dict[str, list[float]] = {"immediate": [], "deadline": [], "change": []}
    served = {"200": 0, "304": 0}
    errors: dict[str, int] = {}
    reports = 0
    report_errors: dict[str, int] = {}
    lags: list[float] = []
    for record in records:
        kind = record[0]
        if kind == "p":
            sent, received, status, wait, config = (
                int(record[1]), int(record[2]), record[3], float(record[4]), int(record[5])
            )  # fmt: skip
            if not start_ns <= received < end_ns:
                continue
            served[status] += 1
            round_trip = (received - sent) / 1e9
            if wait == 0:
                latencies["immediate"].append(round_trip)
            elif status == "304":
                latencies["deadline"].append(max(0.0, round_trip - wait))
            else:
                times = changes.get(config, [])
                at = bisect.bisect_right(times, received)
                change = times[at - 1] if at else 0
                if change <= sent:
                    latencies["immediate"].append(round_trip)
                else:
                    latencies["change"].append((received - change) / 1e9)
        elif start_ns <= int(record[1]) < end_ns:
            if kind == "l":
                lags.append(float(record[2]))
            elif kind == "e":
                errors[record[2]] = errors.get(record[2], 0) + 1
            elif record[2] == "202":
                reports += 1
            else:
                report_errors[record[2]] = report_errors.get(record[2], 0) + 1
    every = [x for values in latencies.values() for x in values]
    return {
        "polls_served": served["200"] + served["304"],
        "polls_200": served["200"],
        "polls_304": served["304"],
        "poll_errors": errors,
        "reports_accepted": reports,
        "report_errors": report_errors,
        "poll_latency_p50_s": percentile(every, 0.50),
        "poll_latency_p99_s": percentile(every, 0.99),
        "poll_latency_max_s": percentile(every, 1.0),
        "client_loop_lag_max_s": round(max(lags, default=0.0), 2),
        "client_loop_lag_over_1s": sum(1 for lag in lags if lag > 1.0),
        "poll_latency_by_kind": {
            kind: {
                "count": len(values),
                "p50_s": percentile(values, 0.5),
                "p99_s": percentile(values, 0.99),
                "max_s": percentile(values, 1.0),
            }
            for kind, values in latencies.items()
        },  # fmt: skip
    }


def rss_figures(samples: list[dict[str, Any]], phase: Phase, warmup_s: float) -> dict[str, Any]:
    """RSS after the warm-up and at the end of the load window, per process, and its growth."""
    inside = [s for s in samples if phase.start_ns <= s["at_ns"] <= phase.load_end_ns]
    warm = [s for s in inside if s["at_ns"] >= phase.start_ns + warmup_s * 1e9] or inside[-1:]
    figures: dict[str, Any] = {}
    for name in ("api", "worker", "temporal"):
        values = [s for s in warm if s[name] is not None]
        if not values:
            figures[f"{name}_rss_mb"] = None
            continue
        first, last = values[0][name], values[-1][name]
        figures[f"{name}_rss_mb"] = {
            "start": first,
            "end": last,
            "max": max(s[name] for s in values),
            "growth_pct": round(100 * (last - first) / first, 1),
        }
        if name == "worker" and phase.kills:
            figures["worker_rss_mb"]["processes"] = sorted({s["worker_name"] for s in values})
    per_minute = [s for n, s in enumerate(inside) if n % max(1, round(60 / SAMPLE_EVERY)) == 0]
    figures["rss_per_minute_mb"] = [[s["api"], s["worker"]] for s in per_minute]
    return figures


def log_errors(
    soak: Soak, api: Service, phase: Phase, after: dict[str, tuple[int, int]]
) -> dict[str, Any]:
    """Lines at ERROR level (or tracebacks) that the API and the workers logged in the phase."""
    found: dict[str, list[str]] = {}
    for name, (_, end) in after.items():
        path = api.log_path if name == "api" else soak.worker_logs[int(name.split("-")[1])]
        begin = phase.log_marks.get(name, (0, 0))[1]
        lines = path.read_text(errors="replace").splitlines()[begin:end]
        bad = error_lines("\n".join(lines))
        if bad:
            found[name] = bad
    return {
        "api": len(found.get("api", [])),
        "workers": sum(len(v) for k, v in found.items() if k != "api"),
        "examples": [f"{k}: {v[0][:300]}" for k, v in found.items()][:5],
    }


def phase_result(
    soak: Soak, phase: Phase, records: list[list[str]], changes: dict[int, list[int]],
    api: Service, marks_after: dict[str, tuple[int, int]], warmup_s: float,
) -> dict[str, Any]:  # fmt: skip
    polls = poll_figures(records, changes, phase.start_ns, phase.end_ns)
    rss = rss_figures(soak.samples, phase, warmup_s)
    by_kind: dict[str, dict[str, Any]] = {}
    for rollout in phase.ended:
        entry = by_kind.setdefault(rollout.kind, {"ended": 0, "as_intended": 0})
        entry["ended"] += 1
        entry["as_intended"] += rollout.as_intended
    for rollout in phase.ended:
        reasons = by_kind[rollout.kind].setdefault("reasons", {})
        reason = f"{rollout.outcome}: {rollout.reason[:60]}"
        reasons[reason] = reasons.get(reason, 0) + 1
    unintended = [r for r in phase.ended if not r.as_intended]
    probes = [p for p in soak.probes if phase.start_ns <= p[0] < phase.end_ns]
    answered = [p[1] for p in probes if p[1] is not None]
    durations = [r.seconds for r in phase.ended]
    errors = sum(polls["poll_errors"].values()) + sum(polls["report_errors"].values())
    logged = log_errors(soak, api, phase, marks_after)
    growth_ok = all(
        rss[f"{name}_rss_mb"] is not None and rss[f"{name}_rss_mb"]["growth_pct"] < 100 * RSS_GOAL
        for name in ("api", "worker")
    )
    intended = sum(1 for r in phase.ended if r.as_intended)
    all_intended = intended == phase.started and not phase.not_ended and not phase.start_errors
    converged = phase.converged["clients_on_stable"] == phase.converged["clients"]
    return {
        "phase": phase.name,
        "seconds": round((phase.end_ns - phase.start_ns) / 1e9, 1),
        "load_seconds": round((phase.load_end_ns - phase.start_ns) / 1e9, 1),
        **polls,
        "errors": errors,
        **rss,
        "rollouts_started": phase.started,
        "rollouts_ended": len(phase.ended),
        "rollouts_as_intended": intended,
        "rollouts_by_kind": by_kind,
        "rollout_seconds_p50": percentile(durations, 0.5),
        "rollout_seconds_max": percentile(durations, 1.0),
        "unintended": [
            f"{r.workflow_id} run {r.run_id} ({r.kind}): {r.outcome}, intended {r.intended}"
            + ("" if r.stable_ok else ", stable_version not as expected")
            + f"; {r.reason}"
            for r in unintended[:10]
        ],
        "not_ended": phase.not_ended[:10],
        "start_errors": phase.start_errors[:10],
        "operator_errors": phase.operator_errors,
        "operator_error_examples": phase.operator_error_examples,
        "worker_kills": phase.kill_log,
        "api_probe": {
            "requests": len(probes),
            "failed": len(probes) - len(answered),
            "p50_s": percentile(answered, 0.5),
            "p99_s": percentile(answered, 0.99),
            "max_s": percentile(answered, 1.0),
            "bench_loop_lag_max_s": round(max((p[2] for p in probes), default=0.0), 2),
        },
        "cpu_seconds": {
            name: round(phase.cpu_end[name] - phase.cpu_start[name], 1) for name in phase.cpu_end
        },
        "clients_converged": phase.converged,
        "api_metrics_at_end": phase.api_metrics,
        "logged_errors": logged,
        "goals": {
            "no_errors": errors == 0,
            "rss_growth_below_10pct": growth_ok,
            "rollouts_all_as_intended": all_intended,
            "clients_on_stable_at_end": converged,
        },
    }


# -- main -----------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="load window of each phase (default 10)"
    )
    parser.add_argument(
        "--clients", type=int, default=2000, help="long-polling clients (default 2000)"
    )
    parser.add_argument(
        "--rollouts", type=int, default=20, help="rollouts running at all times (default 20)"
    )
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server (postgresql+psycopg://...): the soak creates a fresh database "
        "on it and drops it after; default SQLite in a temporary directory",
    )
    parser.add_argument(
        "--kill-every",
        type=float,
        default=60.0,
        help="seconds between worker SIGKILLs in phase 2 (default 60)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="copy the run's logs and poll records into this directory (default: discarded)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="random seed (default: a new one, printed)"
    )
    parser.add_argument(TINY_FLAG, action="store_true", help=f"{TINY_SOAK}: {TINY_HELP}")
    args = parser.parse_args()
    if args.tiny:
        args.minutes, args.clients, args.rollouts, args.kill_every = TINY_SIZES
    for name in ("minutes", "clients", "rollouts", "kill_every"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.database_url and not args.database_url.startswith("postgresql"):
        parser.error("--database-url takes a PostgreSQL server URL (postgresql+psycopg://...)")
    if args.seed is None:
        args.seed = random.randrange(1 << 32)
    return args


async def soak_run(args: argparse.Namespace, url: str, workdir: Path) -> dict[str, Any]:
    soak = Soak(args, url, workdir)
    load_seconds = args.minutes * 60
    warmup_s = min(60.0, load_seconds / 4)
    upgrade = subprocess.run(
        [str(TEMPOCONF), "db", "upgrade", *soak.component_args("db")[2:]],
        env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if upgrade.returncode != 0:
        raise SystemExit(f"tempoconf db upgrade failed:\n{upgrade.stdout}{upgrade.stderr}")
    soak.seed()
    log(
        f"starting the Temporal dev server, worker and API ({soak.configs[0]} .. {soak.configs[-1]})"
    )
    temporal = soak.start_temporal()
    api: Service | None = None
    fleet: Fleet | None = None
    sampler: asyncio.Task[None] | None = None
    prober: asyncio.Task[None] | None = None
    phases = [Phase("steady", kills=False), Phase("worker_sigkill", kills=True)]
    marks_after: list[dict[str, tuple[int, int]]] = []
    try:
        client = await soak.connect(temporal)
        await soak.start_worker()
        api = await soak.start_api()
        fleet = Fleet(soak.api_port, args.clients, soak.configs, workdir)
        await fleet.start()
        await fleet.ready(STARTUP_TIMEOUT)
        log(f"{args.clients} clients long-polling {len(soak.configs)} configs")
        soak.pids = {"api": api.pid, "temporal": temporal.pid}
        soak.client_pids = fleet.pids()
        sampler = asyncio.create_task(soak.sample(soak.pids))
        prober = asyncio.create_task(soak.probe())
        for phase in phases:
            await soak.run_phase(phase, client, fleet, api, load_seconds)
            marks_after.append(soak.log_mark(api))
    finally:
        for task in (sampler, prober):
            if task is not None:
                task.cancel()
        if fleet is not None:
            await fleet.stop()
        if api is not None:
            api.stop()
        if soak.worker is not None:
            soak.worker.stop()
        temporal.stop()
    assert api is not None and fleet is not None
    changes = change_times(url, soak.configs)
    records = list(read_records(fleet.record_files))
    results = [
        phase_result(soak, phase, records, changes, api, marks, warmup_s)
        for phase, marks in zip(phases, marks_after, strict=True)
    ]
    return {
        "results": results,
        "fleet_totals": fleet.summaries,
        "warmup_s": warmup_s,
        "configs": len(soak.configs),
    }


async def main() -> None:
    args = parse_args()
    require_fds(args.clients * 3 + 2000)
    backend = "postgresql" if args.database_url else "sqlite"
    log(
        f"soak: {backend}, {args.clients} clients, {args.rollouts} rollouts, 2 x {args.minutes:g} min, seed {args.seed}"
    )
    with tempfile.TemporaryDirectory(prefix="tempoconf-soak-") as directory:
        workdir = Path(directory)
        with database(backend, server=args.database_url) as url:
            try:
                run = await soak_run(args, url, workdir)
            finally:
                if args.keep is not None:
                    shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
                    log(f"logs and poll records kept in {args.keep}")
    results = run["results"]
    emit(
        {
            "bench": "soak",
            "backend": backend,
            "clients": args.clients,
            "rollouts_at_a_time": args.rollouts,
            "configs": run["configs"],
            "minutes_per_phase": args.minutes,
            "worker_kill_every_s": args.kill_every,
            "long_poll_wait_s": LONG_POLL_WAIT,
            "seed": args.seed,
            "rss_warmup_s": run["warmup_s"],
            "phases": results,
            "goal": "per phase: no errors, API and worker RSS growth < 10%, every rollout ended "
            "as intended, every client back on stable",
            "goal_met": all(all(r["goals"].values()) for r in results),
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
