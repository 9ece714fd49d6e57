"""The data converter of every tempoconf Temporal client: the SDK's default, decoding dataclasses
without re-reading their annotations each time.

The SDK's JSON converter turns a decoded dict into a dataclass with `typing.get_type_hints` of the
class, on every payload and at every nesting level. tempoconf's modules use
`from __future__ import annotations`, so each call compiles every field's annotation string
again: decoding one `publish_stage` input (a 1 KB plan) took 11 ms, 90% of it in `compile`, and a
rollout's worker decodes about twenty such inputs. `CachedDataclassHints` is the SDK's own
dataclass conversion with each class's hints resolved once. Encoding is untouched, so payloads
are byte for byte what the default converter writes, and any client can read them.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
    value_to_type,
)

__all__ = ["DATA_CONVERTER", "CachedDataclassHints", "TempoconfPayloadConverter"]


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


class TempoconfPayloadConverter(CompositePayloadConverter):
    """The default payload converters, the JSON one with `CachedDataclassHints`."""

    def __init__(self) -> None:
        super().__init__(
            *(
                JSONPlainPayloadConverter(custom_type_converters=[CachedDataclassHints()])
                if isinstance(converter, JSONPlainPayloadConverter)
                else converter
                for converter in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER = dataclasses.replace(
    DataConverter.default, payload_converter_class=TempoconfPayloadConverter
)
"""What every tempoconf client passes to `Client.connect` (and so every worker made from it)."""
