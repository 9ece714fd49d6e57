"""Flags that several commands take alike (a config's namespace, a client's identity), and the
table shape the commands are declared in (`Command`, `add_commands`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = [
    "Command",
    "Flag",
    "Subcommands",
    "add_command",
    "add_commands",
    "client_identity_flags",
    "config_namespace_flag",
    "flag",
    "json_flag",
    "seconds_flag",
    "switch",
]

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


@dataclass(frozen=True)
class Flag:
    """One `add_argument` call: its names and options."""

    names: tuple[str, ...]
    options: dict[str, Any]


def flag(*names: str, **options: Any) -> Flag:
    return Flag(names, options)


def switch(name: str, help: str) -> Flag:
    """A flag that is there or not (`store_true`)."""
    return flag(name, action="store_true", help=help)


def json_flag(what: str) -> Flag:
    return switch("--json", f"print {what} as JSON")


def seconds_flag(parser: argparse.ArgumentParser, name: str, default: float, help: str) -> None:
    """A duration in seconds, with a default (`--long-poll`, `--idle-after`, ...)."""
    parser.add_argument(name, type=float, default=default, metavar="SECONDS", help=help)


@dataclass(frozen=True)
class Command:
    """A subcommand: its flags in the order `--help` lists them (a `Flag`, or a function that
    adds several), and the handler `main` runs (`module.function` of tempoconf.cli)."""

    name: str
    help: str
    handler: str
    flags: Sequence[Flag | Callable[[argparse.ArgumentParser], None]] = ()
    connected: bool = True
    """It takes the connection flags."""
    description: str | None = None


def add_command(
    commands: Subcommands, command: Command, connection: argparse.ArgumentParser
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        command.name,
        parents=[connection] if command.connected else [],
        help=command.help,
        description=command.description,
    )
    for item in command.flags:
        if isinstance(item, Flag):
            parser.add_argument(*item.names, **item.options)
        else:
            item(parser)
    parser.set_defaults(handler=command.handler)
    return parser


def add_commands(
    commands: Subcommands, table: Sequence[Command], connection: argparse.ArgumentParser
) -> None:
    for command in table:
        add_command(commands, command, connection)


def _label(text: str) -> str:
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"a label is key=value, not {text!r}")
    return text


def config_namespace_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", default="default", help="config namespace (default default)")


def client_identity_flags(parser: argparse.ArgumentParser) -> None:
    """Who a client is, as the API resolves it: `--client`, `--channel`, `--label` (repeatable)."""
    parser.add_argument("--client", help="client id (default: this host's name)")
    parser.add_argument("--channel", help="the client's channel, e.g. canary")
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        type=_label,
        metavar="KEY=VALUE",
        help="a client label (repeatable)",
    )
