"""Canonical JSON and content-addressed version ids."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_id", "canonical_json", "version_id"]


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text; NaN and infinities are refused (not JSON)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def version_id(value: Any) -> str:
    """First 16 hex chars of the SHA-256 of the canonical JSON: the same value, the same id."""
    return canonical_id(canonical_json(value))


def canonical_id(text: str) -> str:
    """The version id of a value given as its canonical JSON text (as the store keeps values and
    schemas): `version_id(value) == canonical_id(canonical_json(value))`, without parsing it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
