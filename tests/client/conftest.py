"""Client fixtures: a live API over a fresh SQLite store, and a cache directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.client.live_api import LiveApi, running_api


@pytest.fixture
def live_api(sqlite_store: Store, tmp_path: Path) -> Iterator[LiveApi]:
    with running_api(sqlite_store, Settings(data_dir=tmp_path / "api")) as api:
        yield api


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"
