"""Flags that several commands take alike: a config's namespace, a client's identity."""

from __future__ import annotations

import argparse

__all__ = ["client_identity_flags", "config_namespace_flag"]


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
