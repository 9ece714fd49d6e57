"""Check templates: a PromQL query or an http check's URL with `{path}`, `{namespace}`,
`{version}`, `{stage}`, `{since}` and `{elapsed}` placeholders.

PromQL itself is full of braces (`errors{job="api"}`), so only `{name}` with a bare identifier
inside is a placeholder; everything else is left as written. `{since}` is the stage's publish time
in Unix seconds and `{elapsed}` the time since then as a PromQL duration (`93s`), so a query can
look at the stage's own span only: `increase(errors_total[{elapsed}])`, `... @ {since}`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime
from urllib.parse import quote as url_quote

__all__ = [
    "PROMQL_PLACEHOLDERS",
    "placeholder_values",
    "render_promql",
    "render_url",
    "template_problems",
    "unknown_placeholders",
]

PROMQL_PLACEHOLDERS = frozenset({"path", "namespace", "version", "stage", "since", "elapsed"})
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholder_values(
    *,
    namespace: str,
    path: str,
    version: str,
    stage: str,
    published_at: datetime | None,
    now: datetime,
) -> dict[str, str]:
    """The values of the placeholders for one check of a stage; without a publish time, `{since}`
    and `{elapsed}` have none (and stay as written)."""
    values = {"path": path, "namespace": namespace, "version": version, "stage": stage}
    if published_at is not None:
        since = published_at.timestamp()
        values["since"] = f"{since:.3f}".rstrip("0").rstrip(".")
        # Whole seconds, at least 1: PromQL refuses a zero range, and rounding down never reaches
        # back before the publish.
        values["elapsed"] = f"{max(1, math.floor((now - published_at).total_seconds()))}s"
    return values


def unknown_placeholders(template: str) -> list[str]:
    """Placeholder names in `template` that are not one of PROMQL_PLACEHOLDERS."""
    return sorted(
        {name for name in _PLACEHOLDER.findall(template) if name not in PROMQL_PLACEHOLDERS}
    )


def _render(template: str, values: dict[str, str], escape: Callable[[str], str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)
        return escape(values[name])

    return _PLACEHOLDER.sub(substitute, template)


def render_promql(template: str, values: dict[str, str]) -> str:
    """Substitute the placeholders, escaped for use inside a double-quoted PromQL string."""
    return _render(template, values, lambda value: value.replace("\\", "\\\\").replace('"', '\\"'))


def render_url(template: str, values: dict[str, str]) -> str:
    """Substitute the placeholders, URL-encoded (`/` kept, so `{path}` reads as a path too);
    braces that are no placeholder stay as written."""
    return _render(template, values, lambda value: url_quote(value, safe="/"))


def template_problems(template: str, field: str = "query") -> list[str]:
    """What is wrong with a query template: unknown placeholders, unbalanced braces or brackets
    (each problem starts with `field`, the name the template was given under)."""
    problems = []
    unknown = unknown_placeholders(template)
    if unknown:
        problems.append(
            f"{field} uses unknown placeholder(s) {unknown}; known: {sorted(PROMQL_PLACEHOLDERS)}"
        )
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
                problems.append(f"{field} has an unmatched {char!r}")
                return problems
    problems += [
        f"{field} has an unclosed {opening!r}" for opening, count in depth.items() if count > 0
    ]
    return problems
