"""Configs as code, the domain part (tempoconf.tree): a tree of files read with every problem at
its file and pointer, the nearest rollout.json, changesets, protoconf's materialized configs, and
the diff against a served state."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tempoconf.canonical import version_id
from tempoconf.gates.freezes import Freeze
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.store.records import LockRecord, ServedConfig
from tempoconf.tree.diff import Action, diff_tree
from tempoconf.tree.layout import FileProblem
from tempoconf.tree.reader import read_tree
from tempoconf.tree.requests import Authorship, check_tree, rollout_request

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
BY = Authorship(
    author="alice@example.com", commit="3f2a9c1", message="raise limits", source="git HEAD"
)
STAGES = {"stages": [{"channel": "canary"}, {"percentile": 10}], "default_cooldown_time": "5m"}


def write(root: Path, relpath: str, document: Any) -> None:
    file = root / relpath
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(document if isinstance(document, str) else json.dumps(document))


def served(namespace: str, path: str, **fields: Any) -> ServedConfig:
    return ServedConfig(
        namespace=namespace,
        path=path,
        stable_version=fields.get("stable_version"),
        schema_digest=fields.get("schema_digest"),
        lock=fields.get("lock"),
    )


def lock(namespace: str, path: str, version: str) -> LockRecord:
    return LockRecord(namespace, path, f"rollout:{namespace}/{path}", "run-1", version, NOW)


def test_a_tree_reads_namespaces_paths_schemas_and_the_nearest_rollout_json(
    tmp_path: Path,
) -> None:
    write(tmp_path, "rollout.json", STAGES)
    write(tmp_path, "default/myproject/server.json", {"port": 8080})
    write(tmp_path, "default/myproject/server.schema.json", {"type": "object"})
    write(tmp_path, "team-a/rollout.json", {"stages": [{"percentile": 50}]})
    write(tmp_path, "team-a/deep/er/limits.json", {"rps": 10})
    write(tmp_path, "team-a/README.md", "not a config")
    write(tmp_path, ".git/config.json", {"ignored": True})

    tree = read_tree(tmp_path)

    assert tree.problems == []
    assert tree.kind == "tempoconf"
    assert [c.name for c in tree.configs] == ["default/myproject/server", "team-a/deep/er/limits"]
    server, limits = tree.configs
    assert server.schema == {"type": "object"}
    assert server.rollout == STAGES and server.rollout_source is not None
    assert server.rollout_source.file == "rollout.json"
    assert limits.rollout == {"stages": [{"percentile": 50}]}
    assert limits.rollout_source is not None and limits.rollout_source.file == "team-a/rollout.json"
    assert tree.namespaces == ["default", "team-a"]
    request = parse_rollout_request(rollout_request([server], BY))
    assert (request.namespace, request.path, request.value) == (
        "default",
        "myproject/server",
        {"port": 8080},
    )
    assert (request.author, request.commit, request.message) == (
        "alice@example.com",
        "3f2a9c1",
        "raise limits",
    )


def test_every_problem_of_every_file_is_listed_with_its_file_and_pointer(tmp_path: Path) -> None:
    write(tmp_path, "default/rollout.json", {"stages": [{"percentile": 250}], "value": 1})
    write(tmp_path, "default/a.json", {"port": "eighty"})
    write(tmp_path, "default/a.schema.json", {"properties": {"port": {"type": "integer"}}})
    write(tmp_path, "default/broken.json", "{not json")
    write(tmp_path, "default/Upper.json", {})
    write(tmp_path, "default/orphan.schema.json", {})
    write(tmp_path, "loose.json", {})

    tree = read_tree(tmp_path)
    problems = [*tree.problems, *check_tree(tree, BY)]

    def at(file: str, pointer: str) -> str:
        found = [p.message for p in problems if (p.file, p.pointer) == (file, pointer)]
        assert found, f"no problem at {file} {pointer}: {problems}"
        return found[0]

    assert "not in rollout.json" in at("default/rollout.json", "/value")
    assert "100" in at("default/rollout.json", "/stages/0/percentile")
    assert "integer" in at("default/a.json", "/port")
    assert "not valid JSON" in at("default/broken.json", "")
    assert "a-z" in at("default/Upper.json", "")
    assert "default/orphan.json is missing" in at("default/orphan.schema.json", "")
    assert "namespace folder" in at("loose.json", "")
    # the rollout.json's problem once, though two configs are below it
    assert len([p for p in problems if p.pointer == "/stages/0/percentile"]) == 1
    assert str(FileProblem("default/a.json", "/port", "x")) == "default/a.json /port: x"


def test_a_changeset_is_the_configs_under_one_rollout_json(tmp_path: Path) -> None:
    write(tmp_path, "default/web/rollout.json", {**STAGES, "changeset": "web-v2"})
    write(tmp_path, "default/web/frontend.json", {"api": "v2"})
    write(tmp_path, "default/web/backend.json", {"accepts": ["v2"]})
    write(tmp_path, "default/other.json", {"x": 1})
    tree = read_tree(tmp_path)
    assert tree.problems == [] and check_tree(tree, BY) == []
    backend, frontend = (c for c in tree.configs if c.changeset == "web-v2")
    request = parse_rollout_request(rollout_request([backend, frontend], BY))
    assert request.changes is not None
    assert [c.path for c in request.changes] == ["web/backend", "web/frontend"]

    diff = diff_tree(tree, [served("default", "web/backend", stable_version="0" * 16)], [], now=NOW)
    [unit, single] = sorted(diff.units(), key=len, reverse=True)
    assert [c.name for c in unit] == ["default/web/backend", "default/web/frontend"]
    assert [c.name for c in single] == ["default/other"]


def test_one_changeset_named_by_two_rollout_files_is_a_problem(tmp_path: Path) -> None:
    write(tmp_path, "default/a/rollout.json", {"changeset": "both"})
    write(tmp_path, "default/a/x.json", 1)
    write(tmp_path, "default/b/rollout.json", {"changeset": "both"})
    write(tmp_path, "default/b/y.json", 2)
    [problem] = read_tree(tmp_path).problems
    assert (problem.file, problem.pointer) == ("default/b/rollout.json", "/changeset")
    assert "declared in default/a/rollout.json" in problem.message


def test_the_diff_says_what_apply_would_do_with_each_config(tmp_path: Path) -> None:
    write(tmp_path, "default/same.json", {"v": 1})
    write(tmp_path, "default/new.json", {"v": 2})
    write(tmp_path, "default/first.json", {"v": 3})
    write(tmp_path, "default/flying.json", {"v": 4})
    write(tmp_path, "default/held.json", {"v": 5})
    write(tmp_path, "default/typed.json", {"v": 1})
    write(tmp_path, "default/typed.schema.json", {"type": "object"})
    write(tmp_path, "frozen/x.json", {"v": 6})
    tree = read_tree(tmp_path)
    state = [
        served("default", "same", stable_version=version_id({"v": 1})),
        served("default", "new", stable_version=version_id({"v": 0})),
        served("default", "flying", lock=lock("default", "flying", version_id({"v": 4}))),
        served("default", "held", lock=lock("default", "held", "f" * 16)),
        served("default", "typed", stable_version=version_id({"v": 1}), schema_digest="0" * 16),
        served("default", "gone", stable_version="1" * 16),
        served("elsewhere", "ignored", stable_version="2" * 16),
    ]
    freeze = Freeze(
        id=1, namespace="frozen", reason="holidays", by="sre", started_at=NOW - timedelta(hours=1)
    )

    diff = diff_tree(tree, state, [freeze], now=NOW)
    actions = {c.name: c.action for c in diff.configs}

    assert actions == {
        "default/first": Action.START,
        "default/flying": Action.ROLLING_OUT,
        "default/held": Action.BLOCKED,
        "default/new": Action.START,
        "default/same": Action.UNCHANGED,
        "default/typed": Action.UNCHANGED,
        "frozen/x": Action.BLOCKED,
        "default/gone": Action.NOT_IN_TREE,
    }
    by_name = {c.name: c for c in diff.configs}
    assert by_name["default/typed"].schema_change and by_name["default/typed"].pending
    assert "ffffffffffffffff is running" in by_name["default/held"].blocked
    assert "frozen by sre" in by_name["frozen/x"].blocked
    assert diff.pending
    assert [[c.name for c in unit] for unit in diff.units()] == [["default/first"], ["default/new"]]

    # the same tree once applied: nothing to do
    applied = [
        served(c.namespace, c.path, stable_version=version_id(c.value),
               schema_digest=version_id(c.schema) if c.schema is not None else None)
        for c in tree.configs
    ]  # fmt: skip
    assert not diff_tree(tree, applied, [], now=NOW).pending


def test_an_override_freeze_passes_the_freeze(tmp_path: Path) -> None:
    write(tmp_path, "frozen/rollout.json", {"override_freeze": {"reason": "the fix"}})
    write(tmp_path, "frozen/x.json", {"v": 6})
    freeze = Freeze(1, "frozen", "r", "sre", NOW - timedelta(hours=1))
    [config] = diff_tree(read_tree(tmp_path), [], [freeze], now=NOW).configs
    assert config.action is Action.START


# -- protoconf ---------------------------------------------------------------------------------
MATERIALIZED = {
    "protoFile": "crawler/crawler.proto",
    "value": {
        "@type": "type.googleapis.com/CrawlerService",
        "crawlers": [{"userAgent": "Linux/", "httpTimeout": 30}],
        "logLevel": 2,
    },
    "rolloutConfig": {
        "defaultCooldownTime": "2s",
        "defaultExpirationTime": {"seconds": 600},
        "stages": [
            {"channel": "alpha"},
            {"percentile": 10, "cooldown": "1.500s", "labels": {"zone": "eu"}},
            {"channel": "beta", "manual": True, "expiresAt": "2026-12-04T12:00:00Z"},
        ],
    },
}


def test_a_protoconf_materialized_config_is_read_as_it_is(tmp_path: Path) -> None:
    write(tmp_path, "materialized_config/crawler/text_crawler.materialized_JSON", MATERIALIZED)
    plain = {"protoFile": "x.proto", "value": {"@type": "type.googleapis.com/X", "on": True}}
    write(tmp_path, "materialized_config/flags/simple.materialized_JSON", plain)
    namespaced = {**MATERIALIZED, "rolloutConfig": {"namespace": "team-a"}}
    write(tmp_path, "materialized_config/team/limits.materialized_JSON", namespaced)
    write(tmp_path, "src/crawler/text_crawler.pconf", "def main(): ...")

    tree = read_tree(tmp_path)

    assert tree.kind == "protoconf" and tree.problems == []
    assert check_tree(tree, BY) == []
    crawler, simple, limits = tree.configs
    assert crawler.name == "default/crawler/text_crawler"
    assert crawler.value == {
        "crawlers": [{"userAgent": "Linux/", "httpTimeout": 30}],
        "logLevel": 2,
    }
    request = parse_rollout_request(rollout_request([crawler], BY))
    assert request.default_cooldown_time == timedelta(seconds=2)
    assert request.default_expiration_time == timedelta(seconds=600)
    canary, tenth, beta = request.stages
    assert canary.channel == "alpha"
    assert (tenth.percentile, tenth.cooldown, tenth.labels) == (
        10,
        timedelta(seconds=1.5),
        {"zone": "eu"},
    )
    assert beta.manual
    assert simple.rollout == {} and simple.value == {"on": True}  # promoted at once
    assert limits.name == "team-a/team/limits"


def test_a_protoconf_problem_points_into_its_file(tmp_path: Path) -> None:
    bad = {
        **MATERIALIZED,
        "rolloutConfig": {"defaultCooldownTime": "soon", "stages": [{"percentile": 300}], "x": 1},
    }
    write(tmp_path, "materialized_config/crawler/bad.materialized_JSON", bad)
    tree = read_tree(tmp_path)
    problems = [*tree.problems, *check_tree(tree, BY)]
    file = "materialized_config/crawler/bad.materialized_JSON"
    pointers = {p.pointer for p in problems if p.file == file}
    assert pointers == {
        "/rolloutConfig/x",
        "/rolloutConfig/defaultCooldownTime",
        "/rolloutConfig/stages/0/percentile",
    }, problems


@pytest.mark.parametrize("name", ["rollout.json", "a.schema.json"])
def test_reserved_names_are_no_configs(tmp_path: Path, name: str) -> None:
    write(tmp_path, f"default/{name}", {})
    tree = read_tree(tmp_path)
    assert tree.configs == []
