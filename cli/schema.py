"""`tempoconf schema set|get` and `tempoconf versions`: what the store keeps about a config."""

from __future__ import annotations

import argparse
import json
import sys

from cli._common import actor, die, open_store, print_problems, read_json_file, settings_from_args
from tempoconf.paths import namespace_problem, path_problem
from tempoconf.schema_validation import schema_problems, value_problems

__all__ = ["check_config_name", "get_command", "set_command", "versions_command"]


def check_config_name(namespace: str, path: str) -> None:
    """Exit 2 with the reason when a namespace or path is not valid."""
    problem = namespace_problem(namespace) or path_problem(path)
    if problem:
        die(problem, exit_code=2)


def set_command(args: argparse.Namespace) -> int:
    check_config_name(args.namespace, args.path)
    schema = read_json_file(args.file, what="schema file")
    problems = schema_problems(schema)
    if problems:
        print_problems(problems, what=f"schema {args.file} refused")
        print("nothing was registered.", file=sys.stderr)
        return 2
    settings = settings_from_args(args)
    name = f"{args.namespace}/{args.path}"
    with open_store(settings) as store:
        previous = store.get_schema(args.namespace, args.path)
        if previous == schema:
            print(f"schema of {name} unchanged (the same schema is registered already).")
            return 0
        store.set_schema(args.namespace, args.path, schema, actor=actor(), reason=args.reason)
        print(
            f"{'replaced the' if previous is not None else 'registered a'} schema for {name} (from {args.file})."
        )
        stable = store.get_stable(args.namespace, args.path)
    if stable is not None:
        stale = value_problems(schema, stable.value, pointer_prefix="")
        if stale:
            print(f"warning: the stable version {stable.version} does not validate against it:")
            for problem in stale:
                print(f"  {problem.pointer or '/'}: {problem.message}")
            print("  a rollout of a valid value will replace it.")
    return 0


def get_command(args: argparse.Namespace) -> int:
    check_config_name(args.namespace, args.path)
    with open_store(settings_from_args(args)) as store:
        schema = store.get_schema(args.namespace, args.path)
    if schema is None:
        print(f"no schema registered for {args.namespace}/{args.path}")
        return 1
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def versions_command(args: argparse.Namespace) -> int:
    check_config_name(args.namespace, args.path)
    with open_store(settings_from_args(args)) as store:
        versions = store.list_versions(args.namespace, args.path)
    if not versions:
        print(f"no versions of {args.namespace}/{args.path}")
        return 1
    print(
        f"{'VERSION':<18} {'CREATED (UTC)':<20} {'STABLE':<7} {'AUTHOR':<20} {'COMMIT':<10} MESSAGE"
    )
    for info in versions:
        created = info.created_at.strftime("%Y-%m-%d %H:%M:%S")
        stable = "yes" if info.is_stable else ("was" if info.stable_since else "")
        print(
            f"{info.version:<18} {created:<20} {stable:<7} {info.author[:20]:<20} {info.commit[:10]:<10} {info.message}"
        )
    return 0
