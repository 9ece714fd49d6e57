"""Root fixtures: each family lives in tests/fixtures/ (database: store URLs; temporal: servers)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.fixtures.database", "tests.fixtures.temporal"]

TESTS = Path(__file__).parent
# Folders whose files start whole stacks (subprocesses, servers, rollouts in real time), slowest
# kinds first. `make test` hands whole files to its workers in collection order (Makefile): with
# these first and the quick unit files last, the quick ones fill the workers' gaps at the end
# instead of one long file running on alone.
HEAVY_FIRST = ("packaging", "cli", "workflows", "client")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        folder = item.path.relative_to(TESTS).parts[0]
        return HEAVY_FIRST.index(folder) if folder in HEAVY_FIRST else len(HEAVY_FIRST)

    items.sort(key=rank)  # stable: the order within each folder and file stays
