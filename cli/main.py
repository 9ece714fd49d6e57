"""`tempoconf`: the command line (README, Every command). Flags win over the environment."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
import time
import traceback
from collections.abc import Sequence

from tempoconf.cli._common import CommandError
from tempoconf.cli._flags import (
    Command,
    Subcommands,
    add_command,
    add_commands,
    client_identity_flags,
    config_namespace_flag,
    flag,
    json_flag,
    switch,
)
from tempoconf.cli._tree_commands import TREE_COMMANDS
from tempoconf.rollout.commands import OPERATOR_COMMANDS, CommandSpec

__all__ = ["build_parser", "main"]


def _package_version() -> str:
    """The installed distribution's version (pyproject.toml), from the package metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tempoconf")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _workers(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of processes, not {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (1: this process serves), not {count}")
    return count


def _connection_flags(
    host_help: str = "host of the local dev stack (default 127.0.0.1)",
) -> argparse.ArgumentParser:
    """Flags every command that talks to Temporal, the store or the API accepts."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection (flags win over the environment)")
    group.add_argument(
        "--data-dir", help="local state (default .tempoconf; env TEMPOCONF_DATA_DIR)"
    )
    group.add_argument("--host", help=host_help)
    group.add_argument(
        "--temporal-address",
        help="Temporal frontend host:port (env TEMPORAL_ADDRESS; TLS and API key only from the "
        "env: TEMPORAL_TLS_*, TEMPORAL_API_KEY, as the temporal CLI reads them)",
    )
    group.add_argument(
        "--temporal-namespace", help="Temporal namespace (env TEMPORAL_NAMESPACE, default default)"
    )
    group.add_argument("--task-queue", help="task queue of the worker (default tempoconf)")
    group.add_argument(
        "--database-url",
        help="store URL (env TEMPOCONF_DATABASE_URL; default SQLite in the data dir)",
    )
    group.add_argument("--api-url", help="distribution API base URL (env TEMPOCONF_API_URL)")
    group.add_argument("--ui-port", type=int, help="Temporal Web UI port, for links (default 8233)")
    return parent


def _stack_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", help="state of the server, store and logs (default .tempoconf)"
    )
    parser.add_argument("--host", help="address every listener binds (default 127.0.0.1)")
    parser.add_argument(
        "--temporal-port", type=int, help="Temporal gRPC port (default 7233; 0: a free one)"
    )
    parser.add_argument(
        "--ui-port", type=int, help="Temporal Web UI port (default 8233; 0: a free one)"
    )
    parser.add_argument(
        "--api-port", type=int, help="distribution API port (default 8080; 0: a free one)"
    )
    parser.add_argument("--database-url", help="store URL (default SQLite in the data dir)")


_PATH = flag("path", metavar="PATH")
_REQUEST_FILE = flag("file", metavar="FILE", help="rollout request (JSON; - for stdin)")
_AUDIT_REASON = flag("--reason", default="", help="why, for the audit log")

_DEMO_FLAGS = (
    switch("--happy-path-only", "roll out the example only, not the bad value after it"),
    switch(
        "--exit-after-rollout",
        "exit when the first rollout ends, before the bad value (0 if promoted)",
    ),
    switch(
        "--exit-after-demo",
        "exit when the demo's rollouts end instead of staying up (0 if the first was "
        "promoted and the bad value was caught by the canaries and reverted)",
    ),
    flag("--clients", type=int, default=200, help="size of the simulated fleet (default 200)"),
    flag(
        "--cooldown",
        default="5s",
        help="hold time of every stage of the first rollout (default 5s; the bad value's "
        "canary stage holds 30s, checked every second)",
    ),
)

_STACK = (
    Command(
        "dev",
        "Temporal dev server, worker and API on this machine; Ctrl-C stops all three",
        "components.dev_command",
        [_stack_flags],
        connected=False,
    ),
    Command(
        "demo",
        "the dev stack, a simulated fleet and two rollouts with live progress: the example "
        "promoted, then a bad value caught by the canaries and reverted",
        "demo.demo_command",
        [_stack_flags, *_DEMO_FLAGS],
        connected=False,
    ),
    Command(
        "worker",
        "run the rollout worker (real deployment)",
        "components.worker_command",
        [
            flag(
                "--deployment-name",
                help="Worker Deployment this worker is a version of (env "
                "TEMPOCONF_DEPLOYMENT_NAME; default none: an unversioned worker)",
            ),
            flag(
                "--build-id",
                help="this worker's build in its deployment (env TEMPOCONF_BUILD_ID; default the "
                "package version and a hash of its code)",
            ),
            flag(
                "--sdk-metrics-address",
                metavar="IP:PORT",
                help="serve the Temporal SDK's metrics (temporal_*) for Prometheus at http://"
                "IP:PORT/metrics (env TEMPOCONF_SDK_METRICS_ADDRESS; default off)",
            ),
        ],
    ),
)

_DB = (
    Command(
        "upgrade",
        "migrate the store to this version's schema (run once per upgrade, before the API and "
        "workers start)",
        "db.upgrade_command",
    ),
    Command(
        "downgrade",
        "take the store back to an earlier version's migration (run with this version, before "
        "the earlier one runs again; no rollout running)",
        "db.downgrade_command",
        [
            flag(
                "revision",
                metavar="REVISION",
                help="the migration to go back to, as the earlier tempoconf names it (e.g. "
                "0006_freezes)",
            )
        ],
    ),
)

_SCHEMA = (
    Command(
        "set",
        "register (or replace) a JSON Schema",
        "schema.set_command",
        [
            flag("path", metavar="PATH", help="config path, e.g. myproject/server_config"),
            flag("file", metavar="FILE", help="JSON Schema file (draft 2020-12; - for stdin)"),
            _AUDIT_REASON,
            config_namespace_flag,
        ],
    ),
    Command(
        "get", "print a config's JSON Schema", "schema.get_command", [_PATH, config_namespace_flag]
    ),
    Command(
        "request",
        "print the rollout request's JSON Schema (for editors; docs/rollout-request.schema.json)",
        "schema.request_command",
        connected=False,
    ),
)

_ROLLOUT = (
    Command(
        "start",
        "start ConfigRollout from a JSON request",
        "rollout.start_command",
        [
            _REQUEST_FILE,
            switch("--wait", "wait for the result (exit 1 unless promoted or bypassed)"),
            flag(
                "--id",
                dest="workflow_id",
                help="workflow id: rollout:{namespace}/{path} (the default; a changeset's "
                "changeset:ID), or it followed by ':' and a suffix (rollout:ns/app/config:hotfix-7)",
            ),
        ],
    ),
    Command(
        "status",
        "progress as the workflow reports it",
        "status.status_command",
        [
            _PATH,
            switch("--json", "print the raw status object"),
            switch(
                "--watch",
                "redraw until the rollout ends, then exit with its outcome (0 if promoted or "
                "bypassed)",
            ),
            flag(
                "--interval", type=float, default=2.0, help="seconds between refreshes (default 2)"
            ),
            flag(
                "--id",
                dest="workflow_id",
                help="workflow id (default: the lock holder, else the newest in the audit log, "
                "else rollout:{namespace}/{path})",
            ),
            config_namespace_flag,
        ],
    ),
    Command(
        "plan",
        "validate a request and show what it would do, publishing nothing",
        "plan.plan_command",
        [
            _REQUEST_FILE,
            flag(
                "--clients",
                dest="clients_file",
                metavar="FILE",
                help='clients to count per stage: a JSON list of {"client", "channel", "labels"} '
                "(added to the clients that reported recently)",
            ),
            flag(
                "--since",
                default="1h",
                help="how recent a client's report must be to count it (default 1h)",
            ),
            json_flag("the plan"),
        ],
    ),
)


def _operator_command(command: CommandSpec) -> Command:
    """`rollout pause|resume|...`: a command of tempoconf.rollout.commands sent to the rollout."""
    flags = [_PATH]
    if command.takes_reason:
        flags.append(flag("--reason", default="", help="why, recorded in the rollout's history"))
    if command.takes_digest:
        flags.append(
            flag(
                "--digest",
                default="",
                help="the digest of the plan you reviewed (`rollout plan` prints it); required by "
                "a stage with approvals",
            )
        )
    flags.append(
        flag(
            "--id",
            dest="workflow_id",
            help="workflow id (default: the lock holder, else rollout:{namespace}/{path})",
        )
    )
    return Command(
        command.name.value, command.help, "rollout.update_command", [*flags, config_namespace_flag]
    )


_CONFIG = (
    Command(
        "get",
        "the value the API serves to a client",
        "get.get_command",
        [
            _PATH,
            client_identity_flags,
            switch("--stable", "the stable value, whatever the stages say"),
            config_namespace_flag,
        ],
    ),
    Command(
        "versions",
        "the versions of a config, newest first",
        "schema.versions_command",
        [_PATH, json_flag("the versions"), config_namespace_flag],
    ),
    Command(
        "history",
        "the audit log of a config, oldest first",
        "schema.history_command",
        [
            _PATH,
            flag("--limit", type=int, default=50, help="the last N entries (default 50)"),
            json_flag("the entries"),
            config_namespace_flag,
        ],
    ),
    Command(
        "clients",
        "the clients seen on a config and the version each applied",
        "clients.clients_command",
        [
            _PATH,
            flag("--version", metavar="V", help="only the clients on this version"),
            switch(
                "--not-applied", "with --version: only the clients that have not reported V applied"
            ),
            flag(
                "--since",
                default="1h",
                help="how recently a client must have been seen (default 1h)",
            ),
            json_flag("the clients"),
            config_namespace_flag,
        ],
        description=(
            "The clients seen polling or reporting on a config recently, with the version each "
            "last reported applied (and its last apply error). --version V lists those on V; "
            "--not-applied, those served V that have not applied it (a stage's stragglers)."
        ),
    ),
    Command(
        "rollback",
        "put a config back on a version it had: at once, or through stages with --staged",
        "rollout.rollback_command",
        [
            _PATH,
            flag("version", metavar="VERSION", help="a version id (`tempoconf versions PATH`)"),
            _AUDIT_REASON,
            switch(
                "--staged",
                "roll back through stages (canary channel → 10%% → 50%%) instead of at once",
            ),
            flag("--cooldown", help="hold of each stage of a --staged rollback (default 5m)"),
            flag(
                "--stages-from",
                metavar="FILE",
                help="a --staged rollback takes 'stages' (and 'strategy') of this request file",
            ),
            switch("--wait", "wait for the result (an immediate rollback waits unless --no-wait)"),
            switch("--no-wait", "start it and return"),
            config_namespace_flag,
        ],
    ),
)

_TRACE = Command(
    "trace",
    "the traces of rollouts in files of spans (OTEL_TRACES_EXPORTER=console), as trees",
    "trace.trace_command",
    [
        flag("files", metavar="FILE", nargs="+", help="output holding spans"),
        flag("--workflow-id", help="only the rollout of this workflow id (default: every rollout)"),
    ],
    connected=False,
    description=(
        "Reads the spans that processes traced with OTEL_TRACES_EXPORTER=console wrote to "
        "their standard output (other output in the files is skipped) and prints each "
        "rollout's trace as an indented tree: span, service where it changes, duration."
    ),
)


EXIT_CODES = """\
exit codes:
  0    done (a rollout waited for: promoted or bypassed)
  1    failed: refused, not found, a rollout not promoted, or the store, Temporal or the API
       could not be reached (one line names it and the setting to check)
  2    wrong usage or input: a flag, a setting, a request file (`diff`: something to do)
  3    `rollout status`: the workflow did not answer (no worker?); the store's state is shown
       (with --watch: shown, then asked again until a worker answers)
  130  interrupted (Ctrl-C); 128+N: stopped by signal N (`apply --halt-on-interrupt`)
  141  output closed early (a pipe into `head`)
An error is one line `tempoconf: ...`; --debug (or TEMPOCONF_DEBUG=1) adds its traceback. An
unexpected error (a bug) always prints its traceback."""


def _actions(commands: Subcommands, name: str, help: str) -> Subcommands:
    """`tempoconf NAME ACTION`: the subcommands of a group."""
    group = commands.add_parser(name, help=help)
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def build_parser() -> argparse.ArgumentParser:
    connection = _connection_flags()
    parser = argparse.ArgumentParser(
        prog="tempoconf",
        description="Staged configuration rollouts on Temporal.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, print its traceback too (env TEMPOCONF_DEBUG=1)",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"tempoconf {_package_version()}",
        help="print the installed version of tempoconf and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_commands(commands, _STACK, connection)

    api = commands.add_parser(
        "api",
        parents=[
            _connection_flags(
                host_help="address the API listens on (default 127.0.0.1; 0.0.0.0 in a container)"
            )
        ],
        help="run the distribution API (real deployment)",
    )
    api.add_argument("--port", dest="api_port", type=int, help="port to listen on (default 8080)")
    api.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="API processes serving the port (default 1: this process serves). N > 1: a "
        "supervisor and N processes sharing the port (SO_REUSEPORT, Linux), one per core",
    )
    # Set by the supervisor of `--workers N` on each of its workers; not for people.
    api.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)
    api.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    api.set_defaults(handler="components.api_command")

    from tempoconf.cli import edge as edge_cli  # its flags only: the API is imported when it runs

    edge_cli.add_parser(commands)
    add_commands(_actions(commands, "db", "the store's schema: migrations"), _DB, connection)
    schema_help = "the JSON Schema of a config, or of the rollout request"
    add_commands(_actions(commands, "schema", schema_help), _SCHEMA, connection)
    rollout = _actions(commands, "rollout", "start, watch and steer rollouts")
    add_commands(rollout, _ROLLOUT, connection)
    for command in OPERATOR_COMMANDS:
        update = add_command(rollout, _operator_command(command), connection)
        update.set_defaults(update_name=command.name.value)
    add_commands(commands, _CONFIG, connection)
    add_commands(commands, TREE_COMMANDS, connection)

    from tempoconf.cli import (
        agent,  # its flags only: the client SDK is imported when the command runs
        freeze,
    )

    freeze.add_parser(commands, connection)
    agent.add_parser(commands)
    add_command(commands, _TRACE, connection)
    return parser


# The service name of each kind of process in its traces, unless OTEL_SERVICE_NAME gives one.
_SERVICES = {
    "worker": "tempoconf-worker",
    "api": "tempoconf-api",
    "edge": "tempoconf-edge",
    "dev": "tempoconf-dev",
    "demo": "tempoconf-dev",
}


def _start_tracing(command: str) -> None:
    """Tracing as the `OTEL_*` variables say (tempoconf.tracing: off without them)."""
    from tempoconf.tracing import TracingSettingsError, setup_tracing

    try:
        setup_tracing(_SERVICES.get(command, "tempoconf-cli"))
    except TracingSettingsError as error:
        raise CommandError(str(error), exit_code=2) from None


# The log lines of every command: `2026-12-04 13:55:04.123 UTC WARNING name: message`.
UTC_LOG_FORMATTER = logging.Formatter(
    "%(asctime)s.%(msecs)03d UTC %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%d %H:%M:%S"
)
UTC_LOG_FORMATTER.converter = time.gmtime


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tempoconf` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # Warnings and errors of the worker, the API and the SDK reach the terminal; routine logs do not.
    # Each line's time in UTC, saying so, as every time tempoconf prints.
    handler = logging.StreamHandler()
    handler.setFormatter(UTC_LOG_FORMATTER)
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    debug = bool(args.debug) or os.environ.get("TEMPOCONF_DEBUG", "") not in ("", "0")
    try:
        _start_tracing(args.command)
        module, function = args.handler.rsplit(".", 1)
        # Imported on use: `tempoconf --help` should not pay for temporalio, sqlalchemy and uvicorn.
        code = getattr(importlib.import_module(f"tempoconf.cli.{module}"), function)(args)
    except CommandError as error:
        print(f"tempoconf: {error}", file=sys.stderr)
        if debug:
            traceback.print_exception(error)
        code = error.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141
    except Exception as error:
        from tempoconf.cli._unreachable import unreachable_message

        message = unreachable_message(error, args)
        if message is None:
            raise  # a bug: its traceback is what to report
        print(f"tempoconf: {message}", file=sys.stderr)
        if debug:
            traceback.print_exception(error)
        code = 1
    finally:
        # Before os._exit below, which runs no atexit handler: the last spans are written now.
        from tempoconf.tracing import shutdown_tracing

        shutdown_tracing()
    if argv is None and "temporalio.bridge" in sys.modules:
        # As a process of its own: skip interpreter teardown, during which the Temporal client's
        # native threads can abort the process (sdk-python#300, "PyGILState_Release ... finalizing").
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError):
                stream.flush()
        os._exit(int(code))
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
