"""tempoconf's data converter decodes exactly as the SDK's default does (only faster): every
activity input and result of the saved rollout histories, and the edge cases of its dataclass
conversion."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf import json_format
from temporalio.api.history.v1 import History
from temporalio.converter import DataConverter

from tempoconf import activity_io
from tempoconf.applied import AppliedGate
from tempoconf.applied_io import CHECK_APPLIED_ACTIVITY, CheckAppliedInput
from tempoconf.payloads import DATA_CONVERTER
from tempoconf.plan import RolloutPlan
from tempoconf.progress import HealthReport
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
