"""`tempoconf edge --upstream URL`: an edge relay, serving the API's client routes from a nearer hop.

An edge that sends a token upstream and asks its own clients for none would hand whatever that
token may read to anyone who reaches it: it refuses to start so, unless `--public` says that is
the intent (and then logs it). Any upstream token counts: the upstream asked for a credential, and
the edge need not reach it (nor know its policy) to know that."""

from __future__ import annotations

import argparse
import logging
import os
from typing import NoReturn

from tempoconf.cli._common import check_access_policy, die, run_until_signal, settings_from_args
from tempoconf.cli._flags import seconds_flag

__all__ = ["add_parser", "edge_command"]

UPSTREAM_URL_ENV = "TEMPOCONF_UPSTREAM_URL"
UPSTREAM_TOKEN_ENV = "TEMPOCONF_UPSTREAM_TOKEN"
PUBLIC_ENV = "TEMPOCONF_EDGE_PUBLIC"

logger = logging.getLogger(__name__)


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
        "--public",
        action="store_true",
        default=None,
        help="serve what the upstream token may read to anyone, without a token of the edge's "
        f"own (env {PUBLIC_ENV}=true): without it, an edge with an upstream token and neither "
        "TEMPOCONF_CLIENT_TOKEN nor TEMPOCONF_ACCESS_FILE refuses to start",
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
    public = args.public or _public_from_env()
    guarded = settings.client_token is not None or settings.access_file is not None
    if public and guarded:
        _refuse(
            "--public serves anyone, and TEMPOCONF_CLIENT_TOKEN or TEMPOCONF_ACCESS_FILE asks "
            "the edge's clients for a token: drop one of the two"
        )
    if token is not None and not guarded and not public:
        _refuse(
            "it sends a token upstream (--upstream-token or TEMPOCONF_UPSTREAM_TOKEN) and asks "
            "its own clients for none, so anyone reaching it would read what that token may "
            "read. Give the edge a token of its own: TEMPOCONF_CLIENT_TOKEN (its clients send "
            "it) or TEMPOCONF_ACCESS_FILE (an access policy); or, to serve the public on "
            f"purpose, --public (or {PUBLIC_ENV}=true)"
        )
    if public:
        logger.warning(
            "tempoconf edge: --public: serving %s to anyone, without a token",
            "what the upstream token may read" if token is not None else "its upstream's configs",
        )

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


def _public_from_env() -> bool:
    raw = os.environ.get(PUBLIC_ENV, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    die(f"tempoconf edge: {PUBLIC_ENV}={raw!r}: expected true or false", exit_code=2)


def _refuse(why: str) -> NoReturn:
    die(f"tempoconf edge: refusing to start: {why}", exit_code=2)
