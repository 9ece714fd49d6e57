"""`tempoconf edge --upstream URL`: an edge relay, serving the API's client routes from a nearer hop."""

from __future__ import annotations

import argparse
import os

from tempoconf.cli._common import check_access_policy, die, run_until_signal, settings_from_args
from tempoconf.cli._flags import seconds_flag

__all__ = ["add_parser", "edge_command"]

UPSTREAM_URL_ENV = "TEMPOCONF_UPSTREAM_URL"
UPSTREAM_TOKEN_ENV = "TEMPOCONF_UPSTREAM_TOKEN"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    edge = commands.add_parser(
        "edge",
        help="run an edge relay: serves /v1/configs, /v1/bundles and reports from its upstream "
        "(an origin API or another edge), kept fresh by one change feed long-poll upstream",
    )
    edge.add_argument(
        "--upstream",
        help=f"base URL of the upstream API or edge (env {UPSTREAM_URL_ENV})",
    )
    edge.add_argument(
        "--upstream-token",
        help="the client token the edge sends upstream (env TEMPOCONF_UPSTREAM_TOKEN; its own "
        "clients use the edge's TEMPOCONF_CLIENT_TOKEN)",
    )
    edge.add_argument(
        "--host", help="address the edge listens on (default 127.0.0.1; 0.0.0.0 in a container)"
    )
    edge.add_argument("--port", dest="api_port", type=int, help="port to listen on (default 8080)")
    seconds_flag(
        edge,
        "--idle-after",
        600.0,
        "stop serving a config nobody asked for during this long (default 600)",
    )
    seconds_flag(
        edge,
        "--report-interval",
        1.0,
        "forward the reports received upstream in a batch this often (default 1)",
    )
    edge.set_defaults(handler="edge.edge_command")


def edge_command(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    upstream = args.upstream or os.environ.get(UPSTREAM_URL_ENV)
    if not upstream:
        die(f"tempoconf edge: --upstream URL is required (or {UPSTREAM_URL_ENV})", exit_code=2)
    if not upstream.startswith(("http://", "https://")):
        die(f"tempoconf edge: --upstream must be an http(s) URL, not {upstream!r}", exit_code=2)
    token = args.upstream_token or os.environ.get(UPSTREAM_TOKEN_ENV) or None
    if args.idle_after <= 0 or args.report_interval <= 0:
        die("tempoconf edge: --idle-after and --report-interval must be positive", exit_code=2)
    check_access_policy(settings, "edge")

    async def run() -> int:
        from tempoconf.api.edge_app import create_edge_app
        from tempoconf.api.server import serve_app, settle_heap

        app = create_edge_app(
            upstream,
            settings,
            upstream_token=token,
            idle_after=args.idle_after,
            report_interval=args.report_interval,
        )

        def started(url: str) -> None:
            settle_heap()
            print(f"edge: listening on {url}, relaying {upstream}; Ctrl-C stops it", flush=True)

        # --port 0 picks a free port: the line printed once serving names the one bound.
        await serve_app(
            app, settings, host=settings.host, port=settings.api_port, on_started=started
        )
        return 0

    return run_until_signal(run, fast_loop=True, hangup=True)
