"""Root fixtures: each family lives in tests/fixtures/ (database: store URLs; temporal: servers)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

pytest_plugins = ["tests.fixtures.database", "tests.fixtures.temporal"]

TESTS = Path(__file__).parent
# Folders whose files start whole stacks (subprocesses, servers, rollouts in real time), slowest
# kinds first. `make test` hands whole files to its workers in collection order (Makefile): with
# these first and the quick unit files last, the quick ones fill the workers' gaps at the end
# instead of one long file running on alone.
HEAVY_FIRST = ("packaging", "cli", "workflows", "client")
LEG_FOLDERS = {"soak": "workflows", "faults": "faults", "fuzz": "fuzz", "compose": "compose"}
"""Each CI leg's marker and the folder under tests/ its tests live in. `make test` leaves out
every leg's tests and some legs collect only their folder (`make test-faults`: tests/faults), so a
leg-marked test elsewhere could run in no leg: collection refuses it. The soak tests are
tests/workflows/test_bounded_history.py's weeks-long rollouts."""


def misplaced_leg_tests(items: Sequence[pytest.Item], tests: Path) -> list[str]:
    """The items that carry a leg's marker outside that leg's folder under `tests`, described."""
    misplaced = []
    for item in items:
        for marker, folder in LEG_FOLDERS.items():
            if item.get_closest_marker(marker) and not item.path.is_relative_to(tests / folder):
                misplaced.append(
                    f"{item.nodeid}: marked {marker}, outside tests/{folder}/ (move it there)"
                )
    return misplaced


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced = misplaced_leg_tests(items, TESTS)
    if misplaced:
        raise pytest.UsageError(
            "tests marked for a CI leg outside the leg's folder would run in no leg:\n  "
            + "\n  ".join(misplaced)
        )

    def rank(item: pytest.Item) -> int:
        folder = item.path.relative_to(TESTS).parts[0]
        return HEAVY_FIRST.index(folder) if folder in HEAVY_FIRST else len(HEAVY_FIRST)

    items.sort(key=rank)  # stable: the order within each folder and file stays
