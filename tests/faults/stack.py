"""A tempoconf deployment as separate processes, for killing parts of it under a running rollout.

The Temporal dev server (on its own db file, so a restart resumes its state), `tempoconf worker`,
`tempoconf api` and `tempoconf agent` each run as a subprocess of the test, with their output in
`tmp_path/<name>.log` (printed when a test fails). The store is the test's fresh database; the
worker may reach PostgreSQL through a `TcpProxy` the test can cut.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle

from tempoconf.store.records import AuditEntry
from tempoconf.store.store import Store
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import WORKFLOW_TYPE, search_attribute_arguments
from tests.fixtures.waiting import eventually as wait_until_async
from tests.fixtures.waiting import eventually_sync as wait_until

TEMPOCONF = Path(sys.executable).parent / "tempoconf"
STARTUP_TIMEOUT_SECONDS = 60.0
# Settings the caller's shell may carry; each process gets exactly the ones the stack decides.
_SETTINGS_PREFIXES = ("TEMPORAL_", "TEMPOCONF_")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Process:
    """One long-running subprocess with its output in `log`."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    cwd: Path
    popen: subprocess.Popen[bytes] | None = None
    started_at: int = 0
    """Where this run's output begins in `log`."""

    def start(self) -> Process:
        assert not self.running, f"{self.name} is already running"
        with open(self.log, "ab") as sink:
            sink.write(f"\n--- {time.strftime('%H:%M:%S')} start {' '.join(self.argv)}\n".encode())
            sink.flush()
            self.started_at = sink.tell()
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a signal we send reaches it alone
            )
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for_output(self, text: str, *, timeout: float = STARTUP_TIMEOUT_SECONDS) -> None:
        def printed() -> bool:
            if text in self.log.read_bytes()[self.started_at :].decode(errors="replace"):
                return True
            if not self.running:  # fail now, not at the timeout
                raise RuntimeError(f"{self.name} exited before printing {text!r}:\n{self.output()}")
            return False

        wait_until(printed, what=f"{self.name} to print {text!r}", timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no goodbye, as when a machine dies."""
        assert self.popen is not None and self.running, f"{self.name} is not running"
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)
        with open(self.log, "ab") as sink:
            sink.write(f"\n--- {time.strftime('%H:%M:%S')} SIGKILL by the test\n".encode())

    def stop(self) -> None:
        if self.popen is None or not self.running:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class TcpProxy:
    """A TCP forwarder on loopback that the test can cut (reset every connection, refuse new ones)
    and restore: the network between the worker and PostgreSQL.

    The listening socket stays bound through a cut: released, its port could be taken by another
    test's process meanwhile (the suite runs tests in parallel), and the worker would reconnect
    to a stranger. Cut, a new connection is accepted and reset at once."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._cut = False
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def cut(self) -> None:
        """Refuse new connections and reset every open one."""
        with self._lock:
            self._cut = True
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _reset(sock)

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                cut = self._cut
            if cut:
                _reset(downstream)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(downstream)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._cut:  # cut while connecting
                    _reset(downstream)
                    _reset(upstream)
                    continue
                self._sockets |= {downstream, upstream}
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a lost network path looks to the peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


@dataclass
class Stack:
    """The processes of one deployment, on one store and one Temporal server of this test."""

    tmp: Path
    database_url: str
    worker_database_url: str
    """What the worker uses: `database_url`, or the same database through a TcpProxy."""
    api_database_url: str | None = None
    """What the API uses when not `database_url` (a test that cuts the API's own store)."""
    temporal_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    processes: list[Process] = field(default_factory=list)
    proxy: TcpProxy | None = None
    worker_temporal: TcpProxy | None = None
    """When set, the worker reaches Temporal through this proxy (the test may cut it)."""
    api_temporal: TcpProxy | None = None
    """When set, the API reaches Temporal through this proxy (the test may cut it)."""
    api_settings: dict[str, str] = field(default_factory=dict)
    """More of the API's settings (`TEMPOCONF_ADMIN_TOKEN`...)."""
    _client: Client | None = None

    @property
    def temporal_address(self) -> str:
        return f"127.0.0.1:{self.temporal_port}"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def env(self, database_url: str | None = None, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SETTINGS_PREFIXES)}
        env.update(
            PYTHONUNBUFFERED="1",
            NO_COLOR="1",
            TEMPORAL_ADDRESS=self.temporal_address,
            TEMPOCONF_DATABASE_URL=database_url or self.database_url,
            TEMPOCONF_API_URL=self.api_url,
            TEMPOCONF_DATA_DIR=str(self.tmp / "data"),
        )
        env.update(extra)
        return env

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TEMPOCONF), *args],
            env=self.env(),
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _process(self, name: str, argv: list[str], env: dict[str, str]) -> Process:
        for existing in self.processes:
            if existing.name == name:
                existing.argv, existing.env = argv, env
                return existing
        process = Process(name, argv, env, self.tmp / f"{name}.log", self.tmp)
        self.processes.append(process)
        return process

    def _new_temporal_port(self) -> None:
        self.temporal_port = free_port()

    def _new_api_port(self) -> None:
        self.api_port = free_port()

    def _start_on_free_ports(
        self,
        process_of: Callable[[], Process],
        ready: Callable[[Process], None],
        *,
        new_port: Any,
    ) -> Process:
        """Start a server; when a port it was given was taken meanwhile (free_port() only picks
        a port: parallel tests and other programs race for it), try again on new ports (a fixed
        port stays: a restart must keep the address its clients know)."""
        for attempt in range(5):
            process = process_of().start()
            try:
                ready(process)
                return process
            except RuntimeError:
                output = process.log.read_bytes()[process.started_at :].decode(errors="replace")
                if "already in use" not in output or attempt == 4:
                    raise
                if new_port:
                    new_port()
        raise AssertionError("unreachable")

    # --- the Temporal dev server -------------------------------------------------------------

    def temporal(self) -> Process:
        argv = [
            str(temporal_cli_path()), "server", "start-dev", "--headless",
            "--ip", "127.0.0.1", "--port", str(self.temporal_port),
            "--http-port", str(free_port()), "--metrics-port", str(free_port()),
            "--db-filename", str(self.tmp / "temporal.db"),
            "--log-level", "error",
        ]  # fmt: skip
        argv += search_attribute_arguments()
        return self._process("temporal", argv, self.env())

    def start_temporal(self) -> None:
        first = not self.temporal().log.exists()
        process = self._start_on_free_ports(
            self.temporal,
            # Its banner comes once the frontend serves: a port that merely accepts is not enough.
            lambda started: started.wait_for_output("Temporal Server:"),
            new_port=first and self._new_temporal_port,
        )

        def answers() -> bool:
            assert process.running, f"temporal exited:\n{process.output()}"
            try:
                with socket.create_connection(("127.0.0.1", self.temporal_port), timeout=1):
                    return True
            except OSError:
                return False

        wait_until(answers, what="the Temporal dev server to listen", timeout=60)

    # --- tempoconf's own processes -----------------------------------------------------------

    def temporal_proxy(self) -> TcpProxy:
        """A proxy to the Temporal server (started first: its port is final then)."""
        return TcpProxy("127.0.0.1", self.temporal_port)

    def _temporal_through(self, proxy: TcpProxy | None) -> dict[str, str]:
        return {"TEMPORAL_ADDRESS": f"127.0.0.1:{proxy.port}"} if proxy is not None else {}

    def worker(self) -> Process:
        env = self.env(self.worker_database_url, **self._temporal_through(self.worker_temporal))
        return self._process("worker", [str(TEMPOCONF), "worker"], env)

    def start_worker(self) -> Process:
        process = self.worker().start()
        process.wait_for_output("worker: polling task queue")
        return process

    def api(self) -> Process:
        env = self.env(
            self.api_database_url,
            **self._temporal_through(self.api_temporal),
            **self.api_settings,
        )
        return self._process("api", [str(TEMPOCONF), "api", "--port", str(self.api_port)], env)

    def start_api(self) -> Process:
        first = not self.api().log.exists()
        return self._start_on_free_ports(
            self.api, self._api_serves, new_port=first and self._new_api_port
        )

    def _api_serves(self, process: Process) -> None:
        def serves() -> bool:
            if not process.running:
                raise RuntimeError(f"api exited:\n{process.output()}")
            try:
                answered = httpx.get(f"{self.api_url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
            return answered and process.running  # not another test's API on a reused port

        wait_until(serves, what="the API to answer /healthz", timeout=STARTUP_TIMEOUT_SECONDS)

    def agent(self, path: str, out: Path, *, client: str, channel: str | None = None) -> Process:
        argv = [str(TEMPOCONF), "agent", path, "--out", str(out), "--client", client]
        argv += ["--cache-dir", str(self.tmp / f"cache-{client}"), "--long-poll", "5"]
        if channel:
            argv += ["--channel", channel]
        return self._process(f"agent-{client}", argv, self.env())

    def upgrade_store(self) -> None:
        done = self.cli("db", "upgrade")
        assert done.returncode == 0, done.stdout + done.stderr

    # --- reading what happened ---------------------------------------------------------------

    async def client(self) -> Client:
        """A Temporal client; reconnects after a server restart."""
        if self._client is None:
            self._client = await wait_until_async(
                self._connect, what="a Temporal connection", timeout=30, interval=0.2
            )
        return self._client

    async def _connect(self) -> Client | None:
        try:
            return await Client.connect(self.temporal_address)
        except RuntimeError:
            return None

    async def start_rollout(self, request: dict[str, Any]) -> WorkflowHandle[Any, Any]:
        client = await self.client()
        return await client.start_workflow(
            WORKFLOW_TYPE,
            request,
            id=f"rollout:default/{request['path']}",
            task_queue="tempoconf",
        )

    def served(self, path: str, *, client: str, channel: str | None = None) -> str:
        """The version the API serves this client now."""
        params = {"client": client, **({"channel": channel} if channel else {})}
        answer = httpx.get(f"{self.api_url}/v1/configs/{path}", params=params, timeout=5)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["version"])

    def logs(self) -> list[tuple[str, str]]:
        """Each process's name and output (its last 20,000 characters)."""
        return [(process.name, process.output()[-20000:]) for process in self.processes]

    def stop(self) -> None:
        # Clients and agents first, the server last, as an operator would.
        for process in reversed(self.processes):
            process.stop()
        for proxy in (self.worker_temporal, self.api_temporal):
            if proxy is not None:
                proxy.close()


class StoreStall:
    """Another connection that holds the store's write lock (SQLite: `BEGIN EXCLUSIVE`;
    PostgreSQL: the rollout lock table in EXCLUSIVE mode, which lets plain reads such as the API's
    through but not prepare, publish or promote, which take or lock its row), so such a step waits
    in the middle of its activity until `release()`."""

    def __init__(self, database_url: str) -> None:
        self.url = make_url(database_url)
        self._sqlite: sqlite3.Connection | None = None
        self._engine: Engine | None = None
        self._connection: Connection | None = None

    def begin(self) -> None:
        if self.url.get_backend_name() == "sqlite":
            self._sqlite = sqlite3.connect(
                self.url.database or "", isolation_level=None, check_same_thread=False
            )
            self._sqlite.execute("BEGIN EXCLUSIVE")
        else:
            self._engine = create_engine(self.url, poolclass=NullPool)
            self._connection = self._engine.connect()
            self._connection.exec_driver_sql("LOCK TABLE config_lock IN EXCLUSIVE MODE")

    def release(self) -> None:
        if self._sqlite is not None:
            self._sqlite.rollback()
            self._sqlite.close()
            self._sqlite = None
        if self._connection is not None:
            try:
                self._connection.rollback()
                self._connection.close()
            except OperationalError:
                pass  # the server ended it (a restart): nothing is held any more
            self._connection = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def audit(store: Store, path: str) -> list[AuditEntry]:
    return store.history("default", path, limit=1000)


def actions(store: Store, path: str) -> list[str]:
    return [entry.action for entry in audit(store, path)]


async def completed_activities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The type of each activity whose completion the history records, in order."""
    scheduled: dict[int, str] = {}
    completed = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes_done = event.activity_task_completed_event_attributes
            completed.append(scheduled[attributes_done.scheduled_event_id])
    return completed


async def retried_activities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """`type#attempt` of each activity that needed more than one attempt (a lost worker's
    activity times out and runs again: only its last attempt is in the history)."""
    scheduled: dict[int, str] = {}
    retried = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            if started.attempt > 1:
                retried.append(f"{scheduled[started.scheduled_event_id]}#{started.attempt}")
    return retried


async def pending_activities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The activities the server sees running or due now (type names)."""
    description = await handle.describe()
    return [
        pending.activity_type.name for pending in description.raw_description.pending_activities
    ]


async def activity_started(handle: WorkflowHandle[Any, Any], activity: str) -> bool:
    """The server sees `activity` running in a worker (started, not only scheduled)."""
    description = await handle.describe()
    return any(
        pending.activity_type.name == activity
        and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for pending in description.raw_description.pending_activities
    )


def unique_path(name: str) -> str:
    return f"faults/{name}-{uuid.uuid4().hex[:8]}"
