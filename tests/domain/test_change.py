"""The one-line change summary: what a rollout changes, named by key, within a length limit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tempoconf.resolution import VersionRecord
from tempoconf.rollout.change import (
    MAX_CHANGE_LENGTH,
    MAX_SUMMARY_BYTES,
    change_summary,
    rollout_change,
    value_changes,
    workflow_summary,
)

STABLE = {"is_debug": False, "max_connections": 1000}


def test_a_changed_top_level_key_names_old_and_new() -> None:
    assert (
        change_summary(STABLE, {"is_debug": False, "max_connections": 2000})
        == "max_connections 1000 → 2000"
    )


def test_nested_keys_are_dotted_and_unchanged_siblings_left_out() -> None:
    before = {"db": {"pool": {"size": 10, "timeout": 5}, "host": "a"}, "debug": False}
    after = {"db": {"pool": {"size": 20, "timeout": 5}, "host": "b"}, "debug": False}
    assert change_summary(before, after) == 'db.host "a" → "b", db.pool.size 10 → 20'


def test_added_and_removed_keys() -> None:
    before = {"keep": 1, "legacy": {"mode": "x"}}
    after = {"keep": 1, "limits": {"rps": 50}, "retries": 3}
    assert value_changes(before, after) == [
        "legacy removed",
        'limits added: {"rps":50}',
        "retries added: 3",
    ]


def test_a_key_that_a_dot_would_make_ambiguous_is_quoted() -> None:
    assert value_changes({"a.b": 1}, {"a.b": 2}) == ['["a.b"] 1 → 2']
    assert value_changes({"x": {"a b": 1}}, {"x": {"a b": 2}}) == ['x["a b"] 1 → 2']


def test_lists_and_scalars_compare_as_a_whole() -> None:
    assert (
        change_summary({"hosts": ["a", "b"]}, {"hosts": ["a", "c"]})
        == 'hosts ["a","b"] → ["a","c"]'
    )
    assert change_summary(1000, 2000) == "1000 → 2000"
    assert change_summary({"a": 1}, [1]) == '{"a":1} → [1]'


def test_a_type_change_that_python_calls_equal_is_still_a_change() -> None:
    assert change_summary({"n": 1}, {"n": 1.0}) == "n 1 → 1.0"
    assert change_summary({"n": 1}, {"n": True}) == "n 1 → true"


def test_long_values_are_cut_and_many_changes_counted() -> None:
    long_text = "x" * 100
    shown = change_summary({"motd": "hi"}, {"motd": long_text})
    assert shown.startswith('motd "hi" → "xxxx') and shown.endswith("…")
    assert len(shown) < 50
    before = {f"key_{n:02d}": n for n in range(40)}
    after = {f"key_{n:02d}": n + 1 for n in range(40)}
    many = change_summary(before, after)
    assert many.startswith("key_00 0 → 1, key_01 1 → 2, ")
    assert many.endswith(" more") and len(many) <= MAX_CHANGE_LENGTH
    shown_count = many.count("→")
    assert many.endswith(f" and {40 - shown_count} more")


def test_no_stable_is_the_first_value() -> None:
    assert change_summary(None, {"a": 1}, has_before=False) == "first value"
    assert rollout_change({"a": 1}, None) == "first value"


def test_same_value_as_stable_says_so() -> None:
    assert change_summary(STABLE, dict(STABLE)) == "same value as stable"


def test_a_rollback_names_its_version_then_the_change() -> None:
    stable = VersionRecord(
        version="5bab37846357d5ab",
        value={"max_connections": 2500},
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert (
        rollout_change({"max_connections": 1000}, stable, rollback_to="c839a1b794e06bfb")
        == "rollback to c839a1b794e06bfb: max_connections 2500 → 1000"
    )
    assert (
        rollout_change({"a": 1}, None, rollback_to="c839a1b794e06bfb")
        == "rollback to c839a1b794e06bfb"
    )


@pytest.mark.parametrize("change", ["max_connections 1000 → 2000", "", "→" * 300])
def test_workflow_summary_fits_temporals_byte_limit(change: str) -> None:
    summary = workflow_summary("default", "myproject/server_config", "0123456789abcdef", change)
    assert len(summary.encode("utf-8")) <= MAX_SUMMARY_BYTES
    assert summary.startswith("default/myproject/server_config")
    if change and len(change) < 100:
        assert summary == f"default/myproject/server_config: {change} (0123456789abcdef)"
