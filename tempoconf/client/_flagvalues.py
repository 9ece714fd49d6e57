"""A flag's value: a config's value (or the field a pointer names) as the type a flag asks for,
and what an evaluation says of it (its metadata, its type named in an error)."""

from __future__ import annotations

from typing import Any, Literal

from tempoconf.client._flagkeys import MISSING, json_text
from tempoconf.client._model import ConfigValue

__all__ = ["FlagType", "flag_metadata", "json_type", "short", "typed"]

FlagType = Literal["boolean", "string", "integer", "float", "object"]


def typed(value: Any, flag_type: FlagType) -> Any:
    """`value` as a flag of `flag_type`, or MISSING. JSON has one number type: an integer is a
    float flag's value too (as a float), a fractional number is no integer, a boolean no number."""
    if flag_type == "boolean":
        return value if isinstance(value, bool) else MISSING
    if flag_type == "string":
        return value if isinstance(value, str) else MISSING
    if isinstance(value, bool):
        return MISSING
    if flag_type == "integer":
        return value if isinstance(value, int) else MISSING
    if flag_type == "float":
        return float(value) if isinstance(value, int | float) else MISSING
    return value if isinstance(value, dict | list) else MISSING


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "an array" if isinstance(value, list) else "an object"


def short(value: Any) -> str:
    text = json_text(value)
    return text if len(text) <= 40 else text[:37] + "..."


def flag_metadata(value: ConfigValue) -> dict[str, str]:
    metadata = {"stage": value.stage, "version": value.version}
    for name in ("commit", "author"):
        found = value.metadata.get(name)
        if isinstance(found, str) and found:
            metadata[name] = found
    return metadata
