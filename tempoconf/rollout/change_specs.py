"""Changesets in a rollout request (docs/contract.md, Changesets): `changes`, 2-20 configs
rolled out together, each a `ChangeSpec`, instead of one `path` with its `value` or `version`."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, model_validator

from tempoconf.paths import DEFAULT_NAMESPACE
from tempoconf.problems import Problem, json_pointer
from tempoconf.rollout.spec_fields import (
    VERSION_ID_PATTERN,
    ConfigPath,
    Namespace,
    StrictSpec,
    unstorable_value_problems,
)

__all__ = ["MAX_CHANGES", "MIN_CHANGES", "ChangeSpec", "changeset_problems"]

MIN_CHANGES = 2
MAX_CHANGES = 20


class ChangeSpec(StrictSpec):
    """One config of a changeset: its path, namespace (default: the request's) and exactly one
    of `value` and `version`."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["value"]}, {"required": ["version"]}]}
    )

    path: ConfigPath
    """The config's path."""
    namespace: Namespace | None = None
    """The config's namespace; default: the request's `namespace`."""
    value: Any = None
    """The config's new value (any JSON); exactly one of `value` and `version`."""
    version: str | None = Field(default=None, pattern=VERSION_ID_PATTERN)
    """A version the config already has (a rollback of this config) instead of a new value."""

    @model_validator(mode="after")
    def _value_or_version(self) -> ChangeSpec:
        # Presence, not null: {"value": null} changes the config to the value null.
        if ("value" in self.model_fields_set) == ("version" in self.model_fields_set):
            raise ValueError("a change needs exactly one of 'value' and 'version'")
        return self


def changeset_problems(raw: dict[str, Any], *, plain: bool = False) -> list[Problem]:
    """The changeset form's own rules: no top-level path/value/version, no config twice; each
    value storable (`plain`: the request is known to serialize, unstorable_value_problems)."""
    problems = [
        Problem(
            f"/{name}",
            f"a changeset names '{name}' in each of its 'changes', not at the top level",
        )
        for name in ("path", "value", "version")
        if name in raw
    ]
    changes = raw.get("changes")
    if changes is None:
        # The model takes null as "no changeset", which would leave a request naming no config.
        problems.append(
            Problem(
                "/changes", "changes is a list of 2 to 20 changes ({path, value} each), not null"
            )
        )
    if not isinstance(changes, list):
        return problems
    default_namespace = raw.get("namespace", DEFAULT_NAMESPACE)
    first_index: dict[tuple[Any, Any], int] = {}
    for index, change in enumerate(changes):
        if not isinstance(change, dict) or not isinstance(change.get("path"), str):
            continue
        namespace = change.get("namespace", default_namespace)
        # A namespace that is no string is the model's problem to report, and no key to compare.
        if isinstance(namespace, str):
            config = (namespace, change["path"])
            if config in first_index:
                problems.append(
                    Problem(
                        json_pointer(["changes", index, "path"]),
                        f"config {namespace}/{config[1]} is already changed by change "
                        f"{first_index[config]}: a changeset changes each config once",
                    )
                )
            else:
                first_index[config] = index
        problems.extend(
            unstorable_value_problems(
                change, json_pointer(["changes", index, "value"]), plain=plain
            )
        )
    return problems
