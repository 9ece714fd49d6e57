"""The import contracts of pyproject.toml ([tool.importlinter]) hold, and each fails when broken.

`make lint` runs lint-imports over the installed shape of the package (.ci/layout.py). Here a copy
of that shape (files, not links: a planted module never reaches the checkout) is checked as it is,
then once per contract with modules planted that import what that contract forbids: lint-imports,
asked for that contract alone, must call it broken and name the planted import. A contract that
could not fail would otherwise pass unnoticed.
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

CONTRACTS = {
    contract["id"]: contract["name"]
    for contract in tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "importlinter"
    ]["contracts"]
}

# contract id -> modules planted (path under the package, source) and what the contract's report
# must say of each: the planted import, or (cycles are reported between siblings) the dependency
PLANTS: dict[str, list[tuple[str, str, str]]] = {
    "layers": [
        # the model reaching up into the store
        (
            "rollout/planted.py",
            "import tempoconf.store.store\n",
            "tempoconf.rollout.planted -> tempoconf.store.store",
        ),
    ],
    "workflows-deterministic": [
        ("workflows/planted.py", "import httpx\n", "tempoconf.workflows.planted -> httpx")
    ],
    "client-independent": [
        (
            "client/_planted.py",
            "from tempoconf.store.store import Store\n",
            "tempoconf.store.store",
        ),
        # a lazy import counts as much as one at the top: it runs on the host all the same
        (
            "client/_planted_lazy.py",
            "def serve() -> None:\n    from tempoconf.api import server\n",
            "tempoconf.client._planted_lazy -> tempoconf.api",
        ),
    ],
    "no-private-imports": [
        (
            "api/planted.py",
            "from tempoconf.client import _core\n",
            "tempoconf.api.planted -> tempoconf.client._core",
        ),
    ],
    "no-import-cycles": [
        # gates already import resolution
        ("resolution/planted.py", "import tempoconf.gates.windows\n", ".resolution -> .gates"),
    ],
}


def _joined(output: str) -> str:
    """lint-imports wraps long lines: compare with the whitespace folded."""
    return " ".join(output.split())


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("layout", REPO / ".ci" / "layout.py")
    assert spec is not None and spec.loader is not None
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    base = tmp_path_factory.mktemp("import-contracts")
    layout.build(base / "links")
    copy = base / "tree"
    shutil.copytree(
        base / "links", copy, symlinks=False, ignore=shutil.ignore_patterns("__pycache__")
    )
    return copy


def _lint_imports(tree: Path, *contract: str) -> subprocess.CompletedProcess[str]:
    chosen = [argument for id_ in contract for argument in ("--contract", id_)]
    return subprocess.run(
        [LINT_IMPORTS, "--no-logo", "--no-cache", *chosen, REPO / "pyproject.toml"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_contract_has_a_planted_violation() -> None:
    assert set(PLANTS) == set(CONTRACTS)


def test_the_contracts_hold_on_the_code(tree: Path) -> None:
    done = _lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in _joined(done.stdout), done.stdout


@pytest.mark.parametrize("contract", sorted(PLANTS))
def test_a_contract_fails_when_broken(tree: Path, contract: str) -> None:
    package = tree / "tempoconf"
    for relative, source, _ in PLANTS[contract]:
        (package / relative).write_text(source, encoding="utf-8")
    try:
        done = _lint_imports(tree, contract)
    finally:
        for relative, _, _ in PLANTS[contract]:
            (package / relative).unlink()
    report = _joined(done.stdout)
    assert done.returncode != 0, done.stdout
    assert f"{CONTRACTS[contract]} BROKEN" in report, done.stdout
    for _, _, said in PLANTS[contract]:
        assert said in report, f"{said!r} is not in the report:\n{done.stdout}"
