"""Clients a plan can count: those that reported recently, and those listed in a file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cli._common import die, read_json_file

__all__ = ["KnownClient", "clients_from_file", "recent_clients"]


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


def recent_clients(
    store: Any, namespace: str, path: str, *, since: datetime
) -> tuple[list[KnownClient], bool]:
    """Distinct clients seen on this config since `since`, and whether their channel and labels
    are known.

    `Store.recent_clients` (clients seen polling, with their identity, and clients that only
    reported) when the store has it; otherwise the reports table, read-only: reports carry no
    channel or labels.
    """
    method = getattr(store, "recent_clients", None)
    if callable(method):
        found = method(namespace, path, since=since)
        clients = [
            KnownClient(
                str(_field(item, "client")),
                _field(item, "channel"),
                dict(_field(item, "labels") or {}),
            )
            for item in found
        ]
        return clients, True
    from sqlalchemy import create_engine, select
    from sqlalchemy.exc import SQLAlchemyError

    from tempoconf.store.tables import ClientReport

    report = ClientReport.__table__  # type: ignore[attr-defined]
    engine = create_engine(store.url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(report.c.client)
                .where(
                    report.c.namespace == namespace,
                    report.c.path == path,
                    report.c.received_at >= since,
                )
                .distinct()
            ).all()
    except SQLAlchemyError:
        return [], False  # an older store without the reports table: only --clients counts
    finally:
        engine.dispose()
    return [KnownClient(str(row.client)) for row in rows], False


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)
