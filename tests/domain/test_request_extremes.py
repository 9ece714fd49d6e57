"""Every part of every example rollout request, replaced in turn by an extreme JSON value: the
request is refused with InvalidRequestError (a 400 from the API, a non-retryable failure from the
workflow's prepare step) or accepted, and nothing else escapes. An OverflowError from a
protobuf duration past float's range once escaped pydantic, a 500 and a prepare step retried
without end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tempoconf.problems import InvalidRequestError
from tempoconf.request import parse_rollout_request
from tests.fixtures.extremes import EXTREMES, parts, replaced

EXAMPLES = sorted(Path(__file__).parents[2].joinpath("examples").glob("rollout*.json"))


def _with_every_stage_duration(request: dict[str, Any]) -> dict[str, Any]:
    """The example with each stage's optional durations set too, so they are replaced as well."""
    for stage in request.get("stages", []):
        stage.setdefault("cooldown", "1s")
        stage.setdefault("expiration", "1h")
    return request


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_an_extreme_value_anywhere_is_refused_with_problems_or_accepted(example: Path) -> None:
    request = _with_every_stage_duration(json.loads(example.read_text()))
    escaped: list[str] = []
    refused = 0
    for at in list(parts(request)):
        for extreme in EXTREMES:
            try:
                parse_rollout_request(replaced(request, at, extreme))
            except InvalidRequestError:
                refused += 1
            except Exception as error:  # noqa: BLE001 - what the test looks for
                escaped.append(f"/{'/'.join(map(str, at))} = {str(extreme)[:20]!r}: {error!r}")

    assert not escaped, "\n".join(escaped[:20])
    assert refused > 0  # the sweep reached the validators
