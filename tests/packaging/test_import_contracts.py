"""The import contracts of pyproject.toml hold, and each one fails when broken.

`make lint` runs lint-imports over the installed shape of the package (.ci/layout.py). Here a copy
of that shape gets one planted module per contract, each importing what its contract forbids, and
lint-imports must name every contract broken, with the planted import; the same run without the
plants keeps them all. A contract that could not fail would pass here unnoticed otherwise.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
CONTRACTS = [contract["name"] for contract in CONFIG["tool"]["importlinter"]["contracts"]]

# contract name (its start) -> the planted module, relative to the package, and its import
PLANTS: dict[str, tuple[str, str]] = {
    "Layers": ("rollout/_planted_layers.py", "import tempoconf.store\n"),
    "Workflows are deterministic": ("workflows/_planted_determinism.py", "import httpx\n"),
}


def _layout(dest: Path) -> Path:
    """A real copy (not links) of the installed shape, so planting a module leaves the checkout alone."""
    spec = importlib.util.spec_from_file_location("layout", REPO / ".ci" / "layout.py")
    assert spec is not None and spec.loader is not None
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    links = dest / "links"
    layout.build(links)
    tree = dest / "tree"
    shutil.copytree(
        links, tree, symlinks=False, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    return tree


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", "--config", str(REPO / "pyproject.toml")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _verdicts(output: str) -> dict[str, str]:
    """Each contract's verdict line (lint-imports wraps long names: the lines are joined first)."""
    joined = " ".join(output.split())
    verdicts = {}
    for name in CONTRACTS:
        for verdict in ("KEPT", "BROKEN"):
            if f"{name} {verdict}" in joined:
                verdicts[name] = verdict
    return verdicts


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _layout(tmp_path_factory.mktemp("import-contracts"))


def test_every_contract_has_a_plant() -> None:
    for name in CONTRACTS:
        assert any(name.startswith(prefix) for prefix in PLANTS), (
            f"contract {name!r} has no planted violation in this test: add one to PLANTS"
        )


def test_contracts_hold_on_the_code(tree: Path) -> None:
    done = _lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _verdicts(done.stdout) == dict.fromkeys(CONTRACTS, "KEPT"), done.stdout


def test_each_contract_fails_when_broken(tree: Path) -> None:
    for relative, source in PLANTS.values():
        (tree / "tempoconf" / relative).write_text(source, encoding="utf-8")
    try:
        done = _lint_imports(tree)
    finally:
        for relative, _ in PLANTS.values():
            (tree / "tempoconf" / relative).unlink()
    assert done.returncode != 0, done.stdout
    assert _verdicts(done.stdout) == dict.fromkeys(CONTRACTS, "BROKEN"), done.stdout
    joined = " ".join(done.stdout.split())
    for relative, _ in PLANTS.values():
        planted = "tempoconf." + relative.removesuffix(".py").replace("/", ".")
        assert planted in joined, f"{planted} is not named among the violations:\n{done.stdout}"
