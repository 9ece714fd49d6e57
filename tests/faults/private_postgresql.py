"""A PostgreSQL 15 cluster of one test's own (initdb in a temporary folder, its own port), so the
test can stop and start it without disturbing the tests that share the machine's cluster.

initdb refuses to run as root: as root, the cluster's commands run as the `postgres` user, in a
folder that user owns (outside pytest's tmp_path, which only root may enter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.faults.stack import free_port
from tests.fixtures.ci import missing

BINARIES = max(
    Path("/usr/lib/postgresql").glob("*/bin"),
    key=lambda folder: int(folder.parent.name) if folder.parent.name.isdigit() else 0,
    default=Path("/usr/lib/postgresql/15/bin"),
)
"""The server programs of the machine's newest PostgreSQL (Debian's layout)."""
SUPERUSER = "postgres"


class PrivateCluster:
    """initdb'd at construction; `first_start()`, `start()`, `stop()` (fast: every connection ended, as an
    operator's restart does), `close()` removes it all."""

    def __init__(self) -> None:
        if not (BINARIES / "initdb").exists():
            missing(f"PostgreSQL's server programs are missing ({BINARIES / 'initdb'})")
        self.as_owner = ["runuser", "-u", SUPERUSER, "--"] if os.geteuid() == 0 else []
        self.folder = Path(tempfile.mkdtemp(prefix="tempoconf-pg-"))
        if self.as_owner:
            shutil.chown(self.folder, SUPERUSER)
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.port = free_port()
        self._run(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8",
            "--no-sync",
        )  # fmt: skip

    @property
    def server_url(self) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self.as_owner, str(BINARIES / program), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{program} {args}: {done.stdout}{done.stderr}{self.logs()}"

    def start(self) -> None:
        """Start on `port`, the address its clients know."""
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start")

    def first_start(self) -> None:
        """Start; when the port free_port() picked was taken meanwhile, on another."""
        for attempt in range(5):
            try:
                self.start()
                return
            except AssertionError:
                if attempt == 4 or "already in use" not in self.logs():
                    raise
                self.port = free_port()

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def close(self) -> None:
        subprocess.run(
            [*self.as_owner, str(BINARIES / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
             "-w", "stop"],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        shutil.rmtree(self.folder, ignore_errors=True)
