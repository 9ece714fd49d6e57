"""Clients a plan can count: those that reported recently, and those listed in a file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tempoconf.cli._common import die, read_json_file

if TYPE_CHECKING:
    pass

__all__ = ["KnownClient", "clients_from_file"]


@dataclass(frozen=True)
class KnownClient:
    client: str
    channel: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def clients_from_file(path: str) -> list[KnownClient]:
    """A JSON list of `{"client", "channel", "labels"}` (channel and labels optional)."""
    raw = read_json_file(path, what="clients file")
    if not isinstance(raw, list):
        die(
            f'clients file {path}: a JSON list of {{"client", "channel", "labels"}} objects',
            exit_code=2,
        )
    clients = []
    for index, item in enumerate(raw):
        labels = item.get("labels") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("client"), str)
            or not item["client"]
            or not isinstance(item.get("channel"), str | None)
            or not isinstance(labels, dict | None)
            or not all(isinstance(v, str) for v in (labels or {}).values())
        ):
            die(
                f'clients file {path}, item {index}: expected {{"client": "id", "channel": "name" '
                f'or null, "labels": {{"key": "value"}}}}, got {item!r}',
                exit_code=2,
            )
        clients.append(KnownClient(item["client"], item.get("channel"), dict(labels or {})))
    return clients
