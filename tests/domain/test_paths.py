"""Config paths and namespaces (docs/contract.md, Configs and versions)."""

from __future__ import annotations

import pytest

from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem, path_problem


@pytest.mark.parametrize(
    "path",
    [
        "myproject/server_config",
        "a",
        "a/b/c/d",
        "config.v2/feature-flags_1",
        "0/9",
        "...",  # only "." and ".." are forbidden segments
        "a/.hidden",
        "x" * 255,
        "/".join(["ab"] * 85),  # 254 chars
    ],
)
def test_valid_paths(path: str) -> None:
    assert path_problem(path) is None


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("", "1-255"),
        ("x" * 256, "1-255"),
        ("a/../b", "'..'"),
        ("..", "'..'"),
        ("a/./b", "'.'"),
        (".", "'.'"),
        ("a//b", "empty segment"),
        ("/a", "empty segment"),
        ("a/", "empty segment"),
        ("MyProject/config", "a-z"),
        ("a/Config", "a-z"),
        ("a b", "a-z"),
        ("a\\b", "a-z"),
        ("caf\u00e9", "a-z"),
        ("a/b\n", "a-z"),  # a trailing newline must not slip past the pattern
        ("a\n/b", "a-z"),
        ("a:b", "a-z"),  # never a ":": the admin API names commands after one ({path}:halt)
        ("a?b", "a-z"),
    ],
)
def test_invalid_paths_say_why(path: str, fragment: str) -> None:
    problem = path_problem(path)
    assert problem is not None
    assert fragment in problem


@pytest.mark.parametrize("path", [None, 42, ["a"], b"a/b"])
def test_non_string_paths_are_refused(path: object) -> None:
    problem = path_problem(path)
    assert problem is not None
    assert "must be a string" in problem
    assert type(path).__name__ in problem


def test_default_namespace() -> None:
    assert DEFAULT_NAMESPACE == "default"
    assert namespace_problem(DEFAULT_NAMESPACE) is None


@pytest.mark.parametrize("namespace", ["default", "prod", "team-a.eu_1", "0", "a" * 63])
def test_valid_namespaces(namespace: str) -> None:
    assert namespace_problem(namespace) is None


@pytest.mark.parametrize("namespace", ["", "Prod", "-prod", ".x", "a" * 64, "a/b", "prod\n", "a b"])
def test_invalid_namespaces(namespace: str) -> None:
    problem = namespace_problem(namespace)
    assert problem is not None
    assert "namespace" in problem


def test_non_string_namespace() -> None:
    assert "must be a string" in (namespace_problem(3) or "")
