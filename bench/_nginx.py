"""nginx as a reference: a C server answering a conditional GET of a static file with 304.

`NginxProcess` starts `/usr/sbin/nginx` (Debian's package) as a child, in the foreground, one
process (`daemon off; master_process off; worker_processes 1;`), with a config generated in a
temporary directory: 127.0.0.1 on a free port, no access log, `etag on`, and a static file at the
path the config polls use (`/v1/configs/bench/server_config`; nginx ignores the query string), so
bench_poll_cost's wrk script drives it unchanged, with the ETag nginx gives that file. Stopped
with SIGQUIT (a graceful stop), then SIGKILL after a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import CONFIG_PATH, free_port

__all__ = ["NGINX", "NginxProcess", "find_nginx"]

NGINX = "/usr/sbin/nginx"
STATIC_BODY = b'{"max_connections": 1000, "is_debug": false, "tier": "stable"}\n'
"""The file's content: the size of a config's value (the 304 sends none of it)."""


def find_nginx() -> str | None:
    """nginx's path: Debian's, or one on PATH; None when it is not installed."""
    return NGINX if Path(NGINX).exists() else shutil.which("nginx")


def nginx_config(directory: Path, port: int) -> str:
    return (
        "daemon off;\n"
        "master_process off;\n"
        "worker_processes 1;\n"
        f"pid {directory}/nginx.pid;\n"
        "error_log stderr warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n"
        "  access_log off;\n"
        "  keepalive_requests 100000000;\n"
        f"  client_body_temp_path {directory}/body;\n"
        f"  proxy_temp_path {directory}/proxy;\n"
        f"  fastcgi_temp_path {directory}/fastcgi;\n"
        f"  uwsgi_temp_path {directory}/uwsgi;\n"
        f"  scgi_temp_path {directory}/scgi;\n"
        "  server {\n"
        f"    listen 127.0.0.1:{port} backlog=4096;\n"
        f"    root {directory}/www;\n"
        "    etag on;\n"
        "    add_header cache-control no-cache;\n"
        "  }\n"
        "}\n"
    )


class NginxProcess:
    """nginx serving one static file at `target` (its path) on 127.0.0.1:`port`; `etag` is the
    ETag it gives that file (read once it answers)."""

    target = f"/v1/configs/{CONFIG_PATH}"

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.port = 0
        self.etag = ""
        self._process: asyncio.subprocess.Process | None = None
        self._directory: tempfile.TemporaryDirectory[str] | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> NginxProcess:
        self._directory = tempfile.TemporaryDirectory(prefix="tempoconf-bench-nginx-")
        directory = Path(self._directory.name)
        static = directory / "www" / self.target.lstrip("/")
        static.parent.mkdir(parents=True)
        static.write_bytes(STATIC_BODY)
        self.port = free_port()
        config = directory / "nginx.conf"
        config.write_text(nginx_config(directory, self.port))
        self._process = await asyncio.create_subprocess_exec(
            self.executable, "-p", str(directory), "-c", str(config), "-e", "stderr",
            stdin=asyncio.subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as http:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    answer = await http.get(self.target)
                    if answer.status_code == 200 and "etag" in answer.headers:
                        self.etag = answer.headers["etag"]
                        check = await http.get(self.target, headers={"If-None-Match": self.etag})
                        if check.status_code != 304:
                            await self.__aexit__()
                            raise SystemExit(f"nginx answered its own ETag {check.status_code}")
                        return self
                if time.monotonic() > deadline or self._process.returncode is not None:
                    await self.__aexit__()
                    raise SystemExit(f"nginx never served {self.target} (see its log above)")
                await asyncio.sleep(0.1)

    async def __aexit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGQUIT)
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None
