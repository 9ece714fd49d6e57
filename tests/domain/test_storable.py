"""Text the store can keep: a NUL or a lone surrogate is refused at every door, with its place."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from tempoconf.problems import InvalidRequestError, Problem
from tempoconf.rollout.commands import OperatorCommand
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.schema_validation import schema_problems
from tempoconf.storable import (
    MAX_TEXT_PROBLEMS,
    json_text_problems,
    storable_text,
    text_problem,
)

NUL_MESSAGE = (
    "contains a NUL character (\\u0000) at index 1, which the store cannot keep; remove it"
)


def test_text_problem_names_the_character_and_where_it_is() -> None:
    assert text_problem("plain, é and emoji 🎉") is None
    assert text_problem("x\x00y") == NUL_MESSAGE
    assert text_problem("ab\ud83d") == (
        "contains a lone surrogate (\\ud83d) at index 2: not valid Unicode, which the store "
        "cannot keep"
    )


def test_every_string_of_a_document_is_checked_keys_included() -> None:
    document = {
        "fine": ["a", 1, None, {"b": "c"}],
        "motd": ["ok", "x\x00y"],
        "k\x00": {"deep": [{"er": "\udc00"}]},
    }

    assert json_text_problems(document, "/value") == [
        Problem("/value/motd/1", NUL_MESSAGE),
        Problem("/value/k\\u0000", "the key " + NUL_MESSAGE),
        Problem(
            "/value/k\\u0000/deep/0/er",
            "contains a lone surrogate (\\udc00) at index 0: not valid Unicode, which the store "
            "cannot keep",
        ),
    ]


def test_a_document_nested_past_the_recursion_limit_is_checked_without_crashing() -> None:
    deep: Any = "x\x00"
    for _ in range(5000):
        deep = [deep]

    [problem] = json_text_problems(deep)

    assert problem.pointer == "/0" * 5000


def test_problems_are_bounded() -> None:
    assert len(json_text_problems(["\x00"] * 1000)) == MAX_TEXT_PROBLEMS


def test_storable_text_replaces_what_cannot_be_kept() -> None:
    assert storable_text("fine") == "fine"
    assert storable_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"


@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        ({"message": "x\x00y"}, "/message"),
        ({"author": "x\x00y"}, "/author"),
        ({"commit": "x\x00y"}, "/commit"),
        ({"value": {"a": {"b": "x\x00y"}}}, "/value/a/b"),
        ({"value": {"x\x00y": 1}}, "/value/x\\u0000y"),
        ({"stages": [{"labels": {"zone": "x\x00y"}}]}, "/stages/0/labels/zone"),
        ({"webhooks": ["https://x\x00y"]}, "/webhooks/0"),
    ],
)
def test_a_rollout_request_with_a_nul_anywhere_is_refused_at_its_place(
    fields: dict[str, Any], pointer: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_rollout_request({"path": "p/q", "value": 1, **fields})

    assert [problem.pointer for problem in refused.value.problems] == [pointer]
    assert "NUL character" in str(refused.value)


def test_a_schema_with_a_nul_is_not_usable() -> None:
    assert [p.pointer for p in schema_problems({"properties": {"a\x00": {}}})] == [
        "/properties/a\\u0000"
    ]


def test_an_operator_command_through_the_api_refuses_a_nul() -> None:
    with pytest.raises(ValidationError, match="NUL character"):
        TypeAdapter(OperatorCommand).validate_python({"reason": "x\x00y"})
    assert TypeAdapter(OperatorCommand).validate_python({"by": "alice"}) == OperatorCommand(
        by="alice"
    )
