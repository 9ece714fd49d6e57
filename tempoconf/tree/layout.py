"""A tree of config files, read (docs/how-to/configs-as-code.md, The layout):

    DIR/<namespace>/<config path>.json          a config's value
    DIR/<namespace>/<config path>.schema.json   its JSON Schema
    DIR/.../rollout.json                        the rest of the rollout request, for every config
                                                below it: the nearest one wins

A protoconf repository (a `materialized_config/` folder in DIR) is read by
tempoconf.tree.protoconf instead (tempoconf.tree.reader chooses). Reading never stops at the
first problem: every file is read and every problem is kept, with its file and JSON pointer, so
one run lists them all."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tempoconf.paths import namespace_problem, path_problem

__all__ = [
    "CHANGESET_FIELD",
    "CONFIG_SUFFIX",
    "ROLLOUT_FILE",
    "SCHEMA_SUFFIX",
    "FileProblem",
    "Source",
    "Tree",
    "TreeConfig",
    "TreeError",
    "read_json",
    "read_layout_tree",
    "relative",
]

CONFIG_SUFFIX = ".json"
SCHEMA_SUFFIX = ".schema.json"
ROLLOUT_FILE = "rollout.json"
CHANGESET_FIELD = "changeset"
# What the tree itself says, so a rollout.json may not: the config (its file's place), and who
# changed it and why (git HEAD, or --author, --commit, --message).
TREE_FIELDS = {
    "path": "the config's path is its file's path below its namespace folder",
    "namespace": "the namespace is the config file's top folder",
    "value": "the value is the config file's content",
    "version": "a tree rolls out values; `tempoconf rollback` rolls back to a version",
    "changes": "configs that roll out together name one 'changeset' in their rollout.json",
    "author": "the author is git HEAD's author, or --author",
    "commit": "the commit is git HEAD, or --commit",
    "message": "the message is git HEAD's subject, or --message",
}
_CHANGESET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


class TreeError(Exception):
    """The tree cannot be read at all (DIR missing, not a folder)."""


@dataclass(frozen=True)
class FileProblem:
    """One thing wrong in the tree: the file (relative to DIR), a JSON pointer into it, why."""

    file: str
    pointer: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file} {self.pointer}" if self.pointer else self.file
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class Source:
    """Where a part of a config's request was read: a file (relative to DIR) and the pointer of
    that part in it ("" for the whole file). `keys` maps a request field to the file's own name
    for it where they differ (protoconf's camelCase)."""

    file: str
    pointer: str = ""
    keys: dict[str, str] = field(default_factory=dict)

    def locate(self, pointer: str, message: str) -> FileProblem:
        """A problem at `pointer` of the request part read from here."""
        parts = pointer.split("/")
        if len(parts) > 1 and parts[1] in self.keys:
            parts[1] = self.keys[parts[1]]
        return FileProblem(self.file, self.pointer + "/".join(parts), message)


@dataclass(frozen=True)
class TreeConfig:
    """One config of the tree: its value, its schema (if the tree has one) and the request fields
    of its nearest rollout.json (empty without one: the value is promoted at once)."""

    namespace: str
    path: str
    value: Any
    value_source: Source
    schema: Any | None = None
    schema_source: Source | None = None
    rollout: dict[str, Any] = field(default_factory=dict)
    rollout_source: Source | None = None
    changeset: str | None = None

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.path}"


@dataclass
class Tree:
    """Every config read from DIR, and every problem found reading it."""

    root: Path
    kind: str  # "tempoconf" or "protoconf"
    configs: list[TreeConfig] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)

    @property
    def namespaces(self) -> list[str]:
        return sorted({config.namespace for config in self.configs})


def read_json(root: Path, file: Path, problems: list[FileProblem]) -> tuple[bool, Any]:
    """(True, the document), or (False, None) with the reason in `problems`."""
    name = relative(root, file)
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        problems.append(FileProblem(name, "", f"is not UTF-8 text: {error.reason}"))
        return False, None
    except OSError as error:
        problems.append(FileProblem(name, "", f"cannot be read: {error.strerror or error}"))
        return False, None
    try:
        return True, json.loads(text)
    except json.JSONDecodeError as error:
        problems.append(
            FileProblem(
                name,
                "",
                f"is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})",
            )
        )
        return False, None
    except RecursionError:
        problems.append(FileProblem(name, "", "is nested too deeply to read"))
        return False, None


def relative(root: Path, file: Path) -> str:
    return file.relative_to(root).as_posix()


def read_layout_tree(root: Path) -> Tree:
    """The tree at `root` in tempoconf's own layout (tempoconf.tree.reader decides which)."""
    tree = Tree(root=root, kind="tempoconf")
    rollouts = _RolloutFiles(root, tree.problems)
    schemas: dict[Path, Path] = {}
    values: list[Path] = []
    for file in _files(root):
        if file.name == ROLLOUT_FILE:
            continue  # read when a config below it needs it
        if file.name.endswith(SCHEMA_SUFFIX):
            schemas[file.with_name(file.name[: -len(SCHEMA_SUFFIX)] + CONFIG_SUFFIX)] = file
        elif file.name.endswith(CONFIG_SUFFIX):
            values.append(file)
    for file in values:
        config = _read_config(tree, rollouts, file, schemas.pop(file, None))
        if config is not None:
            tree.configs.append(config)
    for config_file, schema_file in sorted(schemas.items()):
        tree.problems.append(
            FileProblem(
                relative(root, schema_file),
                "",
                f"is a schema without its config: {relative(root, config_file)} is missing",
            )
        )
    rollouts.check_changesets()
    tree.problems.sort(key=lambda problem: (problem.file, problem.pointer))
    return tree


def _files(root: Path) -> Iterator[Path]:
    """Every file below `root`, in a stable order; hidden files and folders (.git) skipped."""
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            yield from _files(entry)
        elif entry.is_file():
            yield entry


def _read_config(
    tree: Tree, rollouts: _RolloutFiles, file: Path, schema_file: Path | None
) -> TreeConfig | None:
    root = tree.root
    name = relative(root, file)
    parts = file.relative_to(root).parts
    if len(parts) < 2:
        tree.problems.append(
            FileProblem(
                name,
                "",
                "is not in a namespace folder: a config's file is DIR/<namespace>/<path>.json",
            )
        )
        return None
    namespace = parts[0]
    path = "/".join(parts[1:])[: -len(CONFIG_SUFFIX)]
    wrong = namespace_problem(namespace) or path_problem(path)
    if wrong is not None:
        tree.problems.append(FileProblem(name, "", f"does not name a config: {wrong}"))
        return None
    read, value = read_json(root, file, tree.problems)
    schema: Any = None
    schema_source = None
    if schema_file is not None:
        schema_read, schema = read_json(root, schema_file, tree.problems)
        schema_source = Source(relative(root, schema_file)) if schema_read else None
    rollout = rollouts.nearest(file.parent)
    if not read:
        return None
    return TreeConfig(
        namespace=namespace,
        path=path,
        value=value,
        value_source=Source(name),
        schema=schema if schema_source is not None else None,
        schema_source=schema_source,
        rollout=dict(rollout.fields) if rollout else {},
        rollout_source=Source(rollout.file) if rollout else None,
        changeset=rollout.changeset if rollout else None,
    )


@dataclass(frozen=True)
class _Rollout:
    file: str
    fields: dict[str, Any]
    changeset: str | None


class _RolloutFiles:
    """The rollout.json files of the tree, each read once, and the nearest one of a folder."""

    def __init__(self, root: Path, problems: list[FileProblem]) -> None:
        self._root = root
        self._problems = problems
        self._read: dict[Path, _Rollout | None] = {}

    def nearest(self, folder: Path) -> _Rollout | None:
        while True:
            found = self._at(folder)
            if found is not None or folder == self._root:
                return found
            folder = folder.parent

    def _at(self, folder: Path) -> _Rollout | None:
        if folder not in self._read:
            file = folder / ROLLOUT_FILE
            self._read[folder] = self._parse(file) if file.is_file() else None
        return self._read[folder]

    def _parse(self, file: Path) -> _Rollout | None:
        name = relative(self._root, file)
        read, document = read_json(self._root, file, self._problems)
        if not read:
            return None
        if not isinstance(document, dict):
            self._problems.append(
                FileProblem(
                    name,
                    "",
                    "is a JSON object of rollout request fields, not " + type(document).__name__,
                )
            )
            return None
        fields = dict(document)
        for key, why in TREE_FIELDS.items():
            if key in fields:
                self._problems.append(FileProblem(name, f"/{key}", f"not in rollout.json: {why}"))
                del fields[key]
        changeset = fields.pop(CHANGESET_FIELD, None)
        if changeset is not None and not (
            isinstance(changeset, str) and _CHANGESET_NAME.fullmatch(changeset)
        ):
            self._problems.append(
                FileProblem(
                    name,
                    f"/{CHANGESET_FIELD}",
                    "a changeset's name is 1-63 characters of a-z, 0-9, '.', '_' and '-', "
                    f"starting with a letter or digit, not {changeset!r}",
                )
            )
            changeset = None
        return _Rollout(name, fields, changeset)

    def check_changesets(self) -> None:
        """A changeset is declared by one rollout.json: its configs share its one request."""
        declared: dict[str, str] = {}
        for rollout in self._read.values():
            if rollout is None or rollout.changeset is None:
                continue
            first = declared.setdefault(rollout.changeset, rollout.file)
            if first != rollout.file:
                self._problems.append(
                    FileProblem(
                        rollout.file,
                        f"/{CHANGESET_FIELD}",
                        f"changeset {rollout.changeset!r} is declared in {first} already: the "
                        "configs of a changeset share one rollout.json",
                    )
                )
