"""Canonical JSON and content-addressed version ids (docs/contract.md, Configs and versions)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from tempoconf.canonical import canonical_id, canonical_json, version_id


def test_canonical_json_sorts_keys_at_every_level_and_has_no_whitespace() -> None:
    value = {"b": 1, "a": {"z": [1, 2, {"y": True, "x": None}], "c": "d e"}}
    assert canonical_json(value) == '{"a":{"c":"d e","z":[1,2,{"x":null,"y":true}]},"b":1}'


def test_canonical_json_keeps_non_ascii_as_utf8() -> None:
    text = canonical_json({"greeting": "grüß dich", "emoji": "🚀"})
    assert text == '{"emoji":"🚀","greeting":"grüß dich"}'
    assert "\\u" not in text


def test_canonical_json_round_trips() -> None:
    value = {"is_debug": False, "max_connections": 2000, "hosts": ["a", "b"], "ratio": 0.5}
    assert json.loads(canonical_json(value)) == value


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_canonical_json_refuses_nan_and_infinities(bad: float) -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": bad})
    with pytest.raises(ValueError):
        version_id([bad])


def test_canonical_json_refuses_non_json_objects() -> None:
    with pytest.raises(TypeError):
        canonical_json({"x": object()})


def test_version_id_is_the_sha256_prefix_of_the_canonical_json() -> None:
    value = {"max_connections": 2000, "is_debug": False}
    expected = hashlib.sha256(b'{"is_debug":false,"max_connections":2000}').hexdigest()[:16]
    assert version_id(value) == expected
    assert re.fullmatch(r"[0-9a-f]{16}", version_id(value))


def test_version_id_hashes_utf8_bytes() -> None:
    expected = hashlib.sha256('{"name":"zoë"}'.encode()).hexdigest()[:16]
    assert version_id({"name": "zoë"}) == expected


def test_version_id_literal() -> None:
    # computed once from sha256('{"a":1}'); pins the id format for users who store ids
    assert version_id({"a": 1}) == "015abd7f5cc57a2d"


def test_same_value_same_id_regardless_of_key_order() -> None:
    first = {"is_debug": False, "max_connections": 2000, "nested": {"a": 1, "b": 2}}
    second = {"nested": {"b": 2, "a": 1}, "max_connections": 2000, "is_debug": False}
    assert version_id(first) == version_id(second)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"a": 1}, {"a": 2}),
        ({"a": 1}, {"b": 1}),
        ([1, 2], [2, 1]),
        ({"a": "1"}, {"a": 1}),
        ({"a": True}, {"a": 1}),
        ({"a": None}, {}),
    ],
)
def test_different_values_have_different_ids(one: object, other: object) -> None:
    assert version_id(one) != version_id(other)


@pytest.mark.parametrize(
    "value",
    [
        {"b": [1, 2.5, -0.0, 1e16, 1.5e-7, 10**30], "a": None},
        {"grüß": "🚀", "nested": {"z": True, "y": 'tab\tand "quote"'}},
        [0.1, 123456789.123456789, 2**53 + 1, -(10**20)],
        "text",
    ],
)
def test_the_id_of_stored_canonical_text_is_the_id_of_the_value_it_parses_to(value: object) -> None:
    # What the store keeps (canonical JSON) hashes to the id of its value without parsing it:
    # canonical JSON is a fixed point of parsing and writing again.
    text = canonical_json(value)
    assert canonical_id(text) == version_id(value) == version_id(json.loads(text))
    assert canonical_json(json.loads(text)) == text
