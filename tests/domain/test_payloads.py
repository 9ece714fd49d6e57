"""tempoconf's data converter decodes exactly as the SDK's default does (only faster): every
activity input and result of the saved rollout histories, and the edge cases of its dataclass
conversion and of the pydantic path it takes for plain dataclasses."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import pytest
from google.protobuf import json_format
from temporalio.api.history.v1 import History
from temporalio.converter import DataConverter

from tempoconf.gates.applied_gate import AppliedGate
from tempoconf.rollout import activity_io
from tempoconf.rollout.activity_io import CHECK_APPLIED_ACTIVITY, CheckAppliedInput
from tempoconf.rollout.plan import RolloutPlan
from tempoconf.rollout.progress import HealthReport
from tempoconf.temporal.payloads import DATA_CONVERTER, StrictDataclassDecoder
from tests.workflows.histories.generate import HISTORIES

INPUTS: dict[str, type] = {
    activity_io.PREPARE_ACTIVITY: activity_io.PrepareInput,
    activity_io.PUBLISH_STAGE_ACTIVITY: activity_io.PublishStageInput,
    activity_io.RECORD_TRANSITION_ACTIVITY: activity_io.RecordTransitionsInput,
    activity_io.CHECK_FREEZE_ACTIVITY: activity_io.CheckFreezeInput,
    activity_io.CHECK_HEALTH_ACTIVITY: activity_io.CheckHealthInput,
    activity_io.WATCH_HEALTH_ACTIVITY: activity_io.WatchHealthInput,
    activity_io.PROMOTE_ACTIVITY: activity_io.PromoteInput,
    activity_io.REVERT_ACTIVITY: activity_io.RevertInput,
    activity_io.RENEW_LEASES_ACTIVITY: activity_io.RenewLeasesInput,
    CHECK_APPLIED_ACTIVITY: CheckAppliedInput,
}
RESULTS: dict[str, type] = {
    activity_io.PREPARE_ACTIVITY: RolloutPlan,
    activity_io.PUBLISH_STAGE_ACTIVITY: activity_io.PublishStageResult,
    activity_io.CHECK_FREEZE_ACTIVITY: activity_io.CheckFreezeResult,
    activity_io.CHECK_HEALTH_ACTIVITY: HealthReport,
    activity_io.REVERT_ACTIVITY: activity_io.RevertResult,
    activity_io.RENEW_LEASES_ACTIVITY: activity_io.RenewLeasesResult,
    CHECK_APPLIED_ACTIVITY: AppliedGate,
}


def _saved_payloads() -> list[tuple[str, type, Any]]:
    """(where, type, payloads) of every typed activity input and result in the saved histories."""
    found = []
    for path in sorted(HISTORIES.glob("*.json")):
        history = json_format.Parse(path.read_text(), History(), ignore_unknown_fields=True)
        scheduled: dict[int, str] = {}
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                attributes = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = name = attributes.activity_type.name
                if name in INPUTS:
                    found.append((f"{path.name}: {name} input", INPUTS[name], attributes.input))
            elif event.HasField("activity_task_completed_event_attributes"):
                done = event.activity_task_completed_event_attributes
                name = scheduled[done.scheduled_event_id]
                if name in RESULTS and done.result.payloads:
                    found.append((f"{path.name}: {name} result", RESULTS[name], done.result))
    return found


def test_every_saved_payload_decodes_as_the_sdk_default_decodes_it() -> None:
    ours, default = DATA_CONVERTER.payload_converter, DataConverter.default.payload_converter
    saved = _saved_payloads()
    assert len(saved) > 100, len(saved)
    for where, kind, payloads in saved:
        expected = default.from_payloads(payloads.payloads, [kind])
        assert ours.from_payloads(payloads.payloads, [kind]) == expected, where
        # ... and encodes back to the same bytes.
        assert ours.to_payloads(expected) == default.to_payloads(expected), where


@dataclass
class _Inner:
    count: int


@dataclass
class _Outer:
    name: str
    inner: list[_Inner]
    note: str | None = None
    derived: int = field(default=0, init=False)


def _decode(value: dict[str, Any]) -> Any:
    payload = DataConverter.default.payload_converter.to_payloads([value])
    return DATA_CONVERTER.payload_converter.from_payloads(payload, [_Outer])[0]


def test_nested_dataclasses_unknown_keys_and_init_false_fields() -> None:
    decoded = _decode({"name": "a", "inner": [{"count": 2}], "extra": 1, "derived": 7})
    assert (decoded.name, decoded.inner, decoded.note) == ("a", [_Inner(count=2)], None)
    assert decoded.derived == 7


@pytest.mark.parametrize(
    "value",
    [
        {"inner": []},  # a required field missing
        {"name": "a", "inner": [{"count": "two"}]},  # a nested field of the wrong type
    ],
)
def test_what_the_default_refuses_is_refused(value: dict[str, Any]) -> None:
    payload = DataConverter.default.payload_converter.to_payloads([value])
    with pytest.raises(Exception) as default_error:
        DataConverter.default.payload_converter.from_payloads(payload, [_Outer])
    with pytest.raises(type(default_error.value)):
        _decode(value)


class _Colour(enum.StrEnum):
    RED = "red"


class _Shape(enum.Enum):
    ROUND = "round"


@dataclass
class _Plain:
    """Every shape the pydantic path takes."""

    name: str
    count: int
    ratio: float
    flag: bool
    colour: _Colour
    tags: list[str]
    extra: dict[str, Any]
    inner: _Inner | None = None
    items: list[_Inner] = field(default_factory=list)


_PLAIN = {"name": "a", "count": 1, "ratio": 0.5, "flag": True, "colour": "red", "tags": ["x"]}


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"extra": {"k": [1, {"n": None}]}, "inner": {"count": 3}, "items": [{"count": 4}]},
        {"unknown": 1, "inner": None},  # unknown keys are ignored
        {"ratio": 2},  # an int where a float goes: the SDK makes it 2.0
        {"count": 2.0},  # a float where an int goes: the SDK makes it 2
        {"count": 2.7},  # ... and truncates
        {"count": True},  # bool is an int to the SDK
        {"flag": 1},  # refused
        {"name": 5},  # refused
        {"colour": "blue"},  # refused
        {"tags": "x"},  # refused
        {"items": [{"count": "4"}]},  # refused, nested
        {"name": None},  # refused
    ],
)
def test_the_pydantic_path_decodes_or_refuses_as_the_sdk_does(changes: dict[str, Any]) -> None:
    value = {**_PLAIN, "extra": {}, **changes}
    payload = DataConverter.default.payload_converter.to_payloads([value])
    try:
        expected = DataConverter.default.payload_converter.from_payloads(payload, [_Plain])[0]
    except Exception as default_error:
        with pytest.raises(type(default_error)):
            DATA_CONVERTER.payload_converter.from_payloads(payload, [_Plain])
        return
    decoded = DATA_CONVERTER.payload_converter.from_payloads(payload, [_Plain])[0]
    assert decoded == expected
    assert [type(getattr(decoded, f.name)) for f in fields(_Plain)] == [
        type(getattr(expected, f.name)) for f in fields(_Plain)
    ]


@dataclass
class _Either:
    row: _Inner | _Outer


@dataclass
class _Dated:
    at: datetime


@dataclass
class _Keyed:
    by_stage: dict[int, float]


@dataclass
class _Shaped:
    shape: _Shape


def test_the_pydantic_path_takes_the_rollouts_payloads_and_leaves_what_the_sdk_decodes_otherwise() -> (
    None
):
    hot = [
        activity_io.PrepareInput,
        activity_io.PublishStageInput,
        activity_io.RecordTransitionsInput,
        activity_io.CheckFreezeInput,
        activity_io.CheckHealthInput,
        activity_io.PromoteInput,
        activity_io.RevertInput,
        RolloutPlan,
        activity_io.PublishStageResult,
        activity_io.CheckFreezeResult,
        HealthReport,
        AppliedGate,
    ]
    for kind in [*hot, _Plain]:
        assert StrictDataclassDecoder.accepts(kind), kind
    # The SDK sets init=False fields from the payload; it takes the first member of a union of
    # dataclasses that fits; it parses dates and int keys its own way; it decodes no plain enum.
    for kind in (_Outer, _Either, _Dated, _Keyed, _Shaped, activity_io.RenewLeasesInput, dict, str):
        assert not StrictDataclassDecoder.accepts(kind), kind
