"""Every part of every example rollout request, replaced in turn by an extreme JSON value: the
request is refused with InvalidRequestError (a 400 from the API, a non-retryable failure from the
workflow's prepare step) or accepted, and nothing else escapes. An OverflowError from a
protobuf duration past float's range once escaped pydantic, a 500 and a prepare step retried
without end."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tempoconf.problems import InvalidRequestError
from tempoconf.request import parse_rollout_request

EXAMPLES = sorted(Path(__file__).parents[2].joinpath("examples").glob("rollout*.json"))

EXTREMES: list[Any] = [
    10**400,
    -(10**400),
    2**64,
    -(2**63) - 1,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    5e-324,
    -0.0,
    "9" * 400,
    "9" * 5000,
    "1" + "0" * 400 + "ms",
    "99999999999999999999h",
    "1e400",
    "nan",
    "Infinity",
    "\u00b2",
    "\u0663",
    "\u0000",
    "\ud800",
    "",
    " ",
    {"seconds": "9" * 400},
    {"seconds": -(10**400)},
    {"seconds": 10**20, "nanos": 10**30},
    [],
    [[[[]]]],
    {},
    None,
    True,
]


def _parts(node: Any, at: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Where each part of a JSON document is: the whole, then every member and item within."""
    yield at
    if isinstance(node, dict):
        for key, member in node.items():
            yield from _parts(member, (*at, key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _parts(item, (*at, index))


def _replaced(document: Any, at: tuple[str | int, ...], value: Any) -> Any:
    if not at:
        return value
    copied = copy.deepcopy(document)
    parent = copied
    for step in at[:-1]:
        parent = parent[step]
    parent[at[-1]] = value
    return copied


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
    for at in list(_parts(request)):
        for extreme in EXTREMES:
            try:
                parse_rollout_request(_replaced(request, at, extreme))
            except InvalidRequestError:
                refused += 1
            except Exception as error:  # noqa: BLE001 - what the test looks for
                escaped.append(f"/{'/'.join(map(str, at))} = {str(extreme)[:20]!r}: {error!r}")

    assert not escaped, "\n".join(escaped[:20])
    assert refused > 0  # the sweep reached the validators
