"""Flag keys of the OpenFeature provider, as pure functions: `path` (the whole value of a config)
or `path#/a/b`, a JSON Pointer (RFC 6901, its JSON string form: `~1` for `/`, `~0` for `~`, no
percent-encoding) into that value. A config path has no `#`, so the first `#` splits the key."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["MISSING", "FlagKey", "FlagKeyError", "json_text", "lookup", "parse_flag_key"]

MISSING: Final = object()
"""What `lookup` returns when the pointer names nothing in the value."""

_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")
_BAD_ESCAPE = re.compile(r"~(?![01])")


class FlagKeyError(ValueError):
    """A flag key that is not `path` or `path#/json/pointer`; the message says which part."""


@dataclass(frozen=True)
class FlagKey:
    text: str
    """The key as the caller wrote it (what `flags_changed` lists)."""
    path: str
    pointer: str
    """The JSON Pointer, "" for the whole value."""
    tokens: tuple[str, ...]
    """The pointer's reference tokens, unescaped."""


def parse_flag_key(text: str) -> FlagKey:
    """Split `path#/a/b` into the config path and the pointer's tokens; raises FlagKeyError."""
    path, hash_sign, pointer = text.partition("#")
    if not path:
        raise FlagKeyError(f"flag key {text!r} names no config path (expected path or path#/a/b)")
    if hash_sign and pointer and not pointer.startswith("/"):
        raise FlagKeyError(
            f"flag key {text!r}: {pointer!r} is not a JSON Pointer (RFC 6901): it starts with "
            f"'/', as in {path}#/{pointer.replace('.', '/')}"
        )
    if _BAD_ESCAPE.search(pointer):
        raise FlagKeyError(
            f"flag key {text!r}: '~' in a JSON Pointer is written ~0, and '/' inside a name ~1"
        )
    tokens = tuple(token.replace("~1", "/").replace("~0", "~") for token in pointer.split("/")[1:])
    return FlagKey(text=text, path=path, pointer=pointer, tokens=tokens)


def lookup(value: Any, tokens: Sequence[str]) -> Any:
    """The part of `value` the tokens name, or MISSING (RFC 6901, section 4)."""
    for token in tokens:
        if isinstance(value, Mapping):
            if token not in value:
                return MISSING
            value = value[token]
        elif isinstance(value, list):
            # "-" (past the end) and leading zeros name no element (RFC 6901, section 4)
            if not _ARRAY_INDEX.fullmatch(token) or int(token) >= len(value):
                return MISSING
            value = value[int(token)]
        else:
            return MISSING
    return value


def json_text(value: Any) -> str:
    """A comparable text of a JSON value: unlike `==`, it tells `true` from `1` and `1` from
    `1.0`, which are different values to a flag of another type."""
    if value is MISSING:
        return ""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
