"""The last good value on disk: one JSON file per namespace, path and client identity.

Written atomically (temporary file in the same directory, fsync, `os.replace`, fsync of the
directory), so a crash or power loss leaves the old file or the new one, never a torn one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tempoconf.client._model import ConfigResponseError, ConfigValue

__all__ = ["DiskCache", "cache_file_name", "write_file_atomically"]

FORMAT = 1
_UNSAFE = re.compile(r"[^a-z0-9._-]+")

logger = logging.getLogger("tempoconf.client")


def write_file_atomically(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` with `data`: readers see the old content or the new, never a mix.

    The temporary file lives next to `path` (os.replace is atomic within one file system only).
    """
    target = Path(path)
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fchmod(tmp.fileno(), mode)  # mkstemp makes 0600; readers are often other users
            os.fsync(tmp.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    # The rename is durable only once the directory entry is on disk.
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def identity_key(
    namespace: str, path: str, client_id: str, channel: str | None, labels: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "path": path,
        "client": client_id,
        "channel": channel,
        "labels": dict(sorted(labels.items())),
    }


def cache_file_name(identity: Mapping[str, Any]) -> str:
    """`<namespace>_<path>.<digest>.json`: readable, and distinct per identity (another client id,
    channel or label set resolves differently, so it must not share a file)."""
    digest = hashlib.sha256(
        json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()[:16]
    slug = _UNSAFE.sub("_", f"{identity['namespace']}_{identity['path']}".lower())[:150]
    return f"{slug}.{digest}.json"


class DiskCache:
    """The cache file of one config and identity in `directory`."""

    def __init__(self, directory: str | os.PathLike[str], identity: Mapping[str, Any]) -> None:
        self.identity = dict(identity)
        self.file = Path(directory) / cache_file_name(self.identity)

    def load(self) -> ConfigValue | None:
        """The cached value (source "cache"), or None when there is none or it cannot be read.

        An unreadable file is logged and ignored: the client then waits for the API, as it would
        on a first start.
        """
        try:
            raw = self.file.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("cannot read the config cache %s: %s", self.file, exc)
            return None
        try:
            document = json.loads(raw)
            if not isinstance(document, dict) or document.get("format") != FORMAT:
                raise ConfigResponseError(f"not a format {FORMAT} cache file")
            if document.get("identity") != self.identity:
                raise ConfigResponseError("written for another client identity")
            confirmed_at = document.get("confirmed_at")
            if not isinstance(confirmed_at, int | float):
                raise ConfigResponseError("field 'confirmed_at' is not a number")
            etag = document.get("etag")
            return ConfigValue.from_body(
                document.get("config"),
                source="cache",
                confirmed_at=float(confirmed_at),
                etag=etag if isinstance(etag, str) else None,
            )
        except (ValueError, ConfigResponseError) as exc:
            logger.warning("ignoring the config cache %s: %s", self.file, exc)
            return None

    def save(self, value: ConfigValue) -> bool:
        """Write `value` as the last good one; False (logged) when the disk refuses.

        A failed write does not stop the client: the value is in use in memory all the same.
        """
        document = {
            "format": FORMAT,
            "identity": self.identity,
            "etag": value.etag,
            "confirmed_at": value.confirmed_at,
            "config": value.body(),
        }
        data = json.dumps(document, sort_keys=True, indent=1).encode() + b"\n"
        try:
            write_file_atomically(self.file, data, mode=0o600)
        except OSError as exc:
            logger.warning("cannot write the config cache %s: %s", self.file, exc)
            return False
        return True
