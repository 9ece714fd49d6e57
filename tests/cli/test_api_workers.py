"""`tempoconf api --workers N`: a supervisor and N processes serving one port, run as a user does."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tempoconf.store.store import Store
from tests.api.helpers import make_stable, sample
from tests.cli.conftest import TEMPOCONF, cli_env, free_port, run_cli
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(180)

PATH = "clitest/workers"


def test_workers_below_one_are_refused(tmp_path: Path) -> None:
    for count in ("0", "-2"):
        result = run_cli("api", "--workers", count, env=cli_env(), cwd=tmp_path)
        assert result.returncode == 2
        assert f"--workers: must be 1 or more (1: this process serves), not {count}" in (
            result.stderr
        )


def test_a_worker_that_cannot_start_stops_all_with_its_exit_code(tmp_path: Path) -> None:
    """A worker failing at start (here: no store where the settings point) fails the same way
    at every restart: the supervisor stops and exits with its code, as one process would."""
    missing = tmp_path / "nothing" / "tempoconf.db"
    result = run_cli(
        "api", "--workers", "2", "--port", str(free_port()), "--database-url", f"sqlite:///{missing}",
        env=cli_env(), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"no store at {missing}" in result.stderr
    assert "exited with code 1 while starting; stopping the others" in result.stderr
    assert not missing.exists()


def _children(pid: int) -> set[int]:
    """The live processes whose parent is `pid` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, ...
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _scrapes(base_url: str, times: int) -> dict[int, str | None]:
    """pid → the stable version it serves, from `times` scrapes each on a fresh connection (the
    kernel spreads new connections across the workers)."""
    seen: dict[int, str | None] = {}
    for _ in range(times):
        with httpx.Client(base_url=base_url, timeout=10) as http:
            text = http.get("/metrics").text
        pid = next(
            int(line.split('pid="')[1].split('"')[0])
            for line in text.splitlines()
            if line.startswith("tempoconf_api_process_info{")
        )
        seen[pid] = next(
            (
                line.split('version="')[1].split('"')[0]
                for line in text.splitlines()
                if line.startswith("tempoconf_api_served_version{")
                and f'path="{PATH}"' in line
                and 'stage="stable"' in line
            ),
            None,
        )
        assert sample(text, "tempoconf_api_process_info", pid=str(pid)) == 1
    return seen


@contextmanager
def supervisor_running(tmp_path: Path, url: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`tempoconf api --workers 2` over the store at `url`, serving; yields the supervisor and
    its base URL, and kills it at the end if the test has not stopped it."""
    port = free_port()
    output = tmp_path / "api.out"
    with open(output, "wb") as sink:
        supervisor = subprocess.Popen(
            [str(TEMPOCONF), "api", "--workers", "2", "--port", str(port), "--database-url", url],
            env=cli_env(), cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        eventually_sync(
            lambda: "2 workers (pids" in output.read_text() or supervisor.poll() is not None,
            what="the supervisor to say its workers serve",
            timeout=90,
        )
        assert supervisor.poll() is None, output.read_text()
        yield supervisor, f"http://127.0.0.1:{port}"
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()


def test_two_workers_serve_one_port_follow_the_store_restart_and_stop(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tempoconf.db'}"
    store = Store(url, migrate=True)
    try:
        first = make_stable(store, PATH, {"v": 1})
        output = tmp_path / "api.out"
        with supervisor_running(tmp_path, url) as (supervisor, base_url):
            workers = _children(supervisor.pid)
            assert len(workers) == 2

            # Both serve the port, and both serve what the store holds.
            assert _scrapes(base_url, 40) == {pid: first.version for pid in workers}

            # A change reaches every worker (each follows the store on its own).
            second = make_stable(store, PATH, {"v": 2})
            eventually_sync(
                lambda: _scrapes(base_url, 20) == {pid: second.version for pid in workers},
                what="the new stable version on both workers",
            )

            # A worker that dies is restarted, and the new one serves the same.
            killed = min(workers)
            os.kill(killed, signal.SIGKILL)
            restarted = eventually_sync(
                lambda: (now := _children(supervisor.pid)) - workers and len(now) == 2 and now,
                what="the killed worker restarted",
                timeout=60,
            )
            assert killed not in restarted
            eventually_sync(
                lambda: _scrapes(base_url, 20) == {pid: second.version for pid in restarted},
                what="both workers, the restarted one included, serving",
                timeout=60,
            )
            assert "exited (killed by SIGKILL)" in output.read_text()

            # SIGTERM stops them all; a waiting long-poll is answered, not cut.
            etag = httpx.get(f"{base_url}/v1/configs/{PATH}").headers["etag"]
            answers: list[int | str] = []

            def long_poll() -> None:
                try:
                    answer = httpx.get(
                        f"{base_url}/v1/configs/{PATH}",
                        params={"wait": 30},
                        headers={"If-None-Match": etag},
                        timeout=60,
                    )
                    answers.append(answer.status_code)
                except httpx.HTTPError as error:
                    answers.append(repr(error))

            poller = threading.Thread(target=long_poll)
            poller.start()
            eventually_sync(
                lambda: any(
                    sample(
                        httpx.get(f"{base_url}/metrics").text, "tempoconf_api_long_polls_waiting"
                    )
                    for _ in range(10)
                ),
                what="the long-poll to wait on a worker",
            )
            supervisor.send_signal(signal.SIGTERM)
            assert supervisor.wait(timeout=60) == 0, output.read_text()
            poller.join(timeout=60)
            assert answers == [304]
            assert not any(_alive(pid) for pid in restarted)
    finally:
        store.close()


def test_workers_follow_postgresql_changes(tmp_path: Path, postgresql_url: str) -> None:
    """On PostgreSQL each worker follows the store on its own (its own LISTEN, its own revision
    check): a change reaches both."""
    store = Store(postgresql_url, migrate=True)
    try:
        first = make_stable(store, PATH, {"v": 1})
        with supervisor_running(tmp_path, postgresql_url) as (supervisor, base_url):
            workers = _children(supervisor.pid)
            assert len(workers) == 2
            assert _scrapes(base_url, 30) == {pid: first.version for pid in workers}
            second = make_stable(store, PATH, {"v": 2})
            eventually_sync(
                lambda: _scrapes(base_url, 20) == {pid: second.version for pid in workers},
                what="the new stable version on both workers",
            )
            supervisor.send_signal(signal.SIGTERM)
            assert supervisor.wait(timeout=60) == 0
            assert not any(_alive(pid) for pid in workers)
    finally:
        store.close()
