"""Collection refuses a test marked for a CI leg outside that leg's folder (tests/conftest.py):
such a test would run in no leg. Checked on a throwaway tree with pytest's own `pytester`."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
from pathlib import Path

from tests.conftest import misplaced_leg_tests

import pytest


def pytest_collection_modifyitems(items):
    misplaced = misplaced_leg_tests(items, Path(__file__).parent)
    if misplaced:
        raise pytest.UsageError("misplaced:\\n" + "\\n".join(misplaced))
"""
INI = """
[pytest]
addopts = --strict-markers
asyncio_default_fixture_loop_scope = function
markers =
    soak
    faults
    fuzz
    compose
"""
MARKED = """
import pytest

@pytest.mark.{marker}
def test_marked():
    pass
"""


@pytest.mark.parametrize(
    ("marker", "folder"),
    [("faults", "faults"), ("compose", "compose"), ("fuzz", "fuzz"), ("soak", "workflows")],
)
def test_a_leg_test_in_its_folder_is_collected(
    pytester: pytest.Pytester, marker: str, folder: str
) -> None:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.mkpydir(folder).joinpath("test_leg.py").write_text(MARKED.format(marker=marker))
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines([f"{folder}/test_leg.py::test_marked"])


@pytest.mark.parametrize("marker", ["faults", "compose", "fuzz", "soak"])
def test_a_leg_test_outside_its_folder_fails_collection(
    pytester: pytest.Pytester, marker: str
) -> None:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.mkpydir("api").joinpath("test_leg.py").write_text(MARKED.format(marker=marker))
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*api/test_leg.py::test_marked: marked {marker}, outside*"])
