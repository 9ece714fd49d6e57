"""Shared by the benchmarks: the API in its own process, the long-polling load generator, the
store a benchmark runs on (SQLite or a fresh PostgreSQL database), and the figures.

Every benchmark prints its figures as ONE JSON line on stdout (`emit`); progress goes to stderr.
Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tempoconf.canonical import version_id
from tempoconf.resolution import ClientIdentity, PublishedStage, VersionRecord
from tempoconf.store.store import Store

__all__ = [
    "CANARY_EVERY",
    "CONFIG_PATH",
    "NAMESPACE",
    "NEW_VALUE",
    "ApiProcess",
    "BenchRollout",
    "CliProcess",
    "LoadGen",
    "bounded",
    "client_id",
    "client_identity",
    "context",
    "database",
    "emit",
    "free_port",
    "latency_figures",
    "log",
    "raise_fd_limit",
    "require_fds",
    "require_wrk",
    "seed_config",
    "stdout_to_stderr",
]

BENCH_DIR = Path(__file__).resolve().parent
PYTHON = sys.executable
NAMESPACE = "default"
CONFIG_PATH = "bench/server_config"
STABLE_VALUE: dict[str, Any] = {"max_connections": 1000, "is_debug": False, "tier": "stable"}
NEW_VALUE: dict[str, Any] = {"max_connections": 2000, "is_debug": False, "tier": "candidate"}
CANARY_EVERY = 100
"""Client i is on channel `canary` when i % CANARY_EVERY == 0 (10 of 1,000)."""
CLIENTS_PER_GENERATOR = 5000
"""A generator process per this many clients: each keeps its own event loop below one core."""
CHECK_EVERY = 0.1
"""Seconds between two checks of a condition on the fleet (`LoadGen.until`)."""
SETTLE_PAUSE = 0.5
POSTGRESQL_URL_VARIABLE = "TEMPOCONF_BENCH_DATABASE_URL"
DEFAULT_POSTGRESQL_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
LEASE = timedelta(hours=1)
"""Stage leases outlive any benchmark, so no answer changes by expiry while one runs."""


# -- output ---------------------------------------------------------------------------------
def log(message: str) -> None:
    """Progress, on stderr (stdout is the one JSON line)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


_LOAD_AT_START = os.getloadavg()[0]


def emit(result: dict[str, Any]) -> None:
    """The benchmark's figures: one JSON line on stdout, with what they were measured on."""
    result["context"] = context()
    print(json.dumps(result, separators=(", ", ": ")), flush=True)


def context() -> dict[str, Any]:
    """The code measured (commit, and whether the tree had uncommitted changes) and the machine:
    its cores and its load (other work on a shared machine moves every figure)."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=BENCH_DIR.parent, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD")
    dirty = bool(
        git(
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "api",
            "tempoconf",
            "workflows",
            "activities",
            "cli",
        )
    )
    return {
        "commit": commit + ("+uncommitted" if dirty else "") if commit else None,
        "cpus": os.cpu_count(),
        "loadavg_1m": {"start": round(_LOAD_AT_START, 2), "end": round(os.getloadavg()[0], 2)},
    }


def latency_figures(latencies: list[float], expected: int) -> dict[str, Any]:
    """p50/p99/max of per-client latencies (seconds) and the time until 99% of `expected`
    clients arrived; a client that never arrived counts as infinitely late (figure: None)."""
    values = sorted(latencies) + [math.inf] * (expected - len(latencies))

    def rank(q: float) -> float | None:
        if not values:
            return None
        value = values[max(0, math.ceil(q * len(values)) - 1)]
        return None if math.isinf(value) else round(value, 4)

    return {
        "clients_expected": expected,
        "clients_arrived": len(latencies),
        "p50_s": rank(0.50),
        "p99_s": rank(0.99),
        "max_s": rank(1.0),
        "time_to_99pct_s": rank(0.99),
    }


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr meanwhile: a child started here (the Temporal dev
    server prints a banner) must not add lines to the benchmark's one-line stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


# -- CPU time -------------------------------------------------------------------------------
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """CPU time so far of a process and of its live descendants (a supervisor's workers)."""
    total = cpu_seconds(pid) or 0.0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += tree_cpu_seconds(int(child))
    return total


def waited_children_cpu_seconds() -> float:
    """CPU time of this process's children that have ended and been waited for (a wrk run,
    once its process has exited and asyncio has reaped it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- environment ----------------------------------------------------------------------------
def raise_fd_limit() -> int:
    """Raise the soft open-files limit to the hard one (children inherit it); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def require_fds(needed: int) -> None:
    """Refuse, saying why, when the open-files limit cannot hold `needed` sockets."""
    limit = raise_fd_limit()
    if limit < needed:
        raise SystemExit(
            f"open-files limit is {limit}, this benchmark needs about {needed}: "
            f"raise it (ulimit -Hn, /etc/security/limits.conf) and run again"
        )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def require_wrk() -> str:
    """The path of wrk, or exit with how to install it."""
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit(
            "wrk is missing: install the Debian package (as root: apt-get install -y wrk), "
            "or run `make bench`, which installs it when run as root"
        )
    return path


# -- clients --------------------------------------------------------------------------------
def client_id(i: int) -> str:
    """The id of client i, the same in the load generator and here."""
    return f"host-{i:05d}"


def client_identity(i: int) -> ClientIdentity:
    channel = "canary" if i % CANARY_EVERY == 0 else None
    return ClientIdentity(client_id=client_id(i), channel=channel)


# -- store ----------------------------------------------------------------------------------
@contextlib.contextmanager
def database(backend: str, server: str | None = None) -> Iterator[str]:
    """A fresh, empty database for one run: an SQLite file in a temporary directory, or a new
    PostgreSQL database `tempoconf_bench_<random>` (dropped afterwards) on the server of `server`,
    else of TEMPOCONF_BENCH_DATABASE_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test)."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="tempoconf-bench-") as directory:
            yield f"sqlite:///{Path(directory) / 'tempoconf.db'}"
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    url = make_url(server or os.environ.get(POSTGRESQL_URL_VARIABLE) or DEFAULT_POSTGRESQL_URL)
    name = f"tempoconf_bench_{secrets.token_hex(6)}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def seed_config(store: Store) -> str:
    """The benchmark config with a stable version; returns that version."""
    version = version_id(STABLE_VALUE)
    store.put_version(NAMESPACE, CONFIG_PATH, VersionRecord(version, STABLE_VALUE, author="bench"))
    store.set_stable(
        NAMESPACE,
        CONFIG_PATH,
        version,
        actor="bench",
        reason="seed",
        event_key=f"bench:stable:{version}",
    )
    return version


@dataclass
class BenchRollout:
    """A rollout written straight to the store, the way the workflow's activities write it."""

    store: Store
    run_id: str = field(default_factory=lambda: f"bench-{secrets.token_hex(4)}")
    version: str = ""

    def begin(self, value: dict[str, Any] = NEW_VALUE) -> str:
        self.version = version_id(value)
        self.store.put_version(
            NAMESPACE, CONFIG_PATH, VersionRecord(self.version, value, author="bench")
        )
        workflow_id = f"bench:{self.run_id}"
        self.store.acquire_locks(
            {(NAMESPACE, CONFIG_PATH): self.version}, workflow_id=workflow_id, run_id=self.run_id
        )
        self.store.begin_rollout(
            NAMESPACE,
            CONFIG_PATH,
            workflow_id=workflow_id,
            run_id=self.run_id,
            version=self.version,
            actor="bench",
            reason="bench",
            event_key=f"{self.run_id}:begin",
        )
        return self.version

    def stage(
        self, index: int, *, channel: str | None = None, percentile: float | None = None
    ) -> PublishedStage:
        name = f"channel:{channel}" if channel else f"{percentile:g}%"
        return PublishedStage(
            index=index,
            name=name,
            channel=channel,
            percentile=percentile,
            labels={},
            expires_at=datetime.now(UTC) + LEASE,
        )

    def publish(self, stage: PublishedStage) -> int:
        """Publish `stage`; returns time.time_ns() taken right after the commit returned."""
        self.store.publish_stage(
            NAMESPACE,
            CONFIG_PATH,
            run_id=self.run_id,
            stage=stage,
            actor="bench",
            event_key=f"{self.run_id}:stage:{stage.index}",
        )
        return time.time_ns()

    def revert(self) -> int:
        """Clear the rollout (every client back on stable), as the revert activity does;
        returns time.time_ns() taken right after the commit returned."""
        self.store.revert(
            NAMESPACE,
            CONFIG_PATH,
            run_id=self.run_id,
            workflow_id=f"bench:{self.run_id}",
            actor="bench",
            reason="bench",
            outcome="reverted",
            event_key=f"{self.run_id}:revert",
        )
        return time.time_ns()


def seed_live_rollout(url: str) -> None:
    """Stable, plus a live rollout with a canary stage and a 10% stage: each client's answer is
    a real resolution (channel, then bucket), not the stable shortcut."""
    store = Store(url, migrate=True)
    try:
        seed_config(store)
        rollout = BenchRollout(store)
        rollout.begin()
        rollout.publish(rollout.stage(0, channel="canary"))
        rollout.publish(rollout.stage(1, percentile=10))
    finally:
        store.close()


# -- the API process ------------------------------------------------------------------------
class ApiProcess:
    """`bench/_serve.py` in a subprocess: the API over `database_url` (kind "api"), an edge relay
    whose upstream is the URL given as `database_url` (kind "edge"), or a fixed 304 floor
    (kind "floor": raw ASGI; "lean_floor": the API's own protocol), on uvicorn with httptools
    and uvloop, one worker, a free port (a floor given `shared_port`: that port, shared with the
    other floors given it, by SO_REUSEPORT)."""

    def __init__(
        self, kind: str, database_url: str | None = None, *, shared_port: int | None = None
    ) -> None:
        self.kind = kind
        self.database_url = database_url
        self.shared_port = shared_port
        self.port = 0
        self._process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> ApiProcess:
        args = [str(BENCH_DIR / "_serve.py"), self.kind]
        if self.database_url:
            args.append(self.database_url)
        elif self.shared_port is not None:
            args.append(str(self.shared_port))
        self._process = await asyncio.create_subprocess_exec(
            PYTHON, *args, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
        )
        assert self._process.stdout is not None
        try:
            line = await asyncio.wait_for(self._process.stdout.readline(), 60)
            self.port = int(line)
        except (TimeoutError, ValueError) as exc:
            await self.__aexit__()
            raise SystemExit(f"the {self.kind} server did not start (see its log above)") from exc
        await self._wait_ready()
        return self

    async def _wait_ready(self, timeout: float = 60.0) -> None:
        probe = "/healthz" if self.kind in ("api", "edge") else "/"
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as http:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(probe)).status_code < 500:
                        return
                if time.monotonic() > deadline or self._process.returncode is not None:  # type: ignore[union-attr]
                    await self.__aexit__()
                    raise SystemExit(f"the {self.kind} server never answered {probe}")
                await asyncio.sleep(0.1)

    async def __aexit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()

    def rss_mb(self) -> float:
        """Resident memory of the server process (VmRSS), in MB (10^6 bytes, as the goals)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) * 1024 / 1e6, 1)
        raise RuntimeError("no VmRSS in /proc status")

    async def metric(self, name: str, where: Callable[[str], bool] = lambda _: True) -> float:
        """Sum of the samples of metric `name` in /metrics whose label text passes `where`."""
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(self.base_url + "/metrics")).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                labels, _, value = line.rpartition(" ")
                if where(labels):
                    total += float(value)
        return total


class CliProcess:
    """`tempoconf ARGS...` as an operator runs it (`python -m tempoconf.cli.main`), serving at
    `base_url`: ready once `base_url/readyz` answers 200; stopped with SIGINT (Ctrl-C), then
    SIGKILL after a while. Its output goes to stderr (stdout is the one JSON line). Settings the
    caller's shell may carry (TEMPOCONF_*, TEMPORAL_*) are dropped: the flags decide."""

    def __init__(self, base_url: str, *args: str) -> None:
        self.base_url = base_url
        self.args = args
        self._process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    async def __aenter__(self) -> CliProcess:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("TEMPOCONF_", "TEMPORAL_", "OTEL_"))
        }
        self._process = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "tempoconf.cli.main", *self.args,
            stdin=asyncio.subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr, env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 180
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as http:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        return self
                if time.monotonic() > deadline or self._process.returncode is not None:
                    await self.__aexit__()
                    raise SystemExit(f"`tempoconf {' '.join(self.args)}` never got ready")
                await asyncio.sleep(0.2)

    async def __aexit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


# -- the load generator ---------------------------------------------------------------------
class LoadGen:
    """`count` long-polling clients (indices 0..count-1) in `bench/_loadgen.py` processes, one
    per CLIENTS_PER_GENERATOR clients. `holding[i]` is the version client i holds now and
    `arrivals[(i, version)]` the time (ns) it got it."""

    def __init__(
        self,
        port: int,
        count: int,
        *,
        wait: float = 30.0,
        spread: bool = True,
        paths: list[str] | None = None,
        path_index: list[int] | None = None,
        canary_every: int = CANARY_EVERY,
        sources: list[str] | None = None,
        per_generator: int = CLIENTS_PER_GENERATOR,
    ) -> None:
        """`paths`/`path_index`: client i polls paths[path_index[i]] (default: CONFIG_PATH);
        `sources`: loopback addresses the generators bind, one per generator in turn."""
        self.port = port
        self.count = count
        self.wait = wait
        self.spread = spread
        self.paths = paths
        self.path_index = path_index
        self.canary_every = canary_every
        self.sources = sources
        self.per_generator = per_generator
        self.holding: dict[int, str] = {}
        self.arrivals: dict[tuple[int, str], int] = {}
        self.summaries: list[dict[str, Any]] = []
        self._ready = 0
        self._processes: list[asyncio.subprocess.Process] = []
        self._readers: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> LoadGen:
        for number, first in enumerate(range(0, self.count, self.per_generator)):
            count = min(self.per_generator, self.count - first)
            spec: dict[str, Any] = {
                "port": self.port,
                "path": CONFIG_PATH,
                "first": first,
                "count": count,
                "wait": self.wait,
                "canary_every": self.canary_every,
                "spread": self.spread,
            }
            if self.paths is not None and self.path_index is not None:
                spec["paths"] = self.paths
                spec["path_index"] = self.path_index[first : first + count]
            if self.sources:
                spec["source"] = self.sources[number % len(self.sources)]
            process = await asyncio.create_subprocess_exec(
                PYTHON,
                str(BENCH_DIR / "_loadgen.py"),
                json.dumps(spec),
                stdout=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
                limit=1 << 20,
            )
            self._processes.append(process)
            self._readers.append(asyncio.create_task(self._read(process)))
        return self

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            kind, _, rest = raw.decode().rstrip("\n").partition(" ")
            if kind == "v":
                index, version, at = rest.split(" ")
                self.holding[int(index)] = version
                self.arrivals[(int(index), version)] = int(at)
            elif kind == "ready":
                self._ready += int(rest)
            elif kind == "done":
                self.summaries.append(json.loads(rest))

    async def until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Wait until `condition()` holds; False on timeout. It is checked every CHECK_EVERY
        seconds, not on each line read: a check walks thousands of clients, and doing that per
        line would take a core from the API being measured. Arrival times come from the
        generators, so checking late delays only the end of the wait, not the figures."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not condition():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(CHECK_EVERY)
        return True

    async def ready(self, api: ApiProcess, timeout: float) -> None:
        """Every client holds a version and waits in a long-poll (the API's gauge says so)."""
        if not await self.until(lambda: self._ready >= self.count, timeout):
            raise SystemExit(
                f"only {len(self.holding)} of {self.count} clients got a first "
                f"answer within {timeout:g} s"
            )
        await self.settled(api, timeout)

    async def settled(self, api: ApiProcess, timeout: float = 30.0) -> None:
        """Wait until (nearly) every client waits in a long-poll again, then a little more: a
        measured write starts from a quiet API, not amid the answers to the last one."""
        deadline = time.monotonic() + timeout
        # Spread deadlines: a few clients are between two long-polls at any moment.
        enough = self.count * 0.99 if self.spread else self.count
        while await api.metric("tempoconf_api_long_polls_waiting") < enough:
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.count} clients never all waited in long-polls")
            await asyncio.sleep(0.2)
        await asyncio.sleep(SETTLE_PAUSE)

    def on(self, version: str, clients: set[int]) -> int:
        return sum(1 for i in clients if self.holding.get(i) == version)

    def latencies(self, version: str, clients: set[int], since_ns: int) -> list[float]:
        """Seconds from `since_ns` until each client in `clients` got `version` (arrived ones)."""
        return [
            (at - since_ns) / 1e9
            for i in clients
            if (at := self.arrivals.get((i, version))) is not None and at >= since_ns
        ]

    async def __aexit__(self, *exc_info: object) -> None:
        for process in self._processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in self._processes:
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
                await process.wait()
        for reader in self._readers:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(reader, 5)

    def totals(self) -> dict[str, Any]:
        """The generators' counters, summed."""
        status: dict[str, int] = {}
        errors = 0
        for summary in self.summaries:
            errors += summary["connection_errors"]
            for code, n in summary["status"].items():
                status[code] = status.get(code, 0) + n
        return {"responses": status, "connection_errors": errors}


@contextlib.asynccontextmanager
async def bounded(seconds: float, what: str) -> AsyncIterator[None]:
    """Stop a benchmark that hangs: exit with a message once `seconds` pass."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise SystemExit(f"{what} did not finish within {seconds:g} s") from None
