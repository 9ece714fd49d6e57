"""The access policy file of a running `tempoconf api` (a real subprocess, and `--workers 2`),
changed under it: a client added works within about 2 s and one removed stops working, without
a restart; an edit that breaks the file leaves the last good policy in force, logged; SIGHUP
reads the file at once (proved with an edit that keeps the file's mtime, size and inode, so
that only the signal can explain the change), and stops no process: not the API, not the
supervisor of `--workers 2` (which passes it on to each worker), not an edge."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.cli.conftest import TEMPOCONF, cli_env
from tests.fixtures.access import write_policy
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(180)

NAMESPACE = "team-a"
PATH = "app/limits"
FLEET_A = ("fleet-a-secret", [NAMESPACE])
SCRAPER = "prometheus-secret"


@dataclass
class RunningApi:
    process: subprocess.Popen[bytes]
    url: str
    output: Path
    policy: Path

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def status(self, secret: str | None) -> int:
        """A config read with `secret` as the client token, on a fresh connection."""
        return _read(self.url, secret)[0]


def _read(url: str, secret: str | None) -> tuple[int, int]:
    """(status of a config read with `secret`, pid of the worker that answered it), both on one
    fresh connection (the kernel spreads new connections across `--workers`)."""
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    with httpx.Client(base_url=url, timeout=10) as http:
        status = http.get(
            f"/v1/configs/{PATH}", params={"namespace": NAMESPACE}, headers=headers
        ).status_code
        metrics = http.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"}).text
    pid = next(
        int(line.split('pid="')[1].split('"')[0])
        for line in metrics.splitlines()
        if line.startswith("tempoconf_api_process_info{")
    )
    return status, pid


def _policy(folder: Path, **clients: tuple[str, list[str]]) -> Path:
    return write_policy(folder, clients=clients, scrapers={"prometheus": SCRAPER})


@contextmanager
def api_running(tmp_path: Path, *, workers: int = 1) -> Iterator[RunningApi]:
    """`tempoconf api` (or its `--workers` supervisor) over a store holding PATH in team-a, under
    a policy whose only client is fleet-a; killed at the end if the test has not stopped it."""
    url = f"sqlite:///{tmp_path / 'tempoconf.db'}"
    with Store(url, migrate=True) as store:
        make_stable(store, PATH, {"limit": 1}, namespace=NAMESPACE)
    policy = _policy(tmp_path / "policy", **{"fleet-a": FLEET_A})
    output = tmp_path / "api.out"
    # Port 0: the process binds a free port itself and names it (no port released in between).
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            [str(TEMPOCONF), "api", "--port", "0", "--database-url", url,
             *(["--workers", str(workers)] if workers > 1 else [])],
            env=cli_env(TEMPOCONF_ACCESS_FILE=str(policy)), cwd=tmp_path,
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        base = _serving(process, output, timeout=90)
        yield RunningApi(process, base, output, policy)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _serving(process: subprocess.Popen[bytes], output: Path, *, timeout: float) -> str:
    """The base URL the process says it listens on (port 0 resolved), once it answers there."""

    def listening() -> str | None:
        log = output.read_text(errors="replace")
        if process.poll() is not None:
            pytest.fail(f"the process exited {process.returncode} before serving:\n{log}")
        found = re.search(r"listening on (http://[^\s;,]+)", log)
        return found[1] if found and _healthy(found[1]) else None

    return eventually_sync(listening, what="the process to serve", timeout=timeout)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def _rewrite_keeping_stamp(path: Path, edit: Path) -> None:
    """`path` given `edit`'s content in place (same inode), with its mtime put back: only a
    SIGHUP can make the API read it (its size must not change: the digests are all 64 hex)."""
    before = os.stat(path)
    content = edit.read_bytes()
    assert len(content) == before.st_size, "the edit must keep the file's size"
    with open(path, "r+b") as file:
        file.write(content)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns,
        before.st_size,
        before.st_ino,
    )


def test_the_policy_file_is_followed_by_mtime_kept_when_broken_and_reread_on_sighup(
    tmp_path: Path,
) -> None:
    with api_running(tmp_path) as api:
        assert api.status("fleet-a-secret") == 200
        assert api.status("fleet-n-secret") == 401
        assert api.status(None) == 401

        # A client added: its token works without a restart (the mtime is looked at once a
        # second; how soon is not asserted here: a busy host is slow).
        _policy(
            api.policy.parent, **{"fleet-a": FLEET_A, "fleet-n": ("fleet-n-secret", [NAMESPACE])}
        )
        eventually_sync(
            lambda: api.status("fleet-n-secret") == 200, what="the added client", timeout=30
        )

        # A client removed: its token stops working.
        _policy(api.policy.parent, **{"fleet-n": ("fleet-n-secret", [NAMESPACE])})
        eventually_sync(
            lambda: api.status("fleet-a-secret") == 401,
            what="the removed client refused",
            timeout=5,
        )
        assert api.status("fleet-n-secret") == 200

        # A broken edit: the last good policy stays in force, and the log says why.
        api.policy.write_text('{"clients": [{"name": "fleet-x"}]')
        eventually_sync(  # the file is looked at when a request asks who calls
            lambda: (
                api.status("fleet-n-secret") == 200
                and "the policy loaded before stays in force" in api.log()
            ),
            what="the broken edit logged",
            timeout=5,
        )
        assert f"invalid access policy {api.policy}" in api.log()
        assert api.status("fleet-n-secret") == 200
        assert api.status("fleet-a-secret") == 401

        # Fixed again (fleet-a back), then rotated without a trace in mtime, size or inode: only
        # SIGHUP can reload that.
        both = {"fleet-a": FLEET_A, "fleet-n": ("fleet-n-secret", [NAMESPACE])}
        _policy(api.policy.parent, **both)
        eventually_sync(
            lambda: api.status("fleet-a-secret") == 200, what="the fixed file", timeout=5
        )
        rotated = _policy(
            tmp_path / "rotated", **{**both, "fleet-n": ("fleet-n-rotated", [NAMESPACE])}
        )
        _rewrite_keeping_stamp(api.policy, rotated)
        time.sleep(1.5)  # the next request looks at the stamp again: it sees no change
        assert api.status("fleet-n-secret") == 200
        assert api.status("fleet-n-rotated") == 401

        api.process.send_signal(signal.SIGHUP)
        eventually_sync(
            lambda: api.status("fleet-n-rotated") == 200, what="the SIGHUP reload", timeout=2
        )
        assert api.status("fleet-n-secret") == 401
        assert api.process.poll() is None, api.log()

        api.process.send_signal(signal.SIGTERM)
        assert api.process.wait(timeout=30) == 0, api.log()
    assert "Traceback" not in api.log()


def test_each_worker_follows_the_file_and_the_supervisor_passes_sighup_on(
    tmp_path: Path,
) -> None:
    with api_running(tmp_path, workers=2) as api:
        workers = {pid for _, pid in (_read(api.url, None) for _ in range(40))}
        assert len(workers) == 2, workers

        def everywhere(secret: str, status: int) -> bool:
            """`status` for `secret` from every worker, over fresh connections."""
            answers = [_read(api.url, secret) for _ in range(30)]
            return {code for code, _ in answers} == {status} and {
                pid for _, pid in answers
            } == workers

        assert everywhere("fleet-a-secret", 200)
        _policy(
            api.policy.parent, **{"fleet-a": FLEET_A, "fleet-n": ("fleet-n-secret", [NAMESPACE])}
        )
        eventually_sync(
            lambda: everywhere("fleet-n-secret", 200), what="the added client on both workers"
        )

        time.sleep(1.5)  # the new file's stamp is taken by both
        rotated = _policy(
            tmp_path / "rotated",
            **{"fleet-a": FLEET_A, "fleet-n": ("fleet-n-rotated", [NAMESPACE])},
        )
        _rewrite_keeping_stamp(api.policy, rotated)
        time.sleep(2.5)
        assert everywhere("fleet-n-secret", 200)  # no worker saw a change

        api.process.send_signal(signal.SIGHUP)  # to the supervisor only
        eventually_sync(
            lambda: everywhere("fleet-n-rotated", 200), what="both workers reloaded", timeout=10
        )
        assert everywhere("fleet-n-secret", 401)
        assert api.process.poll() is None, api.log()
        assert {pid for _, pid in (_read(api.url, None) for _ in range(20))} == workers  # none died
        assert "exited" not in api.log()

        api.process.send_signal(signal.SIGTERM)
        assert api.process.wait(timeout=60) == 0, api.log()


@pytest.mark.parametrize("command", ["api", "edge"])
def test_sighup_without_a_policy_stops_nothing(tmp_path: Path, command: str) -> None:
    """SIGHUP's default action ends a process: `tempoconf api` and `edge` take it, say there
    is nothing to reload, and serve on."""
    url = f"sqlite:///{tmp_path / 'tempoconf.db'}"
    Store(url, migrate=True).close()
    args = (
        ["api", "--database-url", url]
        if command == "api"
        else ["edge", "--upstream", "http://127.0.0.1:9"]
    )
    output = tmp_path / "out"
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            [str(TEMPOCONF), *args, "--port", "0"],
            env=cli_env(TEMPOCONF_DATA_DIR=str(tmp_path / "data")), cwd=tmp_path,
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        base = _serving(process, output, timeout=60)
        process.send_signal(signal.SIGHUP)
        eventually_sync(
            lambda: "SIGHUP: no access policy is being served to read again" in output.read_text(),
            what="the SIGHUP noted",
            timeout=10,
        )
        assert process.poll() is None, output.read_text()
        assert _healthy(base)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, output.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
