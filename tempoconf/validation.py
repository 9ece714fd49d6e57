"""Validating a rollout request as a whole: its fields, and its value against the config's schema.

One function for every door a rollout comes in by (the workflow's prepare step, `tempoconf rollout
start|plan`, the admin API), so each refuses exactly the same requests with the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tempoconf.canonical import version_id
from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem, path_problem
from tempoconf.problems import InvalidRequestError, Problem
from tempoconf.request import RolloutRequest, parse_rollout_request
from tempoconf.resolution import VersionRecord
from tempoconf.schema_validation import value_problems

__all__ = ["ConfigLookup", "ValidatedRollout", "validate_rollout"]


class ConfigLookup(Protocol):
    """What validation reads of a config (the Store has both)."""

    def get_schema(self, namespace: str, path: str) -> Any | None: ...

    def get_version(self, namespace: str, path: str, version: str) -> VersionRecord | None: ...


@dataclass(frozen=True)
class ValidatedRollout:
    request: RolloutRequest
    version: str
    """The version rolled out: the new value's id, or the rollback's."""
    value: Any
    existing: VersionRecord | None
    """The stored version a rollback rolls out (None for a new value)."""


def validate_rollout(raw: Any, lookup: ConfigLookup) -> ValidatedRollout:
    """The request, or InvalidRequestError listing every problem: the fields', and (even when other
    fields are wrong, so one pass fixes all) the value's against the config's schema."""
    problems: list[Problem] = []
    request: RolloutRequest | None = None
    try:
        request = parse_rollout_request(raw)
    except InvalidRequestError as error:
        problems.extend(error.problems)
    existing: VersionRecord | None = None
    value: Any = None
    if isinstance(raw, dict):
        namespace = raw.get("namespace", DEFAULT_NAMESPACE)
        path = raw.get("path")
        if (
            isinstance(namespace, str)  # implied by the checks below; says so to the type checker
            and isinstance(path, str)
            and namespace_problem(namespace) is None
            and path_problem(path) is None
        ):
            schema = lookup.get_schema(namespace, path)
            checkable = "value" in raw
            value = raw.get("value")
            if "version" in raw and "value" not in raw and isinstance(raw["version"], str):
                existing = lookup.get_version(namespace, path, raw["version"])
                if existing is None:
                    problems.append(
                        Problem(
                            "/version",
                            f"config {namespace}/{path} has no version {raw['version']} "
                            "(`tempoconf versions PATH` lists them)",
                        )
                    )
                else:
                    value, checkable = existing.value, True
            if schema is not None and checkable:
                problems.extend(value_problems(schema, value))
    if problems or request is None:
        raise InvalidRequestError(problems)
    version = existing.version if existing is not None else version_id(value)
    return ValidatedRollout(request=request, version=version, value=value, existing=existing)
