"""The JSON of the OFREP routes, as models: the request body (documented as it validates) and the
answers (as they serialize), for `/openapi.json`; the routes build their bytes from these once
per config snapshot (api/ofrep.py).

Names are OFREP's own (camelCase on the wire: `errorCode`, `errorDetails`, `targetingKey`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tempoconf.resolution.ofrep import OfrepErrorCode, Reason


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    def body(self) -> dict[str, Any]:
        """The answer as JSON-ready data, with OFREP's names."""
        return self.model_dump(mode="json", by_alias=True)


class OfrepContext(BaseModel):
    """The evaluation context: who asks. Every attribute is a string; those other than
    `targetingKey` and `channel` are the client's labels."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)
    __pydantic_extra__: dict[str, str] = Field(init=False)

    targeting_key: str = Field(default="", alias="targetingKey")
    """The client id (a poll's `client`). Absent or empty: an anonymous client, which never
    falls in a percentile stage."""
    channel: str = ""
    """The client's channel (a poll's `channel`)."""


class OfrepRequest(BaseModel):
    """An OFREP evaluation request (single or bulk)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    context: OfrepContext = Field(default_factory=OfrepContext)


class OfrepFlagMetadata(_Model):
    stage: str
    """`stable`, or the name of the stage that applies."""
    version: str
    commit: str
    author: str


class OfrepFlagAnswer(_Model):
    """One flag (config) evaluated for the client."""

    key: str
    """The config path."""
    reason: Reason
    """STATIC on stable, SPLIT on a percentile stage, TARGETING_MATCH on a channel/label stage."""
    variant: str
    """The version id."""
    metadata: OfrepFlagMetadata
    value: Any
    """The config's value (any JSON), as `GET /v1/configs/{path}` serves it to this client."""


class OfrepFlagError(_Model):
    """A flag that could not be evaluated (or a refused single evaluation)."""

    key: str
    error_code: OfrepErrorCode = Field(alias="errorCode")
    error_details: str = Field(alias="errorDetails")
    """What is wrong, and where."""


class OfrepBulkAnswer(_Model):
    """Every flag (config) of the namespace, evaluated for the client, sorted by key."""

    flags: list[OfrepFlagAnswer | OfrepFlagError]


class OfrepBulkError(_Model):
    """A refused bulk evaluation."""

    error_code: OfrepErrorCode = Field(alias="errorCode")
    error_details: str = Field(alias="errorDetails")
    """What is wrong, and where."""
