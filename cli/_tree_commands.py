"""`tempoconf diff DIR` and `tempoconf apply DIR` as the parser declares them (cli/tree.py runs
them): their flags only, so `tempoconf --help` loads nothing of configs as code."""

from __future__ import annotations

from tempoconf.cli._flags import Command, flag, json_flag, switch

__all__ = ["TREE_COMMANDS"]

_FLAGS = (
    flag(
        "dir",
        metavar="DIR",
        help="the tree: DIR/<namespace>/<path>.json, or a protoconf repository",
    ),
    flag("--author", help="who changed it (default: git HEAD's author email, else user@host)"),
    flag("--commit", help="the commit it comes from (default: git HEAD, `-dirty` when edited)"),
    flag("--message", help="why (default: git HEAD's subject)"),
)

TREE_COMMANDS = (
    Command(
        "diff",
        "what `apply DIR` would do: exit 0 when nothing, 2 when something, 1 on a problem",
        "tree.diff_command",
        [
            *_FLAGS,
            flag(
                "--format",
                choices=("text", "markdown", "json"),
                default="text",
                help="text (default), markdown (a pull-request comment) or json",
            ),
            json_flag("the diff (as --format json)"),
        ],
        description=(
            "Compares a tree of config files with what is served: for each config, whether "
            "apply would start its rollout (with its value's diff against stable), set its "
            "schema, or refuse it (another version's rollout running, a freeze), and which "
            "served configs the tree lacks. Exit 0: nothing to do; 2: something to do; 1: a "
            "problem (every file's problems are listed)."
        ),
    ),
    Command(
        "apply",
        "check every file of DIR, set changed schemas, start one rollout per changed config "
        "(or changeset)",
        "tree.apply_command",
        [
            *_FLAGS,
            switch("--wait", "wait for every rollout started (exit 0 only when all promoted)"),
            switch(
                "--halt-on-interrupt",
                "with --wait: SIGINT or SIGTERM halts the rollouts this apply started, waits "
                "until they are back on stable, then exits 128+signal",
            ),
        ],
        description=(
            "Starts nothing if any file is wrong. A config whose value is stable, or is being "
            "rolled out, is left alone, so a second apply of the same tree starts nothing. A "
            "config another version's rollout holds is refused (exit 1), never queued."
        ),
    ),
)
