"""Weak ETags for resolved configs, and `If-None-Match` matching (RFC 9110, 13.1.2)."""

from __future__ import annotations

import hashlib
import re

__all__ = ["config_etag", "if_none_match", "revalidate"]

_ENTITY_TAG = re.compile(r'\*|(?:W/)?"[^"]*"')


def config_etag(namespace: str, path: str, version: str, stage: str) -> str:
    """`W/"<version>.<hash>"`, from namespace, path, version and stage only.

    Leaving out `expires_at` is the point: a lease renewal changes nothing the client applies,
    so it must not make every client download the value again.
    """
    digest = hashlib.sha256("\0".join((namespace, path, version, stage)).encode()).hexdigest()
    return f'W/"{version}.{digest[:12]}"'


def if_none_match(header: str | None, etag: str) -> bool:
    """True when `header` (an If-None-Match value) matches `etag` by weak comparison.

    A list matches when any member does; `*` matches any current representation.
    """
    if not header:
        return False
    wanted = _opaque(etag)
    return any(tag == "*" or _opaque(tag) == wanted for tag in _ENTITY_TAG.findall(header))


def revalidate(if_none: bytes | None, etag: str, etag_bytes: bytes) -> tuple[str | None, bool]:
    """A poll's If-None-Match (as sent, or None) against the answer's `etag`: the header as
    text, for a long-poll to compare later answers with, and whether the answer is modified for
    it. The usual case, the exact ETag sent back, is one bytes comparison."""
    if if_none == etag_bytes:
        return etag, False
    header = if_none.decode("latin-1") if if_none is not None else None
    return header, not if_none_match(header, etag)


def _opaque(tag: str) -> str:
    return tag[2:] if tag.startswith("W/") else tag
