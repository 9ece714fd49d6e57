"""A simulated fleet for the demo: N clients polling the distribution API, each reporting health.

Every client polls `GET /v1/configs/{path}` about every `interval` seconds with `If-None-Match`,
remembers the version, stage and value it was served, and posts a health report for that version
(under its own client id, with its channel) right after it received it, then now and then. About
`canary_share` of the clients are on channel `canary`; ids are `host-0001`, ...

Whether a client's operations fail depends on the value it runs, by one rule (`failure_ratio`):
each simulated server carries `SERVER_LOAD` open connections, and a `max_connections` below that
refuses the excess, so that share of its operations fails. Every value of examples/ is far above
the load; the demo's second act rolls out one below it (valid for the schema all the same).

The fleet also remembers, per version, every host that ever ran it and every host that reported
errors on it (`seen`): what the demo tells about a bad version is observed, not inferred.

`Fleet` runs the clients in the caller's event loop. `FleetProcess` runs the same fleet in a child
process (`python -m tempoconf.cli.fleet`) that streams its counts back: a few hundred clients polling twice
a second take a CPU core of HTTP work, which would otherwise starve the API and worker sharing
the demo's loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tempoconf.cli._lifecycle import AsyncRunning

__all__ = [
    "REPORT_OPERATIONS",
    "SERVER_LOAD",
    "UNSERVED",
    "Fleet",
    "FleetProcess",
    "FleetSpec",
    "SimulatedClient",
    "VersionSeen",
    "failure_ratio",
]

UNSERVED = ("-", "-")
"""The (version, stage) of a client that has no answer yet."""
SERVER_LOAD = 500
"""Open connections each simulated server carries (see `failure_ratio`)."""
REPORT_OPERATIONS = (200, 400)
"""The operations one report counts (at random, bounds included): a busy server's between two
reports, enough that a single canary's first report bounds its error rate's increase within a few
points, as the demo's sequential judge needs to decide at once."""


def failure_ratio(value: Any) -> float:
    """The share of a simulated server's operations that fail when it runs `value`: a
    `max_connections` below `SERVER_LOAD` refuses the connections above it."""
    limit = value.get("max_connections") if isinstance(value, dict) else None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit >= SERVER_LOAD:
        return 0.0
    return (SERVER_LOAD - max(limit, 0)) / SERVER_LOAD


@dataclass
class SimulatedClient:
    client_id: str
    channel: str | None
    version: str | None = None
    stage: str | None = None
    value: Any = None
    etag: str | None = None
    polls: int = 0
    failed_polls: int = 0
    last_error: str | None = None


@dataclass
class VersionSeen:
    """What the fleet observed of one version: who ran it, who reported errors on it, and for
    how long any host ran it (monotonic clock)."""

    hosts: set[str] = field(default_factory=set)
    error_hosts: set[str] = field(default_factory=set)
    first_served: float = 0.0
    gone_at: float | None = None
    """When the last host left it; None while some host runs it."""

    def exposure(self, now: float) -> float:
        """Seconds from the first host served it to the last one leaving it (or to now)."""
        return (self.gone_at if self.gone_at is not None else now) - self.first_served

    def as_json(self, now: float) -> dict[str, Any]:
        return {
            "hosts": sorted(self.hosts),
            "error_hosts": sorted(self.error_hosts),
            "exposure": round(self.exposure(now), 3),
            "running": self.gone_at is None,
        }


@dataclass(frozen=True)
class FleetSpec:
    """Which fleet to simulate: where it polls, how many clients, how often, how many canaries.
    `Fleet` runs it in this process, `FleetProcess` in a child."""

    api_url: str
    path: str
    namespace: str = "default"
    size: int = 200
    interval: float = 0.5
    canary_share: float = 0.05

    def arguments(self) -> list[str]:
        """The child's command line (`python -m tempoconf.cli.fleet ...`, see main)."""
        return [
            "--api-url", self.api_url,
            "--path", self.path,
            "--namespace", self.namespace,
            "--clients", str(self.size),
            "--interval", str(self.interval),
            "--canary-share", str(self.canary_share),
        ]  # fmt: skip


class Fleet(AsyncRunning):
    """`async with Fleet(FleetSpec(api_url, path, size=200)) as fleet:` runs the clients;
    `counts()` tallies them."""

    def __init__(self, spec: FleetSpec, *, report_interval: float = 3.0, seed: int = 7) -> None:
        self.size = spec.size
        self.api_url = spec.api_url.rstrip("/")
        self.path = spec.path
        self.namespace = spec.namespace
        self.interval = spec.interval
        self.report_interval = report_interval
        # Spread the canaries evenly (every 1/share-th client, starting with host-0001) so even a
        # tiny fleet has one.
        every = max(1, round(1 / spec.canary_share)) if spec.canary_share > 0 else 0
        self.clients = [
            SimulatedClient(
                client_id=f"host-{number:04d}",
                channel="canary" if every and (number - 1) % every == 0 else None,
            )
            for number in range(1, spec.size + 1)
        ]
        self.seen: dict[str, VersionSeen] = {}
        self._random = random.Random(seed)
        self._http: httpx.AsyncClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reports_supported = True

    async def _start(self) -> None:
        self._http = httpx.AsyncClient(
            base_url=self.api_url,
            timeout=10.0,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )
        self._tasks = [
            asyncio.create_task(self._run(client), name=f"fleet-{client.client_id}")
            for client in self.clients
        ]

    async def _stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def counts(self) -> Counter[tuple[str, str]]:
        """How many clients run each (version, stage); ("-", "-") for those not served yet."""
        return Counter(
            (client.version, client.stage or "-") if client.version else UNSERVED
            for client in self.clients
        )

    def served(self) -> int:
        return sum(1 for client in self.clients if client.version)

    @property
    def canaries(self) -> int:
        return sum(1 for client in self.clients if client.channel == "canary")

    @property
    def canary_ids(self) -> list[str]:
        return [client.client_id for client in self.clients if client.channel == "canary"]

    def errors(self) -> list[str]:
        return sorted({client.last_error for client in self.clients if client.last_error})

    async def wait_all_served(self, timeout: float = 15.0) -> bool:
        """True once every client has been served a value, False after `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.served() < len(self.clients):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.1)
        return True

    async def _run(self, client: SimulatedClient) -> None:
        # Start at a random point of the interval so the fleet does not poll in lockstep.
        await asyncio.sleep(self._random.uniform(0, self.interval))
        loop = asyncio.get_running_loop()
        next_report = loop.time() + self._random.uniform(0, self.report_interval)
        reported: str | None = None
        while True:
            await self._poll(client)
            # Report soon after a change of version (as a process that applied it and ran a while),
            # then every report_interval: a short hold still sees the cohort's reports.
            due = client.version != reported or loop.time() >= next_report
            if self._reports_supported and client.version and due:
                await self._report(client)
                reported = client.version
                next_report = loop.time() + self.report_interval
            await asyncio.sleep(self.interval * self._random.uniform(0.8, 1.2))

    async def _poll(self, client: SimulatedClient) -> None:
        assert self._http is not None
        params = {"namespace": self.namespace, "client": client.client_id}
        if client.channel:
            params["channel"] = client.channel
        headers = {"If-None-Match": client.etag} if client.etag else {}
        client.polls += 1
        try:
            response = await self._http.get(
                f"/v1/configs/{self.path}", params=params, headers=headers
            )
        except Exception as error:  # noqa: BLE001 - a simulated host survives anything, and says what
            client.failed_polls += 1
            client.last_error = f"{type(error).__name__}: {error}"
            return
        if response.status_code == 304:
            return
        if response.status_code != 200:
            client.failed_polls += 1
            client.last_error = f"HTTP {response.status_code}"
            return
        try:
            body = response.json()
        except ValueError:
            client.failed_polls += 1
            client.last_error = f"HTTP 200 without JSON: {response.text[:80]!r}"
            return
        self._switch(client, body.get("version"))
        client.stage = body.get("stage")
        client.value = body.get("value")
        client.etag = response.headers.get("ETag")
        client.last_error = None

    def _switch(self, client: SimulatedClient, version: str | None) -> None:
        """`client` now runs `version`: keep `seen` up to date."""
        previous, client.version = client.version, version
        if version == previous:
            return
        now = time.monotonic()
        if version:
            seen = self.seen.get(version)
            if seen is None:
                seen = self.seen[version] = VersionSeen(first_served=now)
            seen.hosts.add(client.client_id)
            seen.gone_at = None
        if previous and not any(other.version == previous for other in self.clients):
            self.seen[previous].gone_at = now

    async def _report(self, client: SimulatedClient) -> None:
        assert self._http is not None
        assert client.version is not None
        operations = self._random.randint(*REPORT_OPERATIONS)
        ratio = failure_ratio(client.value)
        failed = round(operations * ratio)
        report: dict[str, Any] = {
            "path": self.path,
            "namespace": self.namespace,
            "client": client.client_id,
            "version": client.version,
            "ok": operations - failed,
            "failed": failed,
        }
        if failed:
            report["error"] = (
                f"connection refused: max_connections {client.value.get('max_connections')} "
                f"< {SERVER_LOAD} open connections"
            )
        # The cohort a report counts for is the client's identity: send it as the SDK does.
        if client.channel:
            report["channel"] = client.channel
        with contextlib.suppress(Exception):  # a lost report is what real fleets do too
            response = await self._http.post("/v1/reports", json=report)
            if response.status_code == 405 or "no such route" in response.text:
                self._reports_supported = False  # an API without the reports endpoint: stop trying
                return
            if failed and response.status_code < 300:
                self.seen[client.version].error_hosts.add(client.client_id)


class FleetProcess(AsyncRunning):
    """`Fleet` in a child process, with the same reading interface (`counts`, `served`, ...)."""

    def __init__(self, spec: FleetSpec) -> None:
        self.size = spec.size
        self.interval = spec.interval
        self._arguments = [sys.executable, "-m", "tempoconf.cli.fleet", *spec.arguments()]
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._snapshot: dict[str, Any] = {
            "counts": [], "served": 0, "canaries": 0, "canary_ids": [], "errors": [], "seen": {},
        }  # fmt: skip

    async def _start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            *self._arguments, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        self._reader = asyncio.create_task(self._read())

    async def _stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 5)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        async for line in self._process.stdout:
            with contextlib.suppress(ValueError):
                self._snapshot = json.loads(line)

    def counts(self) -> Counter[tuple[str, str]]:
        return Counter(
            {(str(version), str(stage)): int(n) for version, stage, n in self._snapshot["counts"]}
        )

    def served(self) -> int:
        return int(self._snapshot["served"])

    @property
    def canaries(self) -> int:
        return int(self._snapshot["canaries"])

    @property
    def canary_ids(self) -> list[str]:
        return list(self._snapshot["canary_ids"])

    def errors(self) -> list[str]:
        return list(self._snapshot["errors"])

    def seen(self, version: str) -> dict[str, Any] | None:
        """`VersionSeen.as_json` of `version` as of the last snapshot; None: no host ran it."""
        seen = self._snapshot["seen"].get(version)
        return dict(seen) if seen is not None else None

    async def snapshot_after(self, timeout: float = 5.0) -> None:
        """Wait for a snapshot taken after this call (so it holds everything observed so far)."""
        loop = asyncio.get_running_loop()
        # The child stamps snapshots with its time.monotonic(): one system-wide clock on Linux.
        asked, deadline = time.monotonic(), loop.time() + timeout
        while float(self._snapshot.get("taken", 0.0)) <= asked and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def wait_all_served(self, timeout: float = 15.0) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.served() < self.size:
            if self._process is None or self._process.returncode is not None:
                return False
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.1)
        return True


async def _run_child(args: argparse.Namespace) -> None:
    """The child side of FleetProcess: run a Fleet, print its counts as JSON lines until stdin closes."""
    fleet = Fleet(FleetSpec(**vars(args)))  # main() names each argument after its field
    loop = asyncio.get_running_loop()
    # The parent holds our stdin: EOF means it is gone, and so should we be.
    stdin_closed = loop.run_in_executor(None, sys.stdin.buffer.read)
    async with fleet:
        while not stdin_closed.done():
            now = time.monotonic()
            snapshot = {
                "taken": now,
                "counts": [[version, stage, n] for (version, stage), n in fleet.counts().items()],
                "served": fleet.served(),
                "canaries": fleet.canaries,
                "canary_ids": fleet.canary_ids,
                "errors": fleet.errors()[:3],
                "seen": {version: seen.as_json(now) for version, seen in fleet.seen.items()},
            }
            sys.stdout.write(json.dumps(snapshot) + "\n")
            sys.stdout.flush()
            await asyncio.wait({stdin_closed}, timeout=0.25)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tempoconf.cli.fleet", description="a simulated fleet (for FleetProcess)"
    )
    parser.add_argument("--api-url", dest="api_url", required=True)
    parser.add_argument("--path", dest="path", required=True)
    parser.add_argument("--namespace", dest="namespace", default="default")
    parser.add_argument("--clients", dest="size", type=int, default=200)
    parser.add_argument("--interval", dest="interval", type=float, default=0.5)
    parser.add_argument("--canary-share", dest="canary_share", type=float, default=0.05)
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        asyncio.run(_run_child(parser.parse_args()))


if __name__ == "__main__":
    main()
