"""OpenFeature Remote Evaluation Protocol (OFREP) over tempoconf's resolution (docs/contract.md,
OFREP): what an evaluation request's context means, and what a resolution is as an evaluation.

A flag key is a config path; the evaluation context is the client's identity (`targetingKey` is
the client id, `channel` its channel, every other attribute a label); the value is the config's
JSON value as a poll resolves it, `variant` its version id, and `reason` says why: `STATIC` on
stable, `SPLIT` for a stage with a percentile, `TARGETING_MATCH` for one that matched by channel
or labels only. No resolution happens here: it is `tempoconf.resolution`'s, unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tempoconf.paths import path_problem
from tempoconf.resolution import (
    STABLE,
    ClientIdentity,
    PublishedStage,
    StageKind,
    StageTarget,
    VersionRecord,
    stage_kind,
)
from tempoconf.storable import text_problem

__all__ = [
    "CHANNEL_ATTRIBUTE",
    "NAMESPACE_HEADER",
    "TARGETING_KEY",
    "EvaluationContext",
    "OfrepError",
    "OfrepErrorCode",
    "OfrepEvaluation",
    "Reason",
    "evaluation",
    "flag_key_problem",
    "parse_request",
    "reason_for",
]

NAMESPACE_HEADER = "X-Tempoconf-Namespace"
"""The request header that names the namespace of the flags (default `default`)."""
TARGETING_KEY = "targetingKey"
CHANNEL_ATTRIBUTE = "channel"


class Reason(StrEnum):
    """OpenFeature resolution reasons this server gives."""

    STATIC = "STATIC"
    """Stable: no stage applies, every client gets this value."""
    TARGETING_MATCH = "TARGETING_MATCH"
    """A stage that matched the client by channel and/or labels."""
    SPLIT = "SPLIT"
    """A stage with a percentile: the client's bucket is inside it."""


class OfrepErrorCode(StrEnum):
    """OpenFeature error codes, as OFREP answers them."""

    FLAG_NOT_FOUND = "FLAG_NOT_FOUND"
    PARSE_ERROR = "PARSE_ERROR"
    INVALID_CONTEXT = "INVALID_CONTEXT"
    TARGETING_KEY_MISSING = "TARGETING_KEY_MISSING"
    GENERAL = "GENERAL"


class OfrepError(Exception):
    """An evaluation refused: `status` (HTTP), `code` (OFREP errorCode), `details` (what is wrong
    and where); `headers` go into the answer."""

    def __init__(
        self,
        status: int,
        code: OfrepErrorCode,
        details: str,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.details = details
        self.headers = dict(headers or {})
        super().__init__(details)


@dataclass(frozen=True, slots=True)
class EvaluationContext:
    """Who asks, read from an OFREP evaluation context."""

    client: ClientIdentity
    anonymous: bool
    """No `targetingKey`: evaluated like a poll without `client` (never in a percentile)."""


@dataclass(frozen=True, slots=True)
class OfrepEvaluation:
    """One successful evaluation, as OFREP answers it."""

    key: str
    value: Any
    reason: Reason
    variant: str
    metadata: dict[str, str]


_REASONS: dict[StageKind | None, Reason] = {
    None: Reason.STATIC,
    "split": Reason.SPLIT,
    "targeting": Reason.TARGETING_MATCH,
}


def reason_for(stage: StageTarget | None) -> Reason:
    """Why a client got what it got: STATIC on stable (`stage` None), SPLIT for a stage with a
    percentile (the client's bucket decided), TARGETING_MATCH for channel/label stages: the
    kind `tempoconf.resolution.stage_kind` gives, as the poll answer's `stage_kind` says it."""
    return _REASONS[stage_kind(stage)]


def evaluation(key: str, record: VersionRecord, stage: PublishedStage | None) -> OfrepEvaluation:
    """The evaluation of `key` that serves `record`, on `stage` (None: stable)."""
    stage_name = STABLE if stage is None else stage.name
    return OfrepEvaluation(
        key=key,
        value=record.value,
        reason=reason_for(stage),
        variant=record.version,
        # OFREP metadata values are flat (string, number, boolean): no nested objects.
        metadata={
            "stage": stage_name,
            "version": record.version,
            "commit": record.commit,
            "author": record.author,
        },
    )


def flag_key_problem(key: str) -> str | None:
    """Why `key` cannot name a flag (it is not a config path), or None."""
    return path_problem(key)


def parse_request(raw: bytes) -> EvaluationContext:
    """The evaluation context of a request body (`{"context": {...}}`).

    No `context`, or no `targetingKey`, is an anonymous client (as a poll without `client`).
    Raises OfrepError: PARSE_ERROR (400) when the body is empty (OFREP requires one) or not a JSON
    object, INVALID_CONTEXT (400) naming the attribute that is wrong.
    """
    if not raw.strip():
        raise _parse_error('the request body is empty: expected a JSON object, {"context": {...}}')
    try:
        document = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as error:
        raise _parse_error(f"the request body is not UTF-8 (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise _parse_error(
            f"malformed JSON in the request body at line {error.lineno} column {error.colno} "
            f"(char {error.pos}): {error.msg}"
        ) from None
    except ValueError as error:
        raise _parse_error(f"invalid JSON in the request body: {error}") from None
    except RecursionError:
        raise _parse_error("the JSON in the request body is nested too deeply") from None
    if not isinstance(document, dict):
        raise _parse_error(
            f"the request body must be a JSON object with a `context`, not {_json_type(document)}"
        )
    context = document.get("context", {})
    if not isinstance(context, dict):
        raise _invalid(f"`context` must be a JSON object, not {_json_type(context)}")
    client_id = _text(context, TARGETING_KEY)
    channel = _text(context, CHANNEL_ATTRIBUTE)
    labels: dict[str, str] = {}
    for name in context:
        if name in (TARGETING_KEY, CHANNEL_ATTRIBUTE):
            continue
        problem = text_problem(name)
        if problem is not None:
            raise _invalid(f"the name of a context attribute {problem}")
        labels[name] = _text(context, name)
    return EvaluationContext(
        ClientIdentity(client_id=client_id, channel=channel or None, labels=labels),
        anonymous=client_id == "",
    )


def _text(context: dict[str, Any], name: str) -> str:
    value = context.get(name, "")
    if not isinstance(value, str):
        what = {
            TARGETING_KEY: "the client id",
            CHANNEL_ATTRIBUTE: "the client's channel",
        }.get(name, "a label: label values are strings")
        raise _invalid(
            f"context attribute {name!r} must be a string ({what}), not {_json_type(value)}"
        )
    problem = text_problem(value)
    if problem is not None:
        raise _invalid(f"context attribute {name!r} {problem}")
    return value


def _invalid(details: str) -> OfrepError:
    return OfrepError(400, OfrepErrorCode.INVALID_CONTEXT, f"invalid evaluation context: {details}")


def _parse_error(details: str) -> OfrepError:
    return OfrepError(400, OfrepErrorCode.PARSE_ERROR, details)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
