"""JSON Schemas of the contract's documents, generated from the models that read them.

`ContractJsonSchema` is pydantic's generator with one correction: a duration's default is written
as seconds (pydantic writes a timedelta as ISO 8601, a form `parse_duration` does not read).
`rollout_request_schema()` is the schema `tempoconf schema request` prints and
docs/rollout-request.schema.json holds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from tempoconf.rollout.request import RolloutRequest

__all__ = ["ROLLOUT_REQUEST_SCHEMA_ID", "ContractJsonSchema", "rollout_request_schema"]

ROLLOUT_REQUEST_SCHEMA_ID = "urn:tempoconf:schema:rollout-request"
"""The published schema's `$id`: a name, not a download location (the file is in the repo)."""
_DRAFT = "https://json-schema.org/draft/2020-12/schema"


class ContractJsonSchema(GenerateJsonSchema):
    """pydantic's JSON Schema generator, with durations' defaults in seconds."""

    def encode_default(self, dft: Any) -> Any:
        if isinstance(dft, timedelta):
            seconds = dft.total_seconds()
            return int(seconds) if seconds.is_integer() else seconds
        return super().encode_default(dft)


def rollout_request_schema() -> dict[str, Any]:
    """The rollout request's JSON Schema (draft 2020-12), as a file or an editor takes it."""
    schema = RolloutRequest.model_json_schema(
        schema_generator=ContractJsonSchema, mode="validation"
    )
    return {"$schema": _DRAFT, "$id": ROLLOUT_REQUEST_SCHEMA_ID, **schema}
