"""The import contracts of pyproject.toml ([tool.importlinter]) catch what they forbid.

`make lint` shows they hold on the checkout; here a copy of the package's installed shape (the
tree of links .ci/layout.py builds, with the client copied instead of linked) gets a module that
breaks the client SDK's independence, and lint-imports must fail naming that contract.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CLIENT_CONTRACT = "client-independent"
CLIENT_CONTRACT_NAME = "The client SDK imports nothing of the server side"


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """The installed shape of the package, its client a copy this test may add modules to."""
    tree = tmp_path / "layout"
    subprocess.run([sys.executable, REPO / ".ci" / "layout.py", tree], check=True)
    client = tree / "tempoconf" / "client"
    client.unlink()  # a link into the checkout: never write through it
    shutil.copytree(
        REPO / "tempoconf" / "client", client, ignore=shutil.ignore_patterns("__pycache__")
    )
    return tree


def lint_client_contract(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            LINT_IMPORTS,
            "--no-logo",
            "--no-cache",
            "--contract",
            CLIENT_CONTRACT,
            REPO / "pyproject.toml",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_client_contract_holds_on_the_checkout(layout: Path) -> None:
    result = lint_client_contract(layout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{CLIENT_CONTRACT_NAME} KEPT" in result.stdout


@pytest.mark.parametrize(
    ("source", "imported"),
    [
        ("from tempoconf.store.store import Store\n", "tempoconf.store.store"),
        # A lazy import counts as much as one at the top: it runs on the host all the same.
        ("def serve() -> None:\n    from tempoconf.api import server\n", "tempoconf.api"),
    ],
)
def test_the_client_contract_fails_when_a_client_module_imports_the_server_side(
    layout: Path, source: str, imported: str
) -> None:
    (layout / "tempoconf" / "client" / "_leak.py").write_text(source, encoding="utf-8")
    result = lint_client_contract(layout)
    assert result.returncode != 0, result.stdout
    assert f"{CLIENT_CONTRACT_NAME} BROKEN" in result.stdout
    assert "tempoconf.client._leak -> " + imported in result.stdout
