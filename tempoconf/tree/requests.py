"""The rollout requests a tree makes, and every problem of the tree found by the request's own
validation (tempoconf.rollout.request, the one door of every rollout) and by the configs'
schemas, each traced back to its file and JSON pointer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tempoconf.problems import InvalidRequestError, Problem
from tempoconf.rollout.change_specs import MAX_CHANGES
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.schema_validation import schema_problems, value_problems
from tempoconf.tree.layout import CHANGESET_FIELD, FileProblem, Tree, TreeConfig

__all__ = [
    "Authorship",
    "changesets",
    "check_tree",
    "locate_problems",
    "rollout_request",
    "value_problems_of",
]


@dataclass(frozen=True)
class Authorship:
    """Who changed the tree and why: git HEAD's author, commit and subject, or the flags'."""

    author: str
    commit: str
    message: str
    source: str  # where they came from, for a problem's file: "git HEAD", "--author", ...


def rollout_request(configs: Sequence[TreeConfig], authorship: Authorship) -> dict[str, Any]:
    """The request that rolls `configs` out: one config's, or a changeset's (every config under
    the same rollout.json, so they share its fields)."""
    first = configs[0]
    request: dict[str, Any] = dict(first.rollout)
    if len(configs) == 1:
        request.update(namespace=first.namespace, path=first.path, value=first.value)
    else:
        request["changes"] = [
            {"namespace": config.namespace, "path": config.path, "value": config.value}
            for config in configs
        ]
    request.update(author=authorship.author, commit=authorship.commit, message=authorship.message)
    return request


def locate_problems(
    problems: Sequence[Problem], configs: Sequence[TreeConfig], authorship: Authorship
) -> list[FileProblem]:
    """A request's problems (its JSON pointers) at the files the request was made of."""
    return [_locate(problem, configs, authorship) for problem in problems]


def _locate(problem: Problem, configs: Sequence[TreeConfig], authorship: Authorship) -> FileProblem:
    parts = problem.pointer.split("/")
    config = configs[0]
    if len(parts) > 2 and parts[1] == "changes" and parts[2].isdigit():
        index = int(parts[2])
        if index < len(configs):
            config = configs[index]
            parts = ["", *parts[3:]]
    top = parts[1] if len(parts) > 1 else ""
    if top == "value":
        return config.value_source.locate("/".join(["", *parts[2:]]), problem.message)
    if top in ("path", "namespace"):
        return FileProblem(config.value_source.file, "", f"its {top}: {problem.message}")
    if top in ("author", "commit", "message"):
        return FileProblem(f"({authorship.source})", f"/{top}", problem.message)
    if config.rollout_source is not None:
        return config.rollout_source.locate("/".join(parts), problem.message)
    return FileProblem(config.value_source.file, problem.pointer, problem.message)


def value_problems_of(config: TreeConfig, schema: Any) -> list[FileProblem]:
    """The config's value against `schema` (its own file's, or the served one)."""
    return [
        config.value_source.locate(problem.pointer, problem.message)
        for problem in value_problems(schema, config.value, pointer_prefix="")
    ]


def check_tree(tree: Tree, authorship: Authorship) -> list[FileProblem]:
    """Every problem of the tree's requests and schemas (its reading's problems are in
    `tree.problems`). Each config is checked as its own rollout and, in a changeset, as part of
    the changeset's, whatever has changed: a bad file anywhere is found before anything starts."""
    problems: list[FileProblem] = []
    for config in tree.configs:
        if config.schema_source is not None:
            problems.extend(
                config.schema_source.locate(p.pointer, p.message)
                for p in schema_problems(config.schema)
            )
            if not any(p.file == config.schema_source.file for p in problems):
                problems.extend(value_problems_of(config, config.schema))
        problems.extend(_request_problems([config], authorship))
    for name, members in changesets(tree.configs).items():
        if len(members) > MAX_CHANGES:
            source = members[0].rollout_source
            assert source is not None  # a changeset is named in a rollout.json
            problems.append(
                FileProblem(
                    source.file,
                    f"/{CHANGESET_FIELD}",
                    f"changeset {name!r} has {len(members)} configs: a changeset rolls out "
                    f"at most {MAX_CHANGES} together",
                )
            )
        elif len(members) > 1:
            problems.extend(_request_problems(members, authorship))
    return _unique(problems)


def changesets(configs: Sequence[TreeConfig]) -> dict[str, list[TreeConfig]]:
    """The tree's changesets by name, each with its configs in the tree's order."""
    found: dict[str, list[TreeConfig]] = {}
    for config in configs:
        if config.changeset is not None:
            found.setdefault(config.changeset, []).append(config)
    return found


def _request_problems(configs: Sequence[TreeConfig], authorship: Authorship) -> list[FileProblem]:
    try:
        parse_rollout_request(rollout_request(configs, authorship))
    except InvalidRequestError as error:
        return locate_problems(error.problems, configs, authorship)
    return []


def _unique(problems: list[FileProblem]) -> list[FileProblem]:
    """Each problem once: a rollout.json's problem is found again by every config below it."""
    return sorted(dict.fromkeys(problems), key=lambda p: (p.file, p.pointer, p.message))
