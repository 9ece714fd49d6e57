"""Markdown for JSON Schemas: a type, its constraints and an object's fields as a table, shared by
the request's page (its JSON Schema) and the HTTP API's (the OpenAPI document's schemas)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["SchemaWriter", "cell", "code", "def_name", "table"]

Schema = dict[str, Any]


def code(text: object) -> str:
    """`text` as an inline code span (backticks inside it widen the fence)."""
    rendered = str(text)
    fence = "``" if "`" in rendered else "`"
    pad = " " if rendered.startswith("`") or rendered.endswith("`") else ""
    return f"{fence}{pad}{rendered}{pad}{fence}"


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def cell(text: str) -> str:
    """`text` fit for a table cell: one line, and `|` escaped outside code spans (a pipe inside a
    code span does not split a cell, and an escape there would be shown)."""
    flat = " ".join(text.split())
    parts: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(flat):
        parts.append(flat[last : match.start()].replace("|", "\\|"))
        parts.append(match.group(0))
        last = match.end()
    parts.append(flat[last:].replace("|", "\\|"))
    return "".join(parts)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) or " " for value in row) + " |" for row in rows]
    return lines


def def_name(ref: str) -> str:
    """The schema a `$ref` names: `#/$defs/StageSpec` and `#/components/schemas/StageSpec` alike."""
    return ref.rsplit("/", 1)[-1]


def _without_null(schema: Schema) -> Schema:
    """An optional field's schema (`anyOf: [X, {"type": "null"}]`) as X; others as they are."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [option for option in options if option != {"type": "null"}]
        if len(kept) == 1 and len(kept) < len(options):
            return {**{k: v for k, v in schema.items() if k != "anyOf"}, **kept[0]}
    return schema


def is_duration(schema: Schema) -> bool:
    """A duration as tempoconf.durations publishes it: seconds, a string with units, or
    protobuf JSON, one of the three."""
    forms = schema.get("oneOf")
    if not isinstance(forms, list) or len(forms) != 3:
        return False
    types = [form.get("type") for form in forms]
    return types == ["number", "string", "object"] and "seconds" in forms[2].get("properties", {})


def _number_bounds(schema: Schema) -> str:
    """`0 < x ≤ 1`, `x ≥ 1`, `x ≤ 60`: the range a number must be in."""
    low = high = ""
    if "exclusiveMinimum" in schema:
        low = f"{_num(schema['exclusiveMinimum'])} <"
    elif "minimum" in schema:
        low = f"{_num(schema['minimum'])} ≤"
    if "exclusiveMaximum" in schema:
        high = f"< {_num(schema['exclusiveMaximum'])}"
    elif "maximum" in schema:
        high = f"≤ {_num(schema['maximum'])}"
    if low and high:
        return f"{low} x {high}"
    if low:  # said the other way round: `x ≥ 1` reads better than `1 ≤ x`
        bound, sign = low.rsplit(" ", 1)
        return f"x {'>' if sign == '<' else '≥'} {bound}"
    return f"x {high}" if high else ""


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _count(schema: Schema, low: str, high: str, unit: str) -> str:
    if low in schema and high in schema:
        return f"{schema[low]}–{schema[high]} {unit}"
    if high in schema:
        return f"at most {schema[high]} {unit}"
    if low in schema and schema[low] == 1 and unit == "characters":
        return "not empty"
    if low in schema and schema[low] > 0:
        return f"at least {schema[low]} {unit}"
    return ""


def _seconds(value: Any) -> str:
    seconds = float(value)
    return f"{seconds:g}s"


class SchemaWriter:
    """Renders schemas whose `$ref`s name entries of `defs`; `link(name)` is the Markdown target
    of the section that documents the named schema."""

    def __init__(
        self,
        defs: dict[str, Schema],
        link: Callable[[str], str],
        label: Callable[[str], str] = lambda name: name,
    ) -> None:
        self.defs = defs
        self.link = link
        self.label = label

    def _ref(self, ref: str) -> str:
        name = def_name(ref)
        return f"[{self.label(name)}]({self.link(name)})"

    def type_of(self, schema: Schema) -> str:
        """What a value of `schema` is, in a few words, with links to the objects it names."""
        schema = _without_null(schema)
        if "$ref" in schema:
            return self._ref(schema["$ref"])
        if is_duration(schema):
            return "[duration](../contract.md#durations)"
        if "const" in schema:
            return code(json.dumps(schema["const"]))
        if "enum" in schema:
            return " | ".join(code(json.dumps(value)) for value in schema["enum"])
        options = schema.get("oneOf") or schema.get("anyOf")
        if isinstance(options, list) and options and "type" not in schema:
            kinds = [self.type_of(option) for option in options]
            discriminator = schema.get("discriminator", {}).get("propertyName")
            joined = ", ".join(kinds)
            return (
                f"one of {joined} (by {code(discriminator)})"
                if discriminator
                else (" or ".join(kinds))
            )
        kind = schema.get("type")
        if isinstance(kind, list):
            return " or ".join(str(part) for part in kind if part != "null")
        if kind == "array":
            items = schema.get("items")
            return "list of " + (self.type_of(items) if isinstance(items, dict) else "any JSON")
        if kind == "object":
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and "properties" not in schema:
                return "object of " + self.type_of(extra) + " values"
            return "object"
        if kind is None:
            return "any JSON"
        return f"{kind} ({schema['format']})" if "format" in schema else str(kind)

    def constraints(self, schema: Schema) -> str:
        """The bounds a value must keep: lengths, ranges, counts, a pattern."""
        schema = _without_null(schema)
        if is_duration(schema):
            return "at most 100 years"
        found = [
            _count(schema, "minLength", "maxLength", "characters"),
            _number_bounds(schema),
            _count(schema, "minItems", "maxItems", "items"),
            "unique items" if schema.get("uniqueItems") else "",
        ]
        if "pattern" in schema:
            found.append("matches " + code(schema["pattern"]))
        items = schema.get("items")
        if isinstance(items, dict) and "$ref" not in items:
            inner = self.constraints(items)
            if inner:
                found.append("each " + inner)
        return "; ".join(part for part in found if part)

    def default(self, schema: Schema, *, required: bool) -> str:
        if required:
            return "required"
        if "default" not in schema:
            return "none"
        value = schema["default"]
        if value is None:
            return "none"
        if is_duration(_without_null(schema)) and isinstance(value, int | float):
            return code(_seconds(value))
        return code(json.dumps(value, ensure_ascii=False))

    def fields(self, schema: Schema, *, answer: bool = False) -> list[str]:
        """An object's fields as a table: field, type, default, constraints, description. Of an
        answer (`answer`), the third column says whether the field is always there; a column
        empty in every row is left out."""
        required = set(schema.get("required", []))
        rows = []
        for name, field in schema.get("properties", {}).items():
            if answer:
                third = "always" if name in required else "optional"
            else:
                third = self.default(field, required=name in required)
            rows.append(
                [
                    code(name),
                    self.type_of(field),
                    third,
                    self.constraints(field),
                    field.get("description", ""),
                ]
            )
        header = ["field", "type", "present" if answer else "default", "constraints", "description"]
        kept = [0, *(i for i in range(1, len(header)) if any(row[i] for row in rows))]
        return table([header[i] for i in kept], [[row[i] for i in kept] for row in rows])

    def rules(self, schema: Schema) -> list[str]:
        """What an object requires beyond each field: which fields go together, or exclude each
        other; said in sentences."""
        said: list[str] = []
        for keyword, quantity in (("anyOf", "At least one of"), ("oneOf", "Exactly one of")):
            options = schema.get(keyword)
            if not isinstance(options, list):
                continue
            if all(_names_one_field(option) for option in options):
                names = ", ".join(code(option["required"][0]) for option in options)
                said.append(f"{quantity} {names} (not null).")
            else:
                forms = "; ".join(_form(option) for option in options)
                said.append(f"{quantity} these forms: {forms}.")
        for name, needs in schema.get("dependentRequired", {}).items():
            said.append(f"{code(name)} only with {', '.join(code(need) for need in needs)}.")
        if schema.get("additionalProperties") is False:
            said.append("Unknown fields are refused.")
        return said

    def referenced(self, schema: Any) -> Iterator[str]:
        """The names of the schemas `schema` refers to, in order of appearance."""
        if isinstance(schema, dict):
            if "$ref" in schema:
                yield def_name(schema["$ref"])
            for key, value in schema.items():
                if key != "discriminator":
                    yield from self.referenced(value)
        elif isinstance(schema, list):
            for value in schema:
                yield from self.referenced(value)


def _names_one_field(option: Any) -> bool:
    return isinstance(option, dict) and len(option.get("required", [])) == 1 and "not" not in option


def _form(option: Schema) -> str:
    given = " and ".join(code(name) for name in option.get("required", []))
    excluded = [
        code(name)
        for alternative in option.get("not", {}).get("anyOf", [])
        for name in alternative.get("required", [])
    ]
    return given + (f", without {', '.join(excluded)}" if excluded else "")
