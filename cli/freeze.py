"""`tempoconf freeze start|end|list`: freezes of namespaces (tempoconf.gates.freezes). While a namespace
is frozen no rollout in it widens or promotes: running ones wait at their stage and say why, new
ones start and wait; a halt or a revert always goes through, and a request with
`override_freeze` passes (each pass in the config's audit log)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime

from tempoconf.cli._common import die, settings_from_args
from tempoconf.cli._format import table, utc_text
from tempoconf.gates.freezes import Freeze, describe_freeze, parse_until
from tempoconf.paths import namespace_problem

__all__ = ["add_parser", "end_command", "list_command", "start_command"]


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
) -> None:
    """`freeze start|end|list` with the connection flags every operator command takes."""
    freeze = commands.add_parser(
        "freeze", help="freeze a namespace: no rollout in it widens or promotes until it ends"
    )
    actions = freeze.add_subparsers(dest="freeze_command", required=True, metavar="ACTION")
    start = actions.add_parser("start", parents=[connection], help="freeze a namespace")
    start.add_argument("--namespace", required=True, help="the config namespace to freeze")
    start.add_argument("--reason", required=True, help="why (every waiting rollout shows it)")
    start.add_argument(
        "--until",
        metavar="TIME",
        help="when it ends by itself: ISO 8601 with an offset (2026-12-24T18:00:00+01:00) or a "
        "duration from now (2h, 90m); default: when `freeze end` ends it",
    )
    start.set_defaults(handler="freeze.start_command")
    end = actions.add_parser("end", parents=[connection], help="end a namespace's freeze now")
    end.add_argument("--namespace", required=True, help="the frozen namespace")
    end.add_argument("--reason", default="", help="why, kept with the freeze")
    end.set_defaults(handler="freeze.end_command")
    listing = actions.add_parser(
        "list", parents=[connection], help="active and recent freezes, newest first"
    )
    listing.add_argument("--namespace", help="only this namespace's (default: every namespace)")
    listing.add_argument("--limit", type=int, default=20, help="at most N (default 20)")
    listing.add_argument("--json", action="store_true", help="print the freezes as JSON")
    listing.set_defaults(handler="freeze.list_command")


def _check_namespace(namespace: str) -> None:
    problem = namespace_problem(namespace)
    if problem:
        die(f"--namespace: {problem}", exit_code=2)


def start_command(args: argparse.Namespace) -> int:
    _check_namespace(args.namespace)
    if not args.reason.strip():
        die("--reason: give a reason (every rollout the freeze holds shows it)", exit_code=2)
    until = None
    if args.until is not None:
        try:
            until = parse_until(args.until, now=datetime.now(UTC))
        except ValueError as error:
            die(f"--until: {error}", exit_code=2)
    return asyncio.run(_start(args, until))


async def _start(args: argparse.Namespace, until: datetime | None) -> int:
    # Imported on use: `tempoconf --help` builds this parser without the store or Temporal.
    from tempoconf.cli._backend import CommandRefused, operator_backend

    async with operator_backend(settings_from_args(args)) as backend:
        try:
            freeze = await backend.start_freeze(args.namespace, reason=args.reason, until=until)
        except CommandRefused as error:
            die(f"not frozen again: {error}")
    print(f"frozen: {describe_freeze(freeze)}")
    print("no rollout in it widens or promotes until then; halt and revert still work.")
    return 0


def end_command(args: argparse.Namespace) -> int:
    _check_namespace(args.namespace)
    return asyncio.run(_end(args))


async def _end(args: argparse.Namespace) -> int:
    # Imported on use: `tempoconf --help` builds this parser without the store or Temporal.
    from tempoconf.cli._backend import CommandRefused, operator_backend

    async with operator_backend(settings_from_args(args)) as backend:
        try:
            ended = await backend.end_freeze(args.namespace, reason=args.reason)
        except CommandRefused as error:
            die(str(error))
    freeze = ended.freeze
    print(f"ended the freeze of namespace {freeze.namespace} ({freeze.reason}, by {freeze.by}).")
    if ended.rollouts_told is None:
        print(
            f"could not tell the waiting rollouts ({ended.not_told}): they go on within 30 s.",
            file=sys.stderr,
        )
    else:
        told = ended.rollouts_told
        print(
            f"told {told} waiting rollout{'' if told == 1 else 's'} to look again now; "
            "any other goes on within 30 s."
        )
    return 0


def _status(freeze: Freeze, now: datetime) -> str:
    if freeze.active(now):
        return "active"
    if freeze.ended_at is not None:
        return "ended"
    return "expired"  # its `until` passed


def list_command(args: argparse.Namespace) -> int:
    if args.namespace is not None:
        _check_namespace(args.namespace)
    if args.limit < 1:
        die("--limit must be at least 1", exit_code=2)
    freezes = asyncio.run(_list(args))
    now = datetime.now(UTC)
    if args.json:
        print(
            json.dumps(
                [{**freeze.to_json(), "status": _status(freeze, now)} for freeze in freezes],
                indent=2,
            )
        )
        return 0
    if not freezes:
        print("no freezes" + (f" of namespace {args.namespace}" if args.namespace else ""))
        return 0
    rows = [
        [
            freeze.namespace,
            _status(freeze, now),
            utc_text(freeze.started_at),
            freeze.by,
            utc_text(freeze.until) if freeze.until else "-",
            (
                f"{utc_text(freeze.ended_at)} by {freeze.ended_by}"
                + (f": {freeze.end_reason}" if freeze.end_reason else "")
                if freeze.ended_at
                else "-"
            ),
            freeze.reason,
        ]
        for freeze in freezes
    ]
    headers = ["NAMESPACE", "STATUS", "SINCE (UTC)", "BY", "UNTIL (UTC)", "ENDED (UTC)", "REASON"]
    for line in table(headers, rows):
        print(line)
    return 0


async def _list(args: argparse.Namespace) -> list[Freeze]:
    from tempoconf.cli._backend import operator_backend

    async with operator_backend(settings_from_args(args)) as backend:
        return await backend.list_freezes(args.namespace, limit=args.limit)
