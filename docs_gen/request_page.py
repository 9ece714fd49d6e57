"""reference/request.md: every field of the rollout request, from its published JSON Schema
(docs/rollout-request.schema.json, generated from tempoconf.rollout.request and checked against it by
tests/domain/test_contract_schema.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from docs_gen.markdown import SchemaWriter, code

__all__ = ["SCHEMA_FILE", "request_page"]

SCHEMA_FILE = "rollout-request.schema.json"
"""The schema, relative to the docs folder (published there: editors map request files to it)."""

# Section titles of the request's objects; an object not named here is titled by its model name.
_TITLES = {
    "RolloutRequest": "The request",
    "ChangeSpec": "A change (changeset)",
    "StrategySpec": "Strategy",
    "LinearStrategy": "Linear strategy",
    "ExponentialStrategy": "Exponential strategy",
    "StageSpec": "A stage",
    "ApprovalsSpec": "Approvals",
    "ReportsCheckSpec": "Health check `reports`",
    "PrometheusCheckSpec": "Health check `prometheus`",
    "HttpCheckSpec": "Health check `http`",
    "WindowSpec": "A change window",
    "FreezeOverride": "Freeze override",
}
# How a field's type names them ("list of stage").
_LABELS = {
    "ChangeSpec": "change",
    "StrategySpec": "strategy",
    "LinearStrategy": "linear strategy",
    "ExponentialStrategy": "exponential strategy",
    "StageSpec": "stage",
    "ApprovalsSpec": "approvals",
    "ReportsCheckSpec": "`reports` check",
    "PrometheusCheckSpec": "`prometheus` check",
    "HttpCheckSpec": "`http` check",
    "WindowSpec": "window",
    "FreezeOverride": "freeze override",
}
ROOT_NAME = "RolloutRequest"

_INTRO = """\
# The rollout request

The input of the `ConfigRollout` workflow, the file of `tempoconf rollout start` and `rollout
plan`, and the body of `POST /v1/admin/rollouts` are the same JSON object. This page lists every
field of it, nested objects included. It is written when the site is built from the request's
JSON Schema, [rollout-request.schema.json](../rollout-request.schema.json), which is generated
from the request model (`tempoconf schema request` prints the same). What the fields do together
(stages and cohorts, holds, checks, gates, changesets, windows and freezes) is in
[the contract](../contract.md#the-rollout-request).

The request model checks a few things a schema cannot state: a percentile with three decimals,
an expiration of zero, a repeated stage name, a value that fails the config's own schema, a
`version` the config lacks. A refused request lists every problem with its JSON pointer.

An editor that knows the schema checks a request file as it is written. A `"$schema"` key in the
file would be an unknown field, so map the schema to the files in the editor's settings instead,
e.g. in VS Code's `settings.json`:
`"json.schemas": [{"fileMatch": ["rollout*.json"], "url": "./docs/rollout-request.schema.json"}]`.
"""


def _anchor(name: str) -> str:
    return name.lower()


def _usage(schema: dict[str, Any], writer: SchemaWriter) -> dict[str, list[str]]:
    """For each object of the schema, where in a request it appears (`stages[].health[]`)."""
    found: dict[str, list[str]] = {}

    def visit(node: dict[str, Any], where: str, seen: tuple[str, ...]) -> None:
        for field, field_schema in node.get("properties", {}).items():
            path = f"{where}.{field}" if where else field
            for option, suffix in _shapes(field_schema):
                for name in writer.referenced(option):
                    found.setdefault(name, [])
                    if path + suffix not in found[name]:
                        found[name].append(path + suffix)
                    if name not in seen:
                        visit(writer.defs[name], path + suffix, (*seen, name))

    visit(schema, "", (ROOT_NAME,))
    return found


def _shapes(schema: dict[str, Any]) -> list[tuple[Any, str]]:
    """A field's schema as (part, suffix): a list's items are written `[]`."""
    options = schema.get("anyOf", [schema])
    shapes: list[tuple[Any, str]] = []
    for option in options:
        if option.get("type") == "array":
            shapes.append((option.get("items", {}), "[]"))
        elif "$ref" in option:
            shapes.append(({"$ref": option["$ref"]}, ""))
    return shapes


def _order(schema: dict[str, Any], writer: SchemaWriter) -> list[str]:
    """The objects in the order a reader meets them: depth first, in field order; then any the
    request does not reach (none today)."""
    ordered: list[str] = []

    def visit(node: dict[str, Any]) -> None:
        for field_schema in node.get("properties", {}).values():
            for name in writer.referenced(field_schema):
                if name not in ordered:
                    ordered.append(name)
                    visit(writer.defs[name])

    visit(schema)
    return ordered + sorted(set(writer.defs) - set(ordered))


def request_page(docs_dir: Path) -> str:
    """The page's Markdown, from the schema file in `docs_dir`."""
    schema = json.loads((docs_dir / SCHEMA_FILE).read_text(encoding="utf-8"))
    defs: dict[str, Any] = schema.get("$defs", {})
    writer = SchemaWriter(
        defs, lambda name: f"#{_anchor(name)}", lambda name: _LABELS.get(name, name)
    )
    usage = _usage(schema, writer)

    lines = [_INTRO]
    sections = [(ROOT_NAME, schema), *((name, defs[name]) for name in _order(schema, writer))]
    for name, node in sections:
        lines.append(f"## {_TITLES.get(name, name)} {{#{_anchor(name)}}}")
        lines.append("")
        said = []
        if name != ROOT_NAME and node.get("description"):
            said.append(" ".join(node["description"].split()))
        if usage.get(name):
            said.append("In " + ", ".join(code(path) for path in usage[name]) + ".")
        said += writer.rules(node)
        if said:
            lines += [" ".join(said), ""]
        lines += writer.fields(node)
        lines.append("")
    return "\n".join(lines)
