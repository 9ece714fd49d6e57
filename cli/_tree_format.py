"""How `tempoconf diff` and `tempoconf apply` show a tree's diff: text for a terminal or a CI log,
Markdown for a pull-request comment, JSON for scripts. Configs whose value is stable are counted,
not listed: a tree of thousands of configs shows only what would change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tempoconf.tree.diff import Action, ConfigDiff, TreeDiff
from tempoconf.tree.layout import FileProblem

__all__ = ["diff_json", "diff_markdown", "diff_text", "problem_lines", "summary"]

_LABELS = {
    Action.START: "start",
    Action.BLOCKED: "blocked",
    Action.ROLLING_OUT: "rolling out",
    Action.NOT_IN_TREE: "not in tree",
}
_LISTED = (Action.START, Action.BLOCKED, Action.ROLLING_OUT, Action.NOT_IN_TREE)


def summary(diff: TreeDiff) -> str:
    """One line: what apply would do, then what it leaves."""
    units = diff.units()
    changesets = sum(1 for unit in units if len(unit) > 1)
    schemas = sum(1 for config in diff.configs if config.schema_change)
    todo = [f"{len(units)} rollout(s) to start"]
    if changesets:
        todo[0] += f" ({changesets} changeset(s))"
    todo.append(f"{schemas} schema(s) to set")
    todo.append(f"{len(diff.of(Action.BLOCKED))} blocked")
    left = [
        f"{len(diff.of(Action.UNCHANGED))} unchanged",
        f"{len(diff.of(Action.ROLLING_OUT))} rolling out",
        f"{len(diff.of(Action.NOT_IN_TREE))} served but not in the tree",
    ]
    return ", ".join(todo) + "; " + ", ".join(left)


def _what(config: ConfigDiff) -> str:
    if config.action is Action.START:
        was = f"stable {config.stable_version}" if config.stable_version else "no stable version"
        grouped = f", in changeset {config.changeset}" if config.changeset else ""
        return f"version {config.version} ({was}{grouped})"
    if config.action is Action.BLOCKED:
        return config.blocked
    if config.action is Action.ROLLING_OUT:
        lock = config.running
        return f"version {config.version} is rolling out" + (
            f" (workflow {lock.workflow_id})" if lock else ""
        )
    if config.action is Action.NOT_IN_TREE:
        stable = f"stable {config.stable_version}" if config.stable_version else "no stable version"
        return f"{stable}; apply leaves it as it is"
    return f"version {config.version} is stable"


def _schema_what(config: ConfigDiff) -> str:
    first = config.schema_diff and config.schema_diff[0].startswith("--- no schema")
    return "gets its first JSON Schema" if first else "its JSON Schema changes"


def diff_text(diff: TreeDiff, *, heading: str) -> list[str]:
    """Each config apply acts on (with its value's and schema's diff below it, when read), then
    the summary."""
    lines = [heading]
    for config in diff.configs:
        if config.action in _LISTED:
            lines.append(f"  {_LABELS[config.action]:<12} {config.name}  {_what(config)}")
            lines.extend(f"      {line}" for line in config.value_diff)
        if config.schema_change:
            lines.append(f"  {'schema':<12} {config.name}  {_schema_what(config)}")
            lines.extend(f"      {line}" for line in config.schema_diff)
    lines.append(summary(diff))
    return lines


def diff_markdown(diff: TreeDiff, *, heading: str, problems: Sequence[FileProblem]) -> str:
    """A pull-request comment: a table of what would change, each value's diff folded below."""
    out = [f"### {heading}", ""]
    if problems:
        out += [f"**{len(problems)} problem(s): apply would start nothing.**", ""]
        out += [f"- `{problem.file}` `{problem.pointer or '/'}`: {problem.message}"
                for problem in problems]  # fmt: skip
        return "\n".join(out) + "\n"
    out += [summary(diff) + ".", ""]
    rows = [config for config in diff.configs if config.action in _LISTED or config.schema_change]
    if rows:
        out += ["| | config | what |", "|---|---|---|"]
        for config in rows:
            if config.action in _LISTED:
                what = _what(config).replace("|", "\\|")
                out.append(f"| {_LABELS[config.action]} | `{config.name}` | {what} |")
            if config.schema_change:
                out.append(f"| schema | `{config.name}` | {_schema_what(config)} |")
        out.append("")
    for config in rows:
        for title, lines in (("value", config.value_diff), ("schema", config.schema_diff)):
            if lines:
                out += [f"<details><summary>{config.name}: {title}</summary>", "", "```diff"]
                out += [*lines, "```", "", "</details>", ""]
    return "\n".join(out) + "\n"


def diff_json(
    diff: TreeDiff | None, *, tree: str, commit: str, problems: Sequence[FileProblem]
) -> dict[str, Any]:
    """`--json`: every config (the unchanged ones too), and every problem."""
    configs = [] if diff is None else [_config_json(config) for config in diff.configs]
    return {
        "tree": tree,
        "commit": commit,
        "pending": bool(diff and diff.pending),
        "problems": [
            {"file": problem.file, "pointer": problem.pointer, "message": problem.message}
            for problem in problems
        ],
        "configs": configs,
    }


def _config_json(config: ConfigDiff) -> dict[str, Any]:
    lock = config.running
    return {
        "namespace": config.namespace,
        "path": config.path,
        "action": config.action.value,
        "file": config.file,
        "version": config.version,
        "stable_version": config.stable_version,
        "schema_change": config.schema_change,
        "changeset": config.changeset,
        "blocked": config.blocked or None,
        "running": None
        if lock is None
        else {"workflow_id": lock.workflow_id, "run_id": lock.run_id, "version": lock.version},
        "value_diff": config.value_diff,
        "schema_diff": config.schema_diff,
    }


def problem_lines(problems: Sequence[FileProblem], *, root: str) -> list[str]:
    lines = [f"{root} has {len(problems)} problem(s):"]
    lines += [f"  {problem}" for problem in problems]
    return lines
