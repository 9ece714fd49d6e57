"""What is served, read at once (both backends): `served_configs` (every known config with its
stable version, schema digest and lock) and `active_freezes`, for configs as code."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, select

from tempoconf.canonical import version_id
from tempoconf.store._base import SCHEMA
from tempoconf.store.records import LockRecord, ServedConfig
from tempoconf.store.store import Store
from tests.store.helpers import put

SCHEMA_VALUE = {
    "type": "object",
    "properties": {"n": {"type": "integer", "maximum": 1.5e20}},
    "title": "Größe",
    "required": ["n"],
}
"""Non-ASCII text and a float in exponent form: its canonical JSON is still its stored text."""


def make_stable(store: Store, namespace: str, path: str, value: object) -> str:
    version = put(store, value, namespace=namespace, path=path)
    store.set_stable(
        namespace, path, version, actor="test", reason="", event_key=f"{namespace}/{path}:stable"
    )
    return version


@contextmanager
def counted_statements(store: Store) -> Iterator[list[str]]:
    """Every SQL statement the store runs inside the block."""
    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    engine = store._engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", count)


def test_each_kind_of_known_config_with_what_it_serves(store: Store) -> None:
    only_version = put(store, {"n": 1}, namespace="default", path="app/only-version")
    stable = make_stable(store, "default", "app/stable", {"n": 2})
    put(store, {"n": 3}, namespace="default", path="app/stable")  # a newer version, not stable
    store.set_schema("default", "app/stable", SCHEMA_VALUE, actor="test")
    store.set_schema("default", "app/schema-only", SCHEMA_VALUE, actor="test")
    locked = put(store, {"n": 4}, namespace="payments", path="app/locked")
    [lock] = store.acquire_locks(
        {("payments", "app/locked"): locked}, workflow_id="rollout:locked", run_id="run-1"
    )

    served = store.served_configs()

    digest = version_id(SCHEMA_VALUE)
    assert served == [
        ServedConfig("default", "app/only-version", None, None, None),
        ServedConfig("default", "app/schema-only", None, digest, None),
        ServedConfig("default", "app/stable", stable, digest, None),
        ServedConfig("payments", "app/locked", None, None, lock),
    ]
    assert only_version != stable
    held = served[-1].lock
    assert isinstance(held, LockRecord)
    assert (held.workflow_id, held.run_id, held.version) == ("rollout:locked", "run-1", locked)
    assert held.acquired_at.tzinfo is not None


def test_the_schema_digest_is_the_version_id_of_the_stored_schema(store: Store) -> None:
    store.set_schema("default", "app/x", SCHEMA_VALUE, actor="test")
    with store._read() as conn:
        document = conn.execute(select(SCHEMA.c.document)).scalar_one()

    [served] = store.served_configs()

    # The stored text is canonical JSON: its hash is the id of the schema it parses to.
    assert served.schema_digest == version_id(json.loads(document)) == version_id(SCHEMA_VALUE)
    assert served.schema_digest == hashlib.sha256(document.encode()).hexdigest()[:16]
    store.set_schema("default", "app/x", {"type": "object"}, actor="test")  # replaced
    assert store.served_configs()[0].schema_digest == version_id({"type": "object"})


def test_namespaces_filter_and_code_point_order(store: Store) -> None:
    # Punctuation a locale collation would skip: the order is by code point on both backends.
    paths = ["b", "a_a", "a/b", "a-c", "a.d"]
    for namespace in ("zeta", "alpha", "beta"):
        for path in paths:
            put(store, {"path": path}, namespace=namespace, path=path)
    store.set_schema("gamma", "schema/only", {"type": "object"}, actor="test")

    every = store.served_configs()
    assert [(c.namespace, c.path) for c in every] == [
        *((namespace, path) for namespace in ("alpha", "beta") for path in sorted(paths)),
        ("gamma", "schema/only"),
        *(("zeta", path) for path in sorted(paths)),
    ]
    assert sorted(paths) == ["a-c", "a.d", "a/b", "a_a", "b"]
    assert store.served_configs(None) == every
    chosen = store.served_configs(["zeta", "gamma", "zeta", "nowhere"])
    assert [(c.namespace, c.path) for c in chosen] == [
        ("gamma", "schema/only"),
        *(("zeta", path) for path in sorted(paths)),
    ]
    assert store.served_configs([]) == []
    assert store.served_configs(["nowhere"]) == []


def test_a_constant_number_of_queries_whatever_the_number_of_configs(store: Store) -> None:
    def statements() -> int:
        with counted_statements(store) as run:
            store.served_configs()
            store.served_configs(["default", "other"])
        return len(run)

    put(store, {"n": 0}, path="app/0")
    few = statements()
    for n in range(1, 40):
        version = make_stable(store, "default", f"app/{n}", {"n": n})
        store.set_schema("default", f"app/{n}", {"maximum": n}, actor="test")
        if n % 3 == 0:
            store.acquire_locks(
                {("default", f"app/{n}"): version}, workflow_id=f"w{n}", run_id=f"r{n}"
            )
    assert len(store.served_configs()) == 40
    assert statements() == few


def test_active_freezes_of_some_namespaces_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [datetime.now(UTC)]
    monkeypatch.setattr(store, "now", lambda: clock[0])
    payments = store.start_freeze("payments", reason="black friday", by="alice")
    short = store.start_freeze(
        "search", reason="short", by="bob", until=clock[0] + timedelta(minutes=5)
    )
    store.start_freeze("ended", reason="over", by="carol")
    store.end_freeze("ended", by="carol")
    default = store.start_freeze("default", reason="incident", by="dave")

    assert [f.id for f in store.active_freezes()] == [default.id, payments.id, short.id]
    assert [f.id for f in store.active_freezes(["search", "ended", "payments"])] == [
        payments.id,
        short.id,
    ]
    [found] = store.active_freezes(["payments"])
    assert found == store.active_freeze("payments")
    assert store.active_freezes([]) == []
    clock[0] += timedelta(minutes=5)  # `until` itself is the first moment not frozen
    assert [f.id for f in store.active_freezes()] == [default.id, payments.id]
