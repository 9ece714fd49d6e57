"""PromQL query templates: `{path}`, `{namespace}`, `{version}`, `{stage}` placeholders.

PromQL itself is full of braces (`errors{job="api"}`), so only `{name}` with a bare identifier
inside is a placeholder; everything else is left as written.
"""

from __future__ import annotations

import re

__all__ = ["PROMQL_PLACEHOLDERS", "render_promql", "template_problems", "unknown_placeholders"]

PROMQL_PLACEHOLDERS = frozenset({"path", "namespace", "version", "stage"})
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def unknown_placeholders(template: str) -> list[str]:
    """Placeholder names in `template` that are not one of PROMQL_PLACEHOLDERS."""
    return sorted({name for name in _PLACEHOLDER.findall(template) if name not in PROMQL_PLACEHOLDERS})


def render_promql(template: str, values: dict[str, str]) -> str:
    """Substitute the placeholders, escaped for use inside a double-quoted PromQL string."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)
        return values[name].replace("\\", "\\\\").replace('"', '\\"')

    return _PLACEHOLDER.sub(substitute, template)


def template_problems(template: str) -> list[str]:
    """What is wrong with a query template: unknown placeholders, unbalanced braces or brackets."""
    problems = []
    unknown = unknown_placeholders(template)
    if unknown:
        problems.append(f"query uses unknown placeholder(s) {unknown}; known: {sorted(PROMQL_PLACEHOLDERS)}")
    depth = {"{": 0, "(": 0, "[": 0}
    closing = {"}": "{", ")": "(", "]": "["}
    quote: str | None = None
    for char in template:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'`":
            quote = char
        elif char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            if depth[closing[char]] < 0:
                problems.append(f"query has an unmatched {char!r}")
                return problems
    problems += [f"query has an unclosed {opening!r}" for opening, count in depth.items() if count > 0]
    return problems
