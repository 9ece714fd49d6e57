"""`tempoconf schema set|get`, `versions` and `history`: what the store keeps about a config;
`tempoconf schema request`: the rollout request's own JSON Schema."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from tempoconf.cli._backend import operator_backend
from tempoconf.cli._common import die, print_problems, read_json_file, settings_from_args
from tempoconf.cli._format import table, utc_text
from tempoconf.contract_schema import rollout_request_schema
from tempoconf.paths import namespace_problem, path_problem
from tempoconf.store.records import AuditEntry, VersionInfo

__all__ = [
    "check_config_name",
    "get_command",
    "history_command",
    "request_command",
    "set_command",
    "versions_command",
]


def check_config_name(namespace: str, path: str) -> None:
    """Exit 2 with the reason when a namespace or path is not valid."""
    problem = namespace_problem(namespace) or path_problem(path)
    if problem:
        die(problem, exit_code=2)


def set_command(args: argparse.Namespace) -> int:
    # Here, not at the top: jsonschema is a tenth of a second that `versions` and `history` skip.
    from tempoconf.schema_validation import schema_problems

    check_config_name(args.namespace, args.path)
    schema = read_json_file(args.file, what="schema file")
    problems = schema_problems(schema)
    if problems:
        print_problems(problems, what=f"schema {args.file} refused")
        print("nothing was registered.", file=sys.stderr)
        return 2
    return asyncio.run(_set(args, schema))


async def _set(args: argparse.Namespace, schema: object) -> int:
    name = f"{args.namespace}/{args.path}"
    # The store must exist (`tempoconf db upgrade` or `tempoconf dev` creates it): from the wrong
    # directory a new, empty one would hide the store `tempoconf dev` uses.
    async with operator_backend(settings_from_args(args)) as backend:
        previous = await backend.get_schema(args.namespace, args.path)
        if previous == schema:
            print(f"schema of {name} unchanged (the same schema is registered already).")
            return 0
        await backend.set_schema(args.namespace, args.path, schema, reason=args.reason)
        print(
            f"{'replaced the' if previous is not None else 'registered a'} schema for {name} (from {args.file})."
        )
        stable = await backend.get_stable(args.namespace, args.path)
    if stable is not None:
        from tempoconf.schema_validation import value_problems

        stale = value_problems(schema, stable.value, pointer_prefix="")
        if stale:
            print(f"warning: the stable version {stable.version} does not validate against it:")
            for problem in stale:
                print(f"  {problem.pointer or '/'}: {problem.message}")
            print("  a rollout of a valid value will replace it.")
    return 0


def get_command(args: argparse.Namespace) -> int:
    check_config_name(args.namespace, args.path)
    schema = asyncio.run(_get(args))
    if schema is None:
        print(f"no schema registered for {args.namespace}/{args.path}")
        return 1
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


async def _get(args: argparse.Namespace) -> object:
    async with operator_backend(settings_from_args(args)) as backend:
        return await backend.get_schema(args.namespace, args.path)


def request_command(args: argparse.Namespace) -> int:
    """The rollout request's JSON Schema (draft 2020-12), generated from the request model: the
    same as docs/rollout-request.schema.json."""
    print(json.dumps(rollout_request_schema(), indent=2))
    return 0


def versions_command(args: argparse.Namespace) -> int:
    """The versions of a config, newest first, with when each became stable (`yes`: stable now)."""
    check_config_name(args.namespace, args.path)
    versions = asyncio.run(_versions(args))
    if args.json:
        return _print_json(
            [
                {
                    "version": info.version,
                    "author": info.author,
                    "commit": info.commit,
                    "message": info.message,
                    "created_at": info.created_at.isoformat(),
                    "stable_since": [moment.isoformat() for moment in info.stable_since],
                    "is_stable": info.is_stable,
                }
                for info in versions
            ]
        )
    if not versions:
        print(f"no versions of {args.namespace}/{args.path}")
        return 1
    print(
        f"{'VERSION':<18} {'CREATED (UTC)':<20} {'STABLE':<7} {'STABLE SINCE (UTC)':<25} "
        f"{'AUTHOR':<24} {'COMMIT':<10} MESSAGE"
    )
    for info in versions:
        stable = "yes" if info.is_stable else ("was" if info.stable_since else "")
        since = utc_text(info.stable_since[-1]) if info.stable_since else "-"
        if len(info.stable_since) > 1:
            since += f" ({len(info.stable_since)}x)"
        print(
            f"{info.version:<18} {utc_text(info.created_at):<20} {stable:<7} {since:<25} "
            f"{info.author[:24] or '-':<24} {info.commit[:10] or '-':<10} {info.message}".rstrip()
        )
    return 0


async def _versions(args: argparse.Namespace) -> list[VersionInfo]:
    async with operator_backend(settings_from_args(args)) as backend:
        return await backend.list_versions(args.namespace, args.path)


async def _history(args: argparse.Namespace) -> list[AuditEntry]:
    async with operator_backend(settings_from_args(args)) as backend:
        return await backend.history(args.namespace, args.path, limit=args.limit)


def history_command(args: argparse.Namespace) -> int:
    """The audit log of a config: who did what, to which version, and why."""
    check_config_name(args.namespace, args.path)
    if args.limit < 1:
        die("--limit must be at least 1", exit_code=2)
    entries = asyncio.run(_history(args))
    if args.json:
        return _print_json(
            [
                {
                    "id": entry.id,
                    "at": entry.at.isoformat(),
                    "actor": entry.actor,
                    "action": entry.action,
                    "version": entry.version,
                    "reason": entry.reason,
                    "workflow_id": entry.workflow_id,
                    "details": entry.details,
                }
                for entry in entries
            ]
        )
    if not entries:
        print(f"no history of {args.namespace}/{args.path}")
        return 1
    rows = [
        [
            utc_text(entry.at),
            entry.actor,
            entry.action,
            entry.version or "-",
            (f"[{entry.details['stage']}] " if entry.details.get("stage") else "")
            + entry.reason
            # a rollout's own commit (the version keeps the one of the rollout that first stored it)
            + (f" (commit {entry.details['commit']})" if entry.details.get("commit") else ""),
        ]
        for entry in entries
    ]
    for line in table(["WHEN (UTC)", "ACTOR", "ACTION", "VERSION", "REASON"], rows):
        print(line)
    return 0


def _print_json(items: list[dict[str, Any]]) -> int:
    """`--json`: the list, indented; exit 1 when it is empty, as the table's "no ..." does."""
    print(json.dumps(items, indent=2))
    return 0 if items else 1
