"""`tempoconf`: the command line (README, Every command). Flags win over the environment."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
import time
from collections.abc import Sequence

from tempoconf.cli._common import CommandError
from tempoconf.rollout.commands import OPERATOR_COMMANDS

__all__ = ["build_parser", "main"]


def _package_version() -> str:
    """The installed distribution's version (pyproject.toml), from the package metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tempoconf")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _label(text: str) -> str:
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"a label is key=value, not {text!r}")
    return text


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


def _config_namespace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", default="default", help="config namespace (default default)")


def build_parser() -> argparse.ArgumentParser:
    connection = _connection_flags()
    parser = argparse.ArgumentParser(
        prog="tempoconf", description="Staged configuration rollouts on Temporal."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"tempoconf {_package_version()}",
        help="print the installed version of tempoconf and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dev = commands.add_parser(
        "dev", help="Temporal dev server, worker and API on this machine; Ctrl-C stops all three"
    )
    _stack_flags(dev)
    dev.set_defaults(handler="components.dev_command")

    demo_parser = commands.add_parser(
        "demo",
        help="the dev stack, a simulated fleet and two rollouts with live progress: the example "
        "promoted, then a bad value caught by the canaries and reverted",
    )
    _stack_flags(demo_parser)
    demo_parser.add_argument(
        "--happy-path-only",
        action="store_true",
        help="roll out the example only, not the bad value after it",
    )
    demo_parser.add_argument(
        "--exit-after-rollout",
        action="store_true",
        help="exit when the first rollout ends, before the bad value (0 if promoted)",
    )
    demo_parser.add_argument(
        "--exit-after-demo",
        action="store_true",
        help="exit when the demo's rollouts end instead of staying up (0 if the first was "
        "promoted and the bad value was caught by the canaries and reverted)",
    )
    demo_parser.add_argument(
        "--clients", type=int, default=200, help="size of the simulated fleet (default 200)"
    )
    demo_parser.add_argument(
        "--cooldown",
        default="5s",
        help="hold time of every stage of the first rollout (default 5s; the bad value's canary "
        "stage holds 30s, checked every second)",
    )
    demo_parser.set_defaults(handler="demo.demo_command")

    worker = commands.add_parser(
        "worker", parents=[connection], help="run the rollout worker (real deployment)"
    )
    worker.add_argument(
        "--deployment-name",
        help="Worker Deployment this worker is a version of (env TEMPOCONF_DEPLOYMENT_NAME; "
        "default none: an unversioned worker)",
    )
    worker.add_argument(
        "--build-id",
        help="this worker's build in its deployment (env TEMPOCONF_BUILD_ID; default the package "
        "version and a hash of its code)",
    )
    worker.add_argument(
        "--sdk-metrics-address",
        metavar="IP:PORT",
        help="serve the Temporal SDK's metrics (temporal_*) for Prometheus at http://IP:PORT"
        "/metrics (env TEMPOCONF_SDK_METRICS_ADDRESS; default off)",
    )
    worker.set_defaults(handler="components.worker_command")

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

    db_parser = commands.add_parser("db", help="the store's schema: migrations")
    db_commands = db_parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_upgrade = db_commands.add_parser(
        "upgrade",
        parents=[connection],
        help="migrate the store to this version's schema (run once per upgrade, before the API "
        "and workers start)",
    )
    db_upgrade.set_defaults(handler="db.upgrade_command")
    db_downgrade = db_commands.add_parser(
        "downgrade",
        parents=[connection],
        help="take the store back to an earlier version's migration (run with this version, "
        "before the earlier one runs again; no rollout running)",
    )
    db_downgrade.add_argument(
        "revision",
        metavar="REVISION",
        help="the migration to go back to, as the earlier tempoconf names it (e.g. 0006_freezes)",
    )
    db_downgrade.set_defaults(handler="db.downgrade_command")

    schema_parser = commands.add_parser(
        "schema", help="the JSON Schema of a config, or of the rollout request"
    )
    schema_commands = schema_parser.add_subparsers(
        dest="schema_command", required=True, metavar="ACTION"
    )
    schema_set = schema_commands.add_parser(
        "set", parents=[connection], help="register (or replace) a JSON Schema"
    )
    schema_set.add_argument(
        "path", metavar="PATH", help="config path, e.g. myproject/server_config"
    )
    schema_set.add_argument(
        "file", metavar="FILE", help="JSON Schema file (draft 2020-12; - for stdin)"
    )
    schema_set.add_argument("--reason", default="", help="why, for the audit log")
    _config_namespace(schema_set)
    schema_set.set_defaults(handler="schema.set_command")
    schema_get = schema_commands.add_parser(
        "get", parents=[connection], help="print a config's JSON Schema"
    )
    schema_get.add_argument("path", metavar="PATH")
    _config_namespace(schema_get)
    schema_get.set_defaults(handler="schema.get_command")
    schema_request = schema_commands.add_parser(
        "request",
        help="print the rollout request's JSON Schema (for editors; docs/rollout-request.schema.json)",
    )
    schema_request.set_defaults(handler="schema.request_command")

    rollout_parser = commands.add_parser("rollout", help="start, watch and steer rollouts")
    rollout_commands = rollout_parser.add_subparsers(
        dest="rollout_command", required=True, metavar="ACTION"
    )
    start = rollout_commands.add_parser(
        "start", parents=[connection], help="start ConfigRollout from a JSON request"
    )
    start.add_argument("file", metavar="FILE", help="rollout request (JSON; - for stdin)")
    start.add_argument(
        "--wait",
        action="store_true",
        help="wait for the result (exit 1 unless promoted or bypassed)",
    )
    start.add_argument(
        "--id", dest="workflow_id", help="workflow id (default rollout:{namespace}/{path})"
    )
    start.set_defaults(handler="rollout.start_command")

    status = rollout_commands.add_parser(
        "status", parents=[connection], help="progress as the workflow reports it"
    )
    status.add_argument("path", metavar="PATH")
    status.add_argument("--json", action="store_true", help="print the raw status object")
    status.add_argument(
        "--watch",
        action="store_true",
        help="redraw until the rollout ends, then exit with its outcome (0 if promoted or bypassed)",
    )
    status.add_argument(
        "--interval", type=float, default=2.0, help="seconds between refreshes (default 2)"
    )
    status.add_argument(
        "--id",
        dest="workflow_id",
        help="workflow id (default: the lock holder, else the newest in the audit log, "
        "else rollout:{namespace}/{path})",
    )
    _config_namespace(status)
    status.set_defaults(handler="status.status_command")

    plan = rollout_commands.add_parser(
        "plan",
        parents=[connection],
        help="validate a request and show what it would do, publishing nothing",
    )
    plan.add_argument("file", metavar="FILE", help="rollout request (JSON; - for stdin)")
    plan.add_argument(
        "--clients",
        dest="clients_file",
        metavar="FILE",
        help='clients to count per stage: a JSON list of {"client", "channel", "labels"} '
        "(added to the clients that reported recently)",
    )
    plan.add_argument(
        "--since",
        default="1h",
        help="how recent a client's report must be to count it (default 1h)",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(handler="plan.plan_command")

    for command in OPERATOR_COMMANDS:
        name = command.name.value
        update = rollout_commands.add_parser(name, parents=[connection], help=command.help)
        update.add_argument("path", metavar="PATH")
        if command.takes_reason:
            update.add_argument(
                "--reason", default="", help="why, recorded in the rollout's history"
            )
        if command.takes_digest:
            update.add_argument(
                "--digest",
                default="",
                help="the digest of the plan you reviewed (`rollout plan` prints it); "
                "required by a stage with approvals",
            )
        update.add_argument(
            "--id",
            dest="workflow_id",
            help="workflow id (default: the lock holder, else rollout:{namespace}/{path})",
        )
        _config_namespace(update)
        update.set_defaults(handler="rollout.update_command", update_name=name)

    get_parser = commands.add_parser(
        "get", parents=[connection], help="the value the API serves to a client"
    )
    get_parser.add_argument("path", metavar="PATH")
    get_parser.add_argument("--client", help="client id (default: this host's name)")
    get_parser.add_argument("--channel", help="the client's channel, e.g. canary")
    get_parser.add_argument(
        "--label",
        action="append",
        default=[],
        type=_label,
        metavar="KEY=VALUE",
        help="a client label (repeatable)",
    )
    get_parser.add_argument(
        "--stable", action="store_true", help="the stable value, whatever the stages say"
    )
    _config_namespace(get_parser)
    get_parser.set_defaults(handler="get.get_command")

    versions = commands.add_parser(
        "versions", parents=[connection], help="the versions of a config, newest first"
    )
    versions.add_argument("path", metavar="PATH")
    versions.add_argument("--json", action="store_true", help="print the versions as JSON")
    _config_namespace(versions)
    versions.set_defaults(handler="schema.versions_command")

    history = commands.add_parser(
        "history", parents=[connection], help="the audit log of a config, oldest first"
    )
    history.add_argument("path", metavar="PATH")
    history.add_argument("--limit", type=int, default=50, help="the last N entries (default 50)")
    history.add_argument("--json", action="store_true", help="print the entries as JSON")
    _config_namespace(history)
    history.set_defaults(handler="schema.history_command")

    clients = commands.add_parser(
        "clients",
        parents=[connection],
        help="the clients seen on a config and the version each applied",
        description=(
            "The clients seen polling or reporting on a config recently, with the version each "
            "last reported applied (and its last apply error). --version V lists those on V; "
            "--not-applied, those served V that have not applied it (a stage's stragglers)."
        ),
    )
    clients.add_argument("path", metavar="PATH")
    clients.add_argument("--version", metavar="V", help="only the clients on this version")
    clients.add_argument(
        "--not-applied",
        action="store_true",
        help="with --version: only the clients that have not reported V applied",
    )
    clients.add_argument(
        "--since", default="1h", help="how recently a client must have been seen (default 1h)"
    )
    clients.add_argument("--json", action="store_true", help="print the clients as JSON")
    _config_namespace(clients)
    clients.set_defaults(handler="clients.clients_command")

    rollback = commands.add_parser(
        "rollback",
        parents=[connection],
        help="put a config back on a version it had: at once, or through stages with --staged",
    )
    rollback.add_argument("path", metavar="PATH")
    rollback.add_argument(
        "version", metavar="VERSION", help="a version id (`tempoconf versions PATH`)"
    )
    rollback.add_argument("--reason", default="", help="why, for the audit log")
    rollback.add_argument(
        "--staged",
        action="store_true",
        help="roll back through stages (canary channel → 10%% → 50%%) instead of at once",
    )
    rollback.add_argument(
        "--cooldown", help="hold of each stage of a --staged rollback (default 5m)"
    )
    rollback.add_argument(
        "--stages-from",
        metavar="FILE",
        help="a --staged rollback takes 'stages' (and 'strategy') of this request file",
    )
    rollback.add_argument(
        "--wait",
        action="store_true",
        help="wait for the result (an immediate rollback waits unless --no-wait)",
    )
    rollback.add_argument("--no-wait", action="store_true", help="start it and return")
    _config_namespace(rollback)
    rollback.set_defaults(handler="rollout.rollback_command")

    from tempoconf.cli import (
        agent,  # its flags only: the client SDK is imported when the command runs
        freeze,
    )

    freeze.add_parser(commands, connection)

    agent.add_parser(commands, _label)
    trace = commands.add_parser(
        "trace",
        help="the traces of rollouts in files of spans (OTEL_TRACES_EXPORTER=console), as trees",
        description=(
            "Reads the spans that processes traced with OTEL_TRACES_EXPORTER=console wrote to "
            "their standard output (other output in the files is skipped) and prints each "
            "rollout's trace as an indented tree: span, service where it changes, duration."
        ),
    )
    trace.add_argument("files", metavar="FILE", nargs="+", help="output holding spans")
    trace.add_argument(
        "--workflow-id", help="only the rollout of this workflow id (default: every rollout)"
    )
    trace.set_defaults(handler="trace.trace_command")
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
    try:
        _start_tracing(args.command)
        module, function = args.handler.rsplit(".", 1)
        # Imported on use: `tempoconf --help` should not pay for temporalio, sqlalchemy and uvicorn.
        code = getattr(importlib.import_module(f"tempoconf.cli.{module}"), function)(args)
    except CommandError as error:
        print(f"tempoconf: {error}", file=sys.stderr)
        code = error.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141
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
