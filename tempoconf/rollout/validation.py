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
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.request import RolloutRequest, parse_rollout_request
from tempoconf.schema_validation import value_problems

__all__ = ["ConfigLookup", "ValidatedChange", "ValidatedRollout", "validate_rollout"]


class ConfigLookup(Protocol):
    """What validation reads of a config (the Store has both)."""

    def get_schema(self, namespace: str, path: str) -> Any | None: ...

    def get_version(self, namespace: str, path: str, version: str) -> VersionRecord | None: ...


@dataclass(frozen=True)
class ValidatedChange:
    """One config of a changeset, validated: what ValidatedRollout says of a single config."""

    namespace: str
    path: str
    version: str
    value: Any
    existing: VersionRecord | None


@dataclass(frozen=True)
class ValidatedRollout:
    request: RolloutRequest
    version: str
    """The version rolled out: the new value's id, or the rollback's."""
    value: Any
    existing: VersionRecord | None
    """The stored version a rollback rolls out (None for a new value)."""
    changes: tuple[ValidatedChange, ...] = ()
    """A changeset's configs, in the request's order (empty for a single config); version,
    value and existing above are then its first change's."""

    def configs(self) -> list[ValidatedChange]:
        """Every config the rollout changes (one, or a changeset's)."""
        if self.changes:
            return list(self.changes)
        request = self.request
        return [
            ValidatedChange(
                request.namespace, request.path, self.version, self.value, self.existing
            )
        ]


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
    if isinstance(raw, dict) and "changes" in raw:
        changes = _changeset(raw, lookup, problems)
        if problems or request is None or not changes:
            raise InvalidRequestError(problems or [Problem("/changes", "no change to roll out")])
        first = changes[0]
        return ValidatedRollout(
            request=request,
            version=first.version,
            value=first.value,
            existing=first.existing,
            changes=tuple(changes),
        )
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


def _changeset(
    raw: dict[str, Any], lookup: ConfigLookup, problems: list[Problem]
) -> list[ValidatedChange]:
    """Each change checked as a single config is (its version found, its value against its own
    config's schema, at /changes/N/value), appending to `problems`; the changes once all pass."""
    default_namespace = raw.get("namespace", DEFAULT_NAMESPACE)
    changes: list[ValidatedChange] = []
    raw_changes = raw.get("changes")
    if not isinstance(raw_changes, list):
        return changes
    for index, change in enumerate(raw_changes):
        if not isinstance(change, dict):
            continue
        namespace = change.get("namespace", default_namespace)
        path = change.get("path")
        if not (
            isinstance(namespace, str)
            and isinstance(path, str)
            and namespace_problem(namespace) is None
            and path_problem(path) is None
        ):
            continue
        existing: VersionRecord | None = None
        value = change.get("value")
        checkable = "value" in change
        if "version" in change and "value" not in change and isinstance(change["version"], str):
            existing = lookup.get_version(namespace, path, change["version"])
            if existing is None:
                problems.append(
                    Problem(
                        f"/changes/{index}/version",
                        f"config {namespace}/{path} has no version {change['version']} "
                        "(`tempoconf versions PATH` lists them)",
                    )
                )
                continue
            value, checkable = existing.value, True
        schema = lookup.get_schema(namespace, path)
        if schema is not None and checkable:
            problems.extend(value_problems(schema, value, pointer_prefix=f"/changes/{index}/value"))
        try:
            version = existing.version if existing is not None else version_id(value)
        except (TypeError, ValueError, RecursionError):
            continue  # not plain JSON: parse_rollout_request said so at /changes/N/value
        changes.append(ValidatedChange(namespace, path, version, value, existing))
    return changes
