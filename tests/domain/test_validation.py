"""validate_rollout: the one check every door a rollout comes in by uses (prepare, CLI, admin API)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tempoconf.canonical import version_id
from tempoconf.problems import InvalidRequestError
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.validation import validate_rollout
from tempoconf.store.store import Store

PATH = "myproject/server_config"
SCHEMA = {
    "type": "object",
    "properties": {
        "is_debug": {"type": "boolean"},
        "max_connections": {"type": "integer", "minimum": 1},
    },
    "required": ["is_debug", "max_connections"],
}
GOOD = {"is_debug": False, "max_connections": 10}


@pytest.fixture
def lookup(sqlite_store: Store) -> Store:
    sqlite_store.set_schema("default", PATH, SCHEMA, actor="test")
    sqlite_store.put_version(
        "default", PATH, VersionRecord(version_id(GOOD), GOOD, created_at=datetime.now(UTC))
    )
    return sqlite_store


def test_a_new_value_is_validated_and_gets_its_version_id(lookup: Store) -> None:
    validated = validate_rollout(
        {"path": PATH, "value": {"is_debug": True, "max_connections": 5}}, lookup
    )
    assert validated.version == version_id({"is_debug": True, "max_connections": 5})
    assert validated.existing is None


def test_a_rollback_takes_the_stored_value(lookup: Store) -> None:
    validated = validate_rollout({"path": PATH, "version": version_id(GOOD)}, lookup)
    assert validated.version == version_id(GOOD)
    assert validated.value == GOOD
    assert validated.existing is not None and validated.existing.value == GOOD


def test_every_problem_at_once_fields_and_schema(lookup: Store) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        validate_rollout(
            {
                "path": PATH,
                "value": {"is_debug": "yes", "max_connections": 0},
                "stages": [{"percentile": 101}],
            },
            lookup,
        )
    pointers = {problem.pointer for problem in refused.value.problems}
    assert pointers == {"/stages/0/percentile", "/value/is_debug", "/value/max_connections"}


def test_an_unknown_rollback_version_is_refused(lookup: Store) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        validate_rollout({"path": PATH, "version": "0123456789abcdef"}, lookup)
    assert [str(problem) for problem in refused.value.problems] == [
        f"/version: config default/{PATH} has no version 0123456789abcdef (`tempoconf versions PATH` lists them)"
    ]


def test_a_stored_version_that_fails_todays_schema_is_refused(lookup: Store) -> None:
    old = {"is_debug": False}
    lookup.put_version(
        "default", PATH, VersionRecord(version_id(old), old, created_at=datetime.now(UTC))
    )
    with pytest.raises(InvalidRequestError) as refused:
        validate_rollout({"path": PATH, "version": version_id(old)}, lookup)
    assert "'max_connections' is a required property" in str(refused.value)
