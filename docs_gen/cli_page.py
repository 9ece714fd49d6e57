"""reference/cli.md: every `tempoconf` command and subcommand, from the argparse parser the
command itself runs (tempoconf.cli.main.build_parser): usage, arguments, defaults and help."""

from __future__ import annotations

import argparse

from docs_gen.markdown import code, table

__all__ = ["cli_page"]

_USAGE_WIDTH = 100
_INTRO = """\
# The `tempoconf` command

Every command and subcommand of `tempoconf`, with its usage, its arguments and their help, as
`tempoconf COMMAND --help` prints them. This page is written from the command's own argparse
parser when the site is built. Flags win over the environment, which wins over the defaults:
every setting and its variable is in [Settings](settings.md).
"""


def _usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage line at a fixed width (argparse otherwise wraps at the terminal's)."""
    formatter = argparse.HelpFormatter(parser.prog, width=_USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _anchor(parser: argparse.ArgumentParser) -> str:
    words = parser.prog.split()[1:]
    return "-".join(words) if words else "tempoconf"


def _subcommands(
    parser: argparse.ArgumentParser,
) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _argument_name(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        takes_value = action.nargs != 0
        metavar = action.metavar or (action.dest.upper() if takes_value else None)
        return code(f"{names} {metavar}" if takes_value and metavar else names)
    return code(action.metavar or action.dest)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, "", [], argparse.SUPPRESS):
        return ""
    return code(action.default)


def _help(action: argparse.Action) -> str:
    text = (action.help or "").replace("%%", "%")
    if "%(" in text:
        text = text % {"default": action.default, "prog": ""}
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += " One of " + ", ".join(code(choice) for choice in action.choices) + "."
    if action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction):
        text += " Repeatable." if isinstance(action, argparse._AppendAction) else ""
    return text


def _shown(group: argparse._ArgumentGroup) -> list[argparse.Action]:
    return [
        action
        for action in group._group_actions
        if action.help != argparse.SUPPRESS
        and not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
    ]


def _key(group: argparse._ArgumentGroup) -> tuple[object, ...]:
    """What makes two groups the same: their title and every argument's names and help."""
    return (group.title, *((tuple(a.option_strings), a.help) for a in _shown(group)))


def _title(group: argparse._ArgumentGroup) -> str:
    title = group.title or "arguments"
    return title[0].upper() + title[1:]


def _group_table(group: argparse._ArgumentGroup) -> list[str]:
    rows = [[_argument_name(a), _default(a), _help(a)] for a in _shown(group)]
    return [*table(["argument", "default", "help"], rows), ""]


class _Writer:
    """The page, section by section; a group of flags many commands share (the connection flags)
    is written once and linked from each command that takes it."""

    def __init__(self, shared: dict[tuple[object, ...], str]) -> None:
        self.shared = shared
        self.lines: list[str] = []

    def arguments(self, parser: argparse.ArgumentParser) -> None:
        for group in parser._action_groups:
            if not _shown(group):
                continue
            anchor = self.shared.get(_key(group))
            if anchor:
                first = str(group.title).split()[0]
                self.lines += [f"*{_title(group)}*: see [{first} flags](#{anchor}).", ""]
            else:
                self.lines += [f"*{_title(group)}*", "", *_group_table(group)]

    def section(self, parser: argparse.ArgumentParser, summary: str, depth: int) -> None:
        heading = "#" * min(depth, 4)
        self.lines += [f"{heading} `{parser.prog}` {{#{_anchor(parser)}}}", ""]
        said = [text for text in (summary, parser.description) if text]
        if said:
            self.lines += [" ".join(" ".join(text.split()) for text in dict.fromkeys(said)), ""]
        self.lines += ["```", _usage(parser), "```", ""]
        self.arguments(parser)
        for _, help_text, sub in _subcommands(parser):
            self.section(sub, help_text, depth + 1)


def _every_parser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for _, _, sub in _subcommands(parser):
        found += _every_parser(sub)
    return found


_SHARED_AFTER = 3
"""A group of flags given to this many commands or more is written once."""


def cli_page(parser: argparse.ArgumentParser) -> str:
    """The page's Markdown, from `parser` (tempoconf.cli.main.build_parser())."""
    groups: dict[tuple[object, ...], list[argparse._ArgumentGroup]] = {}
    for each in _every_parser(parser):
        for group in each._action_groups:
            if _shown(group) and group.title not in ("options", "positional arguments"):
                groups.setdefault(_key(group), []).append(group)
    shared = {
        key: "flags-" + "-".join(str(found[0].title).split()[0:1]).lower()
        for key, found in groups.items()
        if len(found) >= _SHARED_AFTER
    }
    writer = _Writer(shared)
    commands = _subcommands(parser)
    rows = [[f"[{code(name)}](#{_anchor(sub)})", help_text] for name, help_text, sub in commands]
    writer.lines += [_INTRO, "## Commands", "", *table(["command", "what it does"], rows), ""]
    writer.lines += ["```", _usage(parser), "```", ""]
    if parser.epilog:  # the exit codes, as `tempoconf --help` ends
        writer.lines += ["```", parser.epilog, "```", ""]
    writer.arguments(parser)
    for key, anchor in shared.items():
        group = groups[key][0]
        first = str(group.title).split()[0]
        writer.lines += [f"## {first.capitalize()} flags {{#{anchor}}}", ""]
        takers = [
            f"[{code(each.prog.removeprefix('tempoconf '))}](#{_anchor(each)})"
            for each in _every_parser(parser)
            if any(_key(g) == key for g in each._action_groups)
        ]
        writer.lines += [f"{_title(group)}. Taken by {', '.join(takers)}.", ""]
        writer.lines += _group_table(group)
    for _, help_text, sub in commands:
        writer.section(sub, help_text, 2)
    return "\n".join(writer.lines)
