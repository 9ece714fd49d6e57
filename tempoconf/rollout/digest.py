"""The plan digest: one short string that names everything a rollout would do.

An approval names the digest of the plan its approver reviewed (`tempoconf rollout plan` prints
it); the running rollout refuses an approval whose digest is not its own, so an edit made after
the review (another value, a shorter hold, a stage more) is never approved by mistake.

Definition (docs/contract.md, Plan digest): `sha256:` and the first 32 hex characters of the
SHA-256 of the canonical JSON (tempoconf.canonical) of the expanded plan (`RolloutPlan`, as
`plan_from_request` makes it): every dataclass field of the plan, its stages and their checks,
except

- the fields named in `EXCLUDED_PLAN_FIELDS`: how the worker runs it and what people read,
  not what the rollout does;
- every field whose value is its dataclass default (`manual: false`, no approvals, no
  webhooks): a field added to the plan later changes no digest of a plan that does not use it,
  so a worker upgrade never turns a reviewed digest stale;
- each change's `change` (`PlannedChange.change`) in a changeset's `changes`: a sentence for
  people, told against the stable value of the moment, so the same request would get another
  digest once a config's stable moved (its configs, versions and bucketing key are in it).

Fields that other features add to `RolloutPlan` or `PlannedStage` are included without a change
here. 128 bits: two plans with one digest cannot be crafted (a 64-bit prefix could be, by
birthday search, by an author who wants an approved plan to mean another).

Pure and deterministic (hashlib, json): the workflow computes it from its plan.
"""

from __future__ import annotations

import dataclasses
import hashlib
from enum import Enum
from typing import Any

from tempoconf.canonical import canonical_json
from tempoconf.rollout.plan import RolloutPlan

__all__ = [
    "DIGEST_HEX_CHARS",
    "DIGEST_PREFIX",
    "EXCLUDED_CHANGE_FIELDS",
    "EXCLUDED_PLAN_FIELDS",
    "digest_problem",
    "plan_digest",
    "plan_document",
]

DIGEST_PREFIX = "sha256:"
DIGEST_HEX_CHARS = 32
EXCLUDED_PLAN_FIELDS = frozenset(
    {
        "change",  # a sentence for people, derived from the value and the stable one
        "temporal_cli",  # how a person types the Temporal CLI where the worker runs
        "temporal_address",  # where that worker's Temporal server is
        "temporal_namespace",  # ... and its namespace
        "continue_as_new_after_events",  # a worker's setting
        "paths_attribute",  # whether the worker's namespace has TempoconfPaths
        # Who starts it, not what it does: a plan reviewed by one identity and started by
        # another keeps its digest.
        "started_by",
        "started_by_emails",
        # Whose signature an approval needs: how approvals reach it, not what it does (a plan
        # reviewed without the API keeps its digest when the API starts it).
        "approval_key",
    }
)
"""Top-level fields of `RolloutPlan` that are no part of what the rollout does."""
EXCLUDED_CHANGE_FIELDS = frozenset({"change"})
"""Fields of each `PlannedChange` of a changeset that are no part of what the rollout does."""


def _is_default(field: dataclasses.Field[Any], value: Any) -> bool:
    if field.default is not dataclasses.MISSING:
        return bool(value == field.default)
    if field.default_factory is not dataclasses.MISSING:
        return bool(value == field.default_factory())
    return False


def _document(value: Any) -> Any:
    """`value` as plain JSON: dataclasses as objects of their non-default fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _document(getattr(value, field.name))
            for field in dataclasses.fields(value)
            if not _is_default(field, getattr(value, field.name))
        }
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(key): _document(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_document(item) for item in value]
    return value


def plan_document(plan: RolloutPlan, *, change_texts: bool = False) -> dict[str, Any]:
    """What the digest hashes: the plan as JSON, without the excluded and the default fields.

    `change_texts`: keep each change's sentence, as the digest of a changeset was before issue
    25 (a running rollout that predates it keeps the digest it showed: workflow.patched)."""
    document = _document(plan)
    assert isinstance(document, dict)
    document = {key: item for key, item in document.items() if key not in EXCLUDED_PLAN_FIELDS}
    if not change_texts and "changes" in document:
        document["changes"] = [
            {key: item for key, item in change.items() if key not in EXCLUDED_CHANGE_FIELDS}
            for change in document["changes"]
        ]
    return document


def plan_digest(plan: RolloutPlan, *, change_texts: bool = False) -> str:
    """`sha256:` + 32 hex: the digest `rollout plan` prints and an approval must name
    (`change_texts`: see `plan_document`; only for a rollout that predates issue 25)."""
    text = canonical_json(plan_document(plan, change_texts=change_texts))
    return DIGEST_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_HEX_CHARS]


def digest_problem(text: str) -> str | None:
    """Why `text` is not a digest at all (None: it is one, matching or not)."""
    hex_part = text[len(DIGEST_PREFIX) :] if text.startswith(DIGEST_PREFIX) else ""
    if len(hex_part) != DIGEST_HEX_CHARS or any(c not in "0123456789abcdef" for c in hex_part):
        return (
            f"{text!r} is not a plan digest: `{DIGEST_PREFIX}` and {DIGEST_HEX_CHARS} lower-case "
            "hex characters, as `tempoconf rollout plan` prints it"
        )
    return None
