"""`tempoconf clients PATH [--version V [--not-applied]]`: the clients seen on a config, with the
version each last applied; `--not-applied` lists the stragglers of V (served it, not applied)."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from datetime import timedelta
from typing import Any

from tempoconf.cli._backend import operator_backend
from tempoconf.cli._common import die, settings_from_args
from tempoconf.cli._format import table, utc_text
from tempoconf.cli.schema import check_config_name
from tempoconf.durations import parse_duration
from tempoconf.gates.applied_gate import ClientApplied
from tempoconf.operations.clients import ClientsQuery

__all__ = ["clients_command"]

_VERSION = re.compile(r"[0-9a-f]{16}")


def clients_command(args: argparse.Namespace) -> int:
    """Exit 0 when it listed at least one client, 1 when none matched."""
    check_config_name(args.namespace, args.path)
    if args.version is not None and not _VERSION.fullmatch(args.version):
        die(f"--version {args.version!r}: expected a 16-hex version id", exit_code=2)
    if args.not_applied and args.version is None:
        die(
            "--not-applied needs --version V (the version the clients should have applied)",
            exit_code=2,
        )
    try:
        since = parse_duration(args.since)
    except ValueError as error:
        die(f"--since: {error}", exit_code=2)
    if since <= timedelta(0):
        die("--since must be greater than zero", exit_code=2)
    rows = asyncio.run(_rows(args, since))
    if args.json:
        print(json.dumps([_as_json(row) for row in rows], indent=2))
        return 0 if rows else 1
    if not rows:
        which = f" on {args.version}" if args.version else ""
        which += " that have not applied it" if args.not_applied else ""
        print(f"no client of {args.namespace}/{args.path}{which} seen in the last {args.since}")
        return 1
    print(
        "\n".join(
            table(
                ["CLIENT", "CHANNEL", "LAST SEEN (UTC)", "SERVED", "APPLIED", "APPLY ERROR"],
                [
                    [
                        row.client,
                        row.channel or "-",
                        utc_text(row.last_seen),
                        row.last_version or "-",
                        row.applied_version or "-",
                        f"{row.apply_error_version}: {row.apply_error}" if row.apply_error else "-",
                    ]
                    for row in rows
                ],
            )
        )
    )
    return 0


async def _rows(args: argparse.Namespace, since: timedelta) -> list[ClientApplied]:
    async with operator_backend(settings_from_args(args)) as backend:
        query = ClientsQuery(args.namespace, args.path, since, args.version, args.not_applied)
        return await backend.client_rows(query)


def _as_json(row: ClientApplied) -> dict[str, Any]:
    return {
        "client": row.client,
        "channel": row.channel,
        "labels": row.labels,
        "last_seen": row.last_seen.isoformat(),
        "last_version": row.last_version,
        "applied_version": row.applied_version,
        "applied_at": row.applied_at.isoformat() if row.applied_at else None,
        "apply_error": row.apply_error,
        "apply_error_version": row.apply_error_version,
    }
