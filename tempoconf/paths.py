"""Config paths and namespaces."""

from __future__ import annotations

import re

__all__ = ["path_problem", "namespace_problem", "DEFAULT_NAMESPACE"]

DEFAULT_NAMESPACE = "default"
# No ':' ever: the admin API names a command on a config after one (`.../rollouts/{path}:halt`).
_SEGMENT = re.compile(r"[a-z0-9._-]+")
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


def path_problem(path: object) -> str | None:
    """Why `path` is not a valid config path, or None when it is."""
    if not isinstance(path, str):
        return f"a config path must be a string, not {type(path).__name__}"
    if not 1 <= len(path) <= 255:
        return f"a config path must be 1-255 characters long (got {len(path)})"
    for segment in path.split("/"):
        if segment == "":
            return f"config path {path!r} has an empty segment"
        if segment in (".", ".."):
            return f"config path {path!r} has a {segment!r} segment"
        if not _SEGMENT.fullmatch(segment):  # fullmatch: "$" would let a trailing newline in
            return f"config path segment {segment!r} may use only a-z, 0-9, '.', '_' and '-'"
    return None


def namespace_problem(namespace: object) -> str | None:
    """Why `namespace` is not a valid namespace, or None when it is."""
    if not isinstance(namespace, str):
        return f"a namespace must be a string, not {type(namespace).__name__}"
    if not _NAMESPACE.fullmatch(namespace):
        return (
            f"namespace {namespace!r} must be 1-63 characters of a-z, 0-9, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return None
