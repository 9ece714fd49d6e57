"""What applying a tree would do, config by config, against what is served (tempoconf diff):
figures in, a verdict out; reading the served state is the caller's (tempoconf.operations.served).

A config's value is compared by its version id (the hash of its canonical JSON), its schema by
the same hash of the schema. A change to a rollout.json alone changes nothing served: it shapes
the next rollout of the configs below it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from tempoconf.canonical import version_id
from tempoconf.gates.freezes import Freeze, describe_freeze
from tempoconf.store.records import LockRecord, ServedConfig
from tempoconf.tree.layout import Tree, TreeConfig
from tempoconf.tree.requests import changesets

__all__ = ["Action", "ConfigDiff", "TreeDiff", "diff_tree"]


class Action(StrEnum):
    """What apply does with a config."""

    UNCHANGED = "unchanged"
    """Its value is the stable version: nothing."""
    ROLLING_OUT = "rolling_out"
    """A running rollout carries its value already: nothing."""
    START = "start"
    """A new value: apply starts its rollout (alone, or in its changeset)."""
    BLOCKED = "blocked"
    """A new value apply refuses to start now (another version's rollout, a freeze)."""
    NOT_IN_TREE = "not_in_tree"
    """Served in one of the tree's namespaces, absent from the tree: apply leaves it as it is."""


@dataclass
class ConfigDiff:
    namespace: str
    path: str
    action: Action
    file: str | None
    version: str | None  # the tree's version of the value
    stable_version: str | None
    schema_change: bool = False
    running: LockRecord | None = None
    blocked: str = ""  # why, when BLOCKED
    changeset: str | None = None
    value_diff: list[str] = field(default_factory=list)  # filled by the caller (needs the value)
    schema_diff: list[str] = field(default_factory=list)
    config: TreeConfig | None = None

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.path}"

    @property
    def pending(self) -> bool:
        """Apply would do something, or would be refused."""
        return self.action in (Action.START, Action.BLOCKED) or self.schema_change


@dataclass
class TreeDiff:
    configs: list[ConfigDiff]

    @property
    def pending(self) -> bool:
        return any(config.pending for config in self.configs)

    def of(self, action: Action) -> list[ConfigDiff]:
        return [config for config in self.configs if config.action is action]

    def units(self) -> list[list[ConfigDiff]]:
        """The rollouts apply starts, in the tree's order: each changed config alone, or the
        changed configs of a changeset together (a changeset of one is a config's rollout)."""
        units: list[list[ConfigDiff]] = []
        grouped: dict[str, list[ConfigDiff]] = {}
        for config in self.of(Action.START):
            if config.changeset is None:
                units.append([config])
            elif config.changeset in grouped:
                grouped[config.changeset].append(config)
            else:
                grouped[config.changeset] = [config]
                units.append(grouped[config.changeset])
        return units


def diff_tree(
    tree: Tree, served: Sequence[ServedConfig], freezes: Sequence[Freeze], *, now: datetime
) -> TreeDiff:
    """Each config of the tree against the served state, then the served configs of the tree's
    namespaces that the tree lacks."""
    by_name = {(config.namespace, config.path): config for config in served}
    frozen = {freeze.namespace: freeze for freeze in freezes if freeze.active(now)}
    diffs = [_config_diff(config, by_name.get((config.namespace, config.path)), frozen)
             for config in tree.configs]  # fmt: skip
    _block_changesets(tree, diffs)
    in_tree = {(config.namespace, config.path) for config in tree.configs}
    namespaces = set(tree.namespaces)
    diffs.extend(
        ConfigDiff(
            namespace=config.namespace,
            path=config.path,
            action=Action.NOT_IN_TREE,
            file=None,
            version=None,
            stable_version=config.stable_version,
            running=config.lock,
        )
        for config in served
        if config.namespace in namespaces and (config.namespace, config.path) not in in_tree
    )
    return TreeDiff(diffs)


def _config_diff(
    config: TreeConfig, served: ServedConfig | None, frozen: dict[str, Freeze]
) -> ConfigDiff:
    version = version_id(config.value)
    stable = served.stable_version if served else None
    lock = served.lock if served else None
    schema_change = config.schema_source is not None and (
        served is None or served.schema_digest != version_id(config.schema)
    )
    diff = ConfigDiff(
        namespace=config.namespace,
        path=config.path,
        action=Action.START,
        file=config.value_source.file,
        version=version,
        stable_version=stable,
        schema_change=schema_change,
        running=lock,
        changeset=config.changeset,
        config=config,
    )
    if lock is not None and lock.version == version:
        diff.action = Action.ROLLING_OUT
    elif lock is not None:
        diff.action = Action.BLOCKED
        diff.blocked = (
            f"a rollout of version {lock.version} is running (workflow {lock.workflow_id}); "
            "halt it or let it end, then apply again"
        )
        if stable == version:
            diff.blocked = "its value is stable, but " + diff.blocked
    elif stable == version:
        diff.action = Action.UNCHANGED
    elif config.namespace in frozen and not _passes_freezes(config.rollout):
        diff.action = Action.BLOCKED
        diff.blocked = (
            f"{describe_freeze(frozen[config.namespace])}; a rollout.json with override_freeze "
            "passes it"
        )
    return diff


def _passes_freezes(rollout: dict[str, Any]) -> bool:
    return bool(rollout.get("override_freeze"))


def _block_changesets(tree: Tree, diffs: list[ConfigDiff]) -> None:
    """A changeset starts whole or not at all: one blocked config blocks its changed others."""
    by_config = {id(diff.config): diff for diff in diffs}
    for name, members in changesets(tree.configs).items():
        member_diffs = [by_config[id(config)] for config in members]
        blocked = [diff for diff in member_diffs if diff.action is Action.BLOCKED]
        if not blocked:
            continue
        for diff in member_diffs:
            if diff.action is Action.START:
                diff.action = Action.BLOCKED
                diff.blocked = (
                    f"changeset {name!r} rolls out together, and {blocked[0].name} is blocked"
                )
