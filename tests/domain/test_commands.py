"""The operator commands' registry and their argument (tempoconf.rollout.commands)."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter, ValidationError
from temporalio.converter import DataConverter

from tempoconf.rollout.commands import COMMAND_NAMES, COMMANDS, AnswerWhen, OperatorCommand
from tempoconf.rollout.validation_errors import problems_from_validation_error

ADAPTER = TypeAdapter(OperatorCommand)


def test_the_six_commands_in_the_order_help_lists_them() -> None:
    assert COMMAND_NAMES == ("halt", "bypass", "advance", "pause", "resume", "approve")
    assert COMMANDS["halt"].summary == "Revert every client to stable and end the rollout."
    assert COMMANDS["pause"].summary == "Hold the rollout where it is until `resume`."
    # halt and bypass answer once the rollout ended; pause is in effect at once
    assert [name for name in COMMAND_NAMES if COMMANDS[name].answer_when is AnswerWhen.ENDED] == [
        "halt",
        "bypass",
    ]
    assert COMMANDS["pause"].answer_when is AnswerWhen.AT_ONCE
    assert all(spec.signal and spec.update and spec.takes_reason for spec in COMMANDS.values())


def test_an_api_body_validates_into_the_workflows_argument() -> None:
    assert ADAPTER.validate_python({}) == OperatorCommand()
    assert ADAPTER.validate_python({"reason": "bad", "by": "alice"}) == OperatorCommand(
        "bad", "alice"
    )


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"raeson": "typo"}, "/raeson: unknown field 'raeson'"),
        ({"reason": 5}, "/reason: Input should be a valid string"),
        ({"by": None}, "/by: Input should be a valid string"),
        ({"by": "x" * 201}, "/by: String should have at most 200 characters"),
        ({"reason": "x" * 2001}, "/reason: String should have at most 2000 characters"),
    ],
)
def test_a_bad_body_says_what_is_wrong_and_where(raw: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ADAPTER.validate_python(raw)
    assert [str(found) for found in problems_from_validation_error(caught.value)] == [problem]


def test_the_argument_crosses_the_default_converter() -> None:
    converter = DataConverter.default.payload_converter
    [payload] = converter.to_payloads([OperatorCommand("why", "bob")])
    assert json.loads(payload.data) == {
        "reason": "why", "by": "bob", "digest": "", "signature": "", "signed_at": "",
        "rollout_run": "", "stage_index": None, "nonce": "", "emails": [],
    }  # fmt: skip
    assert converter.from_payloads([payload], [OperatorCommand]) == [OperatorCommand("why", "bob")]
    # what the CLI and the API send when no digest is given: no digest key at all
    [without] = converter.to_payloads([{"reason": "why", "by": "bob"}])
    assert converter.from_payloads([without], [OperatorCommand]) == [OperatorCommand("why", "bob")]
