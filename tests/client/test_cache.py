"""The last good value on disk: written atomically, served at start and during an outage."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tempoconf.client import ConfigClient, write_file_atomically
from tests.api.helpers import make_stable
from tests.client.helpers import PATH, stable_served
from tests.client.live_api import LiveApi
from tests.fixtures.waiting import eventually_sync

FAST = {"poll_interval": 0.1, "min_interval": 0.05, "backoff_base": 0.05, "backoff_cap": 0.2}


def cache_files(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.iterdir()) if cache_dir.exists() else []


def test_cache_file_is_written_and_served_at_start(live_api: LiveApi, cache_dir: Path) -> None:
    stable = stable_served(live_api, {"v": 1})
    first = ConfigClient(live_api.url, PATH, client_id="h1", cache_dir=cache_dir)
    try:
        first.get()
    finally:
        first.close()

    [file] = cache_files(cache_dir)  # one file, no temporary left behind
    document = json.loads(file.read_text())
    assert document["config"]["version"] == stable.version
    assert document["config"]["value"] == {"v": 1}
    assert document["identity"]["client"] == "h1"
    assert document["etag"].startswith('W/"')
    assert file.stat().st_mode & 0o777 == 0o600

    # A new process, the API gone: the cached value is there before any request, with its age.
    live_api.stop()
    second = ConfigClient(live_api.url, PATH, client_id="h1", cache_dir=cache_dir, timeout=2)
    try:
        at_start = second.current
        served = second.get()
    finally:
        second.close()
    assert at_start is not None and at_start.source == "cache"
    assert (served.version, served.value, served.source) == (stable.version, {"v": 1}, "cache")
    assert served.age_seconds > 0


def test_each_identity_has_its_own_cache_file(live_api: LiveApi, cache_dir: Path) -> None:
    stable_served(live_api, {"v": 1})
    for client_id, channel in (("h1", None), ("h2", None), ("h1", "c")):
        client = ConfigClient(
            live_api.url, PATH, client_id=client_id, channel=channel, cache_dir=cache_dir
        )
        try:
            client.get()
        finally:
            client.close()
    assert len(cache_files(cache_dir)) == 3


def test_falls_back_to_the_cache_when_the_api_stops_and_recovers(
    live_api: LiveApi, cache_dir: Path
) -> None:
    stable = stable_served(live_api, {"v": 1})
    with ConfigClient(
        live_api.url, PATH, client_id="h1", cache_dir=cache_dir, timeout=2, **FAST
    ) as client:
        eventually_sync(
            lambda: client.current is not None and client.current.source == "api",
            what="a first value from the API",
        )

        live_api.stop()
        down = eventually_sync(
            lambda: client.get().source == "cache" and client.get(),
            what="the client to fall back to its cache",
        )
        assert (down.version, down.value) == (stable.version, {"v": 1})
        assert client.last_error is not None
        age = down.age_seconds
        time.sleep(0.3)  # the behaviour under test: time passes while the API is down
        assert client.get().age_seconds >= age + 0.25  # the age keeps growing while it is down

        # A new stable version while the API is away; the client picks it up once it is back.
        newer = make_stable(live_api.store, PATH, {"v": 2})
        live_api.start()
        back = eventually_sync(
            lambda: client.get().version == newer.version and client.get(),
            what="the client to take v2 from the API once it is back",
            timeout=20,
        )
        assert back.source == "api" and back.value == {"v": 2} and back.age_seconds < 5
        assert client.last_error is None

    # The cache followed: a client started now, offline, gets v2.
    live_api.stop()
    offline = ConfigClient(live_api.url, PATH, client_id="h1", cache_dir=cache_dir, timeout=2)
    try:
        assert offline.get().value == {"v": 2}
    finally:
        offline.close()


def test_get_falls_back_to_the_cache_without_a_watcher(live_api: LiveApi, cache_dir: Path) -> None:
    stable = stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1", cache_dir=cache_dir, timeout=2)
    try:
        assert client.get().source == "api"
        live_api.stop()
        offline = client.get()
        live_api.start()
        online = client.get()
    finally:
        client.close()
    assert (offline.version, offline.source) == (stable.version, "cache")
    assert (online.version, online.source) == (stable.version, "api")


def test_a_corrupt_cache_file_is_ignored(live_api: LiveApi, cache_dir: Path) -> None:
    stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1", cache_dir=cache_dir)
    try:
        client.get()
    finally:
        client.close()
    [file] = cache_files(cache_dir)
    file.write_text('{"format": 1, "config": ')

    again = ConfigClient(live_api.url, PATH, client_id="h1", cache_dir=cache_dir)
    try:
        assert again.current is None  # nothing usable on disk: wait for the API
        assert again.get().value == {"v": 1}
    finally:
        again.close()
    assert json.loads(file.read_text())["config"]["value"] == {"v": 1}  # rewritten whole


def test_write_is_tmp_fsync_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out" / "value.json"
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def replace(src: str, dst: Path) -> None:
        assert Path(src).parent == target.parent and Path(src).read_bytes() == b"new"
        calls.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_file_atomically(target, b"new")
    assert calls == ["fsync", "replace", "fsync"]  # the file, the rename, then the directory
    assert target.read_bytes() == b"new"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "value.json"
    write_file_atomically(target, b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        write_file_atomically(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(tmp_path.iterdir()) == [target]
