"""A protoconf repository, read as it is: `DIR/materialized_config/<path>.materialized_JSON`, the
files protoconf's compiler writes (protoconf's ProtoconfValue in protobuf JSON):

    {"protoFile": "crawler/crawler.proto",
     "value": {"@type": "type.googleapis.com/CrawlerService", ...},
     "rolloutConfig": {"defaultCooldownTime": "2s", "stages": [{"channel": "alpha"}, ...]}}

The config's value is `value` without `@type`; `rolloutConfig` becomes the request's stages and
defaults (its `namespace` the config's namespace, else `default`); a config without one is
promoted at once, as protoconf inserts it. protobuf JSON names fields in lowerCamelCase and
accepts their proto names too; both are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem, path_problem
from tempoconf.tree.layout import FileProblem, Source, Tree, TreeConfig, read_json, relative

__all__ = ["MATERIALIZED_FOLDER", "MATERIALIZED_SUFFIX", "read_protoconf_tree"]

MATERIALIZED_FOLDER = "materialized_config"
MATERIALIZED_SUFFIX = ".materialized_JSON"

# ConfigRollout's fields (protoconf's datatypes/proto/v1/protoconf_value.proto) → the request's.
_ROLLOUT_FIELDS = {
    "defaultCooldownTime": "default_cooldown_time",
    "default_cooldown_time": "default_cooldown_time",
    "defaultExpirationTime": "default_expiration_time",
    "default_expiration_time": "default_expiration_time",
    "stages": "stages",
}
_STAGE_FIELDS = {
    "channel": "channel",
    "percentile": "percentile",
    "labels": "labels",
    "manual": "manual",
    "cooldown": "cooldown",
    "expiration": "expiration",
}
# What protoconf's inserter writes into a stage as it goes: no part of the request.
_INSERTER_STAGE_FIELDS = {"expiresAt", "expires_at", "version"}
_VALUE_FIELDS = {"protoFile", "proto_file", "value", "rolloutConfig", "rollout_config", "metadata"}


def read_protoconf_tree(root: Path) -> Tree:
    tree = Tree(root=root, kind="protoconf")
    folder = root / MATERIALIZED_FOLDER
    for file in sorted(folder.rglob("*" + MATERIALIZED_SUFFIX)):
        if any(part.startswith(".") for part in file.relative_to(folder).parts):
            continue
        config = _read_materialized(tree, folder, file)
        if config is not None:
            tree.configs.append(config)
    tree.problems.sort(key=lambda problem: (problem.file, problem.pointer))
    return tree


def _read_materialized(tree: Tree, folder: Path, file: Path) -> TreeConfig | None:
    name = relative(tree.root, file)
    problems = tree.problems
    read, document = read_json(tree.root, file, problems)
    if not read:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("value"), dict):
        problems.append(
            FileProblem(
                name, "", 'is not a materialized config: no {"value": {"@type": ...}} object'
            )
        )
        return None
    for key in sorted(set(document) - _VALUE_FIELDS):
        problems.append(FileProblem(name, f"/{key}", "is no field of a materialized config"))
    path = file.relative_to(folder).as_posix()[: -len(MATERIALIZED_SUFFIX)]
    value_key = "value"
    value = {key: item for key, item in document[value_key].items() if key != "@type"}
    rollout_key = "rolloutConfig" if "rolloutConfig" in document else "rollout_config"
    raw_rollout = document.get(rollout_key)
    namespace = DEFAULT_NAMESPACE
    rollout: dict[str, Any] = {}
    keys: dict[str, str] = {}
    if raw_rollout is not None:
        if not isinstance(raw_rollout, dict):
            problems.append(FileProblem(name, f"/{rollout_key}", "is an object (ConfigRollout)"))
            return None
        namespace = raw_rollout.get("namespace") or DEFAULT_NAMESPACE
        rollout, keys = _rollout_request(name, rollout_key, raw_rollout, problems)
    wrong = namespace_problem(namespace) or path_problem(path)
    if wrong is not None:
        problems.append(FileProblem(name, "", f"does not name a tempoconf config: {wrong}"))
        return None
    return TreeConfig(
        namespace=namespace,
        path=path,
        value=value,
        value_source=Source(name, f"/{value_key}"),
        rollout=rollout,
        rollout_source=Source(name, f"/{rollout_key}", keys) if raw_rollout is not None else None,
    )


def _rollout_request(
    name: str, rollout_key: str, raw: dict[str, Any], problems: list[FileProblem]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The request fields of a ConfigRollout, and the file's name of each where it differs."""
    request: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for key, item in raw.items():
        if key == "namespace":
            continue
        field = _ROLLOUT_FIELDS.get(key)
        if field is None:
            problems.append(
                FileProblem(name, f"/{rollout_key}/{key}", "is no field of a ConfigRollout")
            )
            continue
        keys[field] = key
        request[field] = _stages(item) if field == "stages" else item
    return request, keys


def _stages(raw: Any) -> Any:
    """The stages as the request takes them: the inserter's own fields dropped, and proto3's
    empty defaults too (an empty channel is no channel)."""
    if not isinstance(raw, list):
        return raw  # the request's validation says what is wrong
    stages = []
    for stage in raw:
        if not isinstance(stage, dict):
            stages.append(stage)
            continue
        stages.append(
            {
                _STAGE_FIELDS.get(key, key): item
                for key, item in stage.items()
                if key not in _INSERTER_STAGE_FIELDS and item not in ("", None, {})
            }
        )
    return stages
