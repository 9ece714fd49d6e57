"""The data converter of every tempoconf Temporal client: the SDK's default, decoding dataclasses
without re-reading their annotations each time, and sending a deliberate failure without its
Python stack (`ReadableFailures`).

The SDK's JSON converter turns a decoded dict into a dataclass with `typing.get_type_hints` of the
class, on every payload and at every nesting level. tempoconf's modules use
`from __future__ import annotations`, so each call compiles every field's annotation string
again: decoding one `publish_stage` input (a 1 KB plan) took 11 ms, 90% of it in `compile`, and a
rollout's worker decodes about twenty such inputs. `CachedDataclassHints` is the SDK's own
dataclass conversion with each class's hints resolved once. Encoding is untouched, so payloads
are byte for byte what the default converter writes, and any client can read them.

Even so, that conversion walks every value in Python (160 to 200 us for one activity input);
under 200 concurrent rollouts it held the interpreter lock for 7% of the worker's main thread. A
dataclass made only of plain JSON shapes (`StrictDataclassDecoder.accepts`) is decoded by
pydantic's compiled validator instead (8 to 48 us), in strict mode; what it refuses goes the SDK's
way, so a payload decodes to what the default gives or fails as the default fails.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any

import pydantic
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
    PayloadConverter,
    value_to_type,
)
from temporalio.exceptions import ApplicationError

__all__ = [
    "DATA_CONVERTER",
    "CachedDataclassHints",
    "ReadableFailures",
    "StrictDataclassDecoder",
    "TempoconfPayloadConverter",
]


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


class CachedDataclassHints(JSONTypeConverter):
    """`value_to_type`'s dataclass branch (temporalio 1.35), with the hints cached per class:
    unknown keys are ignored, a missing required field fails the class's `__init__`, `init=False`
    fields are set after it."""

    def to_typed_value(self, hint: type, value: Any) -> Any | None:
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            return JSONTypeConverter.Unhandled
        if not isinstance(value, dict):
            raise TypeError(f"Cannot convert to dataclass {hint}, value is {type(value)} not dict")
        hints = _field_hints(hint)
        given: dict[str, Any] = {}
        not_init: dict[str, Any] = {}
        for field in dataclasses.fields(hint):
            raw = value.get(field.name, dataclasses.MISSING)
            if raw is dataclasses.MISSING:
                continue
            try:
                converted = value_to_type(hints[field.name], raw, [self])
            except Exception as error:
                raise TypeError(
                    f"Failed converting field {field.name} on dataclass {hint}"
                ) from error
            (given if field.init else not_init)[field.name] = converted
        instance = hint(**given)
        for name, converted in not_init.items():
            object.__setattr__(instance, name, converted)
        return instance


class StrictDataclassDecoder(JSONPlainPayloadConverter):
    """The SDK's JSON converter (with `CachedDataclassHints`), decoding a payload typed as a
    dataclass of plain JSON shapes with pydantic's validator, strict: a value of another type is
    refused, never coerced, and then decoded the SDK's way (its result, or its error)."""

    def __init__(self) -> None:
        super().__init__(custom_type_converters=[CachedDataclassHints()])

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        adapter = _strict_adapter(type_hint) if type_hint is not None else None
        if adapter is not None:
            try:
                return adapter.validate_json(payload.data, strict=True)
            except pydantic.ValidationError:
                pass
        return super().from_payload(payload, type_hint)

    @staticmethod
    def accepts(hint: Any) -> bool:
        """Whether pydantic decodes `hint` exactly as the SDK does: a dataclass whose fields (and
        theirs) are str, int, float, bool, None, Any, str or int enums, lists, str-keyed dicts,
        optionals of these and such dataclasses, with no `init=False` field (the SDK sets those
        from the payload, pydantic does not). Not dates, tuples, int-keyed dicts, other unions."""
        return dataclasses.is_dataclass(hint) and isinstance(hint, type) and _plain(hint, set())


def _plain(hint: Any, seen: set[type]) -> bool:
    if hint in (str, int, float, bool, type(None), Any):
        return True
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return issubclass(hint, (str, int))  # the SDK decodes no other enum
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if hint in seen:
            return True
        seen.add(hint)
        hints = _field_hints(hint)
        return all(
            field.init and _plain(hints[field.name], seen) for field in dataclasses.fields(hint)
        )
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return len(args) == 1 and _plain(args[0], seen)
    if origin is dict:
        return len(args) == 2 and args[0] is str and _plain(args[1], seen)
    if origin in (typing.Union, types.UnionType):
        # Optional only: of two dataclasses the SDK takes the first that fits, pydantic the best.
        others = [arg for arg in args if arg is not type(None)]
        return len(others) == 1 and _plain(others[0], seen)
    return False


@functools.cache
def _strict_adapter(hint: Any) -> pydantic.TypeAdapter[Any] | None:
    """pydantic's validator of `hint`, built once; None where the SDK's own decoding must run."""
    try:
        return pydantic.TypeAdapter(hint) if StrictDataclassDecoder.accepts(hint) else None
    except (TypeError, NameError, pydantic.PydanticUserError):
        return None


class TempoconfPayloadConverter(CompositePayloadConverter):
    """The default payload converters, the JSON one a `StrictDataclassDecoder`."""

    def __init__(self) -> None:
        super().__init__(
            *(
                StrictDataclassDecoder()
                if isinstance(converter, JSONPlainPayloadConverter)
                else converter
                for converter in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


class ReadableFailures(DefaultFailureConverter):
    """The SDK's failures, without the stack trace of a final `ApplicationError`.

    Such an error is raised on purpose, with a message written for people: a refused rollout
    request lists its problems, each at its JSON pointer. The SDK would add the Python frames that
    raised it, the workflow's own, and `temporal workflow result` and the Web UI print them after
    the message: twenty lines that say nothing to whoever sent the request. Every other failure
    (a bug, a retryable error) keeps its stack. Only what reaches Temporal changes: a replay
    compares commands, never a failure's text, so running workflows are unaffected."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        if isinstance(exception, ApplicationError) and exception.non_retryable:
            failure.stack_trace = ""


DATA_CONVERTER = dataclasses.replace(
    DataConverter.default,
    payload_converter_class=TempoconfPayloadConverter,
    failure_converter_class=ReadableFailures,
)
"""What every tempoconf client passes to `Client.connect` (and so every worker made from it)."""
