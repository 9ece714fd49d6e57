"""A one-line summary of what a rollout changes, for people: `max_connections 1000 → 2000`.

Shown as the headline of the rollout's current details and as its summary in the Web UI's
workflow list, so it names the change in a few words rather than a hash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tempoconf.resolution import VersionRecord

if TYPE_CHECKING:
    from tempoconf.rollout.request import RolloutRequest

__all__ = [
    "ConfigChange",
    "MAX_CHANGE_LENGTH",
    "MAX_SUMMARY_BYTES",
    "change_summary",
    "rollout_change",
    "value_changes",
    "workflow_details",
    "workflow_summary",
]

MAX_CHANGE_LENGTH = 120
"""The summary's length limit in characters (the Web UI's list column shows about that much)."""
MAX_SHOWN_VALUE = 30
"""A changed value longer than this as JSON is cut with `…`: the key names the change, not the value."""
MAX_SUMMARY_BYTES = 400
"""Temporal's limit for a workflow's static summary, in UTF-8 bytes."""
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_MISSING = object()


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= MAX_SHOWN_VALUE else text[: MAX_SHOWN_VALUE - 1] + "…"


def _key_path(parent: str, key: str) -> str:
    # Dotted for ordinary keys; a key that a dot would make ambiguous is quoted.
    if _PLAIN_KEY.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{json.dumps(key, ensure_ascii=False)}]"


def _walk(before: Any, after: Any, where: str) -> Iterator[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(before.keys() | after.keys()):
            yield from _walk(
                before.get(key, _MISSING), after.get(key, _MISSING), _key_path(where, key)
            )
        return
    if before is _MISSING:
        yield f"{where} added: {_show(after)}"
    elif after is _MISSING:
        yield f"{where} removed"
    elif before != after or type(before) is not type(after):
        # `type` too: 1 and 1.0 (or 1 and true) compare equal in Python but are different JSON
        label = f"{where} " if where else ""
        yield f"{label}{_show(before)} → {_show(after)}"


def value_changes(before: Any, after: Any) -> list[str]:
    """Each changed leaf of two JSON values, in key order: `a.b 1 → 2`, `c added: 3`, `d removed`.

    Objects are compared key by key (nested ones too); lists and scalars as a whole."""
    return list(_walk(before, after, ""))


def change_summary(
    before: Any,
    after: Any,
    *,
    has_before: bool = True,
    rollback_to: str | None = None,
    limit: int = MAX_CHANGE_LENGTH,
) -> str:
    """What going from `before` (stable; `has_before=False` when there is none) to `after` changes,
    in at most `limit` characters. A rollback to a stored version says so first."""
    if not has_before:
        text = "first value"
    else:
        changes = value_changes(before, after)
        text = _fit(changes, limit) if changes else "same value as stable"
    if rollback_to is not None:
        text = f"rollback to {rollback_to}" + ("" if not has_before else f": {text}")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fit(changes: list[str], limit: int) -> str:
    """As many changes as fit in `limit`, then `and N more`."""
    for shown in range(len(changes), 0, -1):
        rest = len(changes) - shown
        text = ", ".join(changes[:shown]) + (f" and {rest} more" if rest else "")
        if len(text) <= limit:
            return text
    return changes[0] + (f" and {len(changes) - 1} more" if len(changes) > 1 else "")


def rollout_change(
    value: Any, stable: VersionRecord | None, *, rollback_to: str | None = None
) -> str:
    """The summary of a rollout of `value` (a rollback's when `rollback_to` names a version) over
    the config's stable version (None when it has none)."""
    return change_summary(
        None if stable is None else stable.value,
        value,
        has_before=stable is not None,
        rollback_to=rollback_to,
    )


ConfigChange = tuple[str, str, str]
"""One config of a changeset for the summaries: (`namespace/path`, version, change)."""


def _cut(text: str) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= MAX_SUMMARY_BYTES:
        return text
    return encoded[: MAX_SUMMARY_BYTES - 3].decode("utf-8", errors="ignore") + "…"


def workflow_summary(
    namespace: str, path: str, version: str, change: str, *, changes: Sequence[ConfigChange] = ()
) -> str:
    """The workflow's static summary (the Web UI's Summary column): the config and its change,
    `default/myproject/server_config: max_connections 1000 → 2000 (3f2a9c1b00000000)`, cut to
    Temporal's byte limit. A changeset's (`changes`) names every config, its change and version."""
    if changes:
        return _cut(
            f"changeset of {len(changes)} configs: "
            + "; ".join(f"{name}: {text} ({its})" for name, its, text in changes)
        )
    return _cut(
        f"{namespace}/{path}: {change} ({version})" if change else f"{namespace}/{path} → {version}"
    )


def workflow_details(
    request: RolloutRequest, version: str, change: str, *, changes: Sequence[ConfigChange] = ()
) -> str:
    """The workflow's static details (the Web UI's User Metadata tab, shown even with no worker):
    the config, version, change (a changeset's `changes`: every config's), stages and the
    request's author, commit and message."""
    stages = (
        " → ".join(stage.display_name for stage in request.all_stages) or "none: promote directly"
    )
    if changes:
        lines = [
            f"**changeset of {len(changes)} configs**",
            "",  # the Web UI renders the lines below as a list only after a blank line
            *(f"- {name} → version `{its}`: {text}" for name, its, text in changes),
        ]
    else:
        lines = [
            f"**{request.namespace}/{request.path}** → version `{version}`",
            "",
            f"- change: {change}",
        ]
    lines.append(f"- stages: {stages}")
    for label, text in (
        ("author", request.author),
        ("commit", request.commit),
        ("message", request.message),
    ):
        if text:
            lines.append(f"- {label}: {text}")
    return "\n".join(lines)[:20000]
