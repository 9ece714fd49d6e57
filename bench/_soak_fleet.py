"""Child process of bench_soak.py: long-polling clients on httpx (asyncio, uvloop), one shared
connection pool per process, each client on its own keep-alive connection while it waits.

    python bench/_soak_fleet.py '{"port": 8080, "configs": ["soak/cfg-00", ...], "first": 0,
                                  "count": 500, "wait": 30, "records": "/tmp/x/polls-0.tsv"}'

Client i (`identity(i, configs)`) polls one config with its own id, channel and labels, as an
agent does: a first GET, then long-polls (`wait`) with the ETag it holds; its first long-poll
waits a random part of `wait`, so deadlines are spread. It reports its health
(`POST /v1/reports`) on the version it holds: at once when it gets a staged version, then every
STAGED_REPORT_EVERY seconds while it holds one, and every STABLE_REPORT_EVERY seconds on stable.
A value with `"soak_fail": true` makes it report failed operations (the bad value of a rollout
whose health check must revert it); any other value, only good ones.

Lines on stdout, for the parent:

    v <i> <version> <unix time ns>   client i now holds this version (its first one included)
    ready <count>                    every client of this process holds a version
    done <json>                      counters, on SIGTERM, after the records file is written

The records file, written on SIGTERM, has one line per event, each with its time so the parent
can split them by phase:

    p <sent_ns> <recv_ns> <status> <wait_s> <config_index>   an answered poll (200 or 304);
                                                            wait_s 0 when it asked for no wait
    e <time_ns> <what>                                      a poll that failed (error, other status)
    r <time_ns> <what>                                      a report: `202`, or what went wrong
    l <time_ns> <seconds>                                   this process's event loop ran late
                                                            (by more than LAG_REPORTED)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import ssl
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvloop

STAGED_REPORT_EVERY = 10.0
STABLE_REPORT_EVERY = 120.0
RETRY_DELAY = 0.5
START_SPACING = 0.002
"""Seconds between two clients' first requests: a burst of hundreds of connects at once would
measure the kernel's accept backlog, not the API."""
LAG_PROBE_EVERY = 0.5
LAG_REPORTED = 0.25
"""A generator that runs late reads answers late: its lag is recorded, so a slow figure can be
told apart from a slow API."""
REGIONS = ("eu", "us", "ap")
TIERS = ("web", "batch", "edge", "db")


@dataclass(frozen=True)
class Identity:
    client: str
    config: int
    channel: str | None
    labels: dict[str, str]


def identity(i: int, configs: int) -> Identity:
    """Client i: config i % configs; within a config, every 20th client is on channel canary and
    every 10th (offset 5) on beta, so each config has canaries; region and tier vary by client."""
    config, rank = i % configs, i // configs
    channel = "canary" if rank % 20 == 0 else "beta" if rank % 10 == 5 else None
    rng = random.Random(i)
    region, tier = rng.choice(REGIONS), rng.choice(TIERS)
    return Identity(f"{tier}-{region}-{i:05d}", config, channel, {"region": region, "tier": tier})


@dataclass
class Counters:
    polls: int = 0
    status: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    reports: int = 0
    report_errors: dict[str, int] = field(default_factory=dict)
    last_error: str = ""


class Fleet:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.configs: list[str] = spec["configs"]
        self.first: int = spec["first"]
        self.count: int = spec["count"]
        self.wait: float = spec["wait"]
        self.counters = Counters()
        self.records: list[tuple[int, int, int, float, int]] = []
        self.errors: list[tuple[int, str]] = []
        self.reports: list[tuple[int, str]] = []
        self.lags: list[tuple[int, float]] = []
        self.holding = 0
        self._ready_sent = False
        self.base_url = f"http://127.0.0.1:{spec['port']}"
        # Plain HTTP: this context is never used, but sharing it spares each client's pool the
        # cost of building its own.
        self.ssl_context = ssl.create_default_context()

    def http_client(self) -> httpx.AsyncClient:
        """A client's own connection pool. One pool shared by hundreds of clients would cost
        the generator a core: httpcore scans every connection of its pool on each request."""
        return httpx.AsyncClient(
            base_url=self.base_url,
            verify=self.ssl_context,
            # keepalive_expiry below uvicorn's 5 s keep-alive timeout: reusing a connection the
            # server closes at that instant fails the request (RemoteProtocolError), a race of
            # HTTP/1.1 keep-alive that says nothing about the API.
            limits=httpx.Limits(keepalive_expiry=4.0),
            timeout=httpx.Timeout(self.wait + 30.0, connect=15.0),
        )

    def _emit(self, line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    async def watch_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + LAG_PROBE_EVERY
            await asyncio.sleep(LAG_PROBE_EVERY)
            late = loop.time() - due
            if late > LAG_REPORTED:
                self.lags.append((time.time_ns(), late))

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.watch_lag())
            for n, i in enumerate(range(self.first, self.first + self.count)):
                group.create_task(self._client(i, n * START_SPACING))

    def _error(
        self, where: dict[str, int], log: list[tuple[int, str]], what: str, detail: str
    ) -> None:
        where[what] = where.get(what, 0) + 1
        log.append((time.time_ns(), what.replace(" ", "_")))
        self.counters.last_error = detail[:300]

    async def _client(self, i: int, delay: float) -> None:
        await asyncio.sleep(delay)
        me = identity(i, len(self.configs))
        path = self.configs[me.config]
        params: list[tuple[str, str | int | float | bool | None]] = [("client", me.client)]
        if me.channel:
            params.append(("channel", me.channel))
        params += [("label", f"{key}={value}") for key, value in sorted(me.labels.items())]
        url = f"/v1/configs/{path}"
        held: dict[str, Any] = {}
        changed = asyncio.Event()
        http = self.http_client()
        reporter = asyncio.create_task(self._reporter(http, me, path, held, changed))
        etag: str | None = None
        version: str | None = None
        wait = random.uniform(1.0, self.wait)
        counters = self.counters
        try:
            while True:
                query = params if etag is None else [*params, ("wait", f"{wait:.2f}")]
                headers = {"If-None-Match": etag} if etag else {}
                sent = time.time_ns()
                try:
                    response = await http.get(url, params=query, headers=headers)
                except httpx.HTTPError as exc:
                    self._error(
                        counters.errors, self.errors, type(exc).__name__, f"client {i}: {exc!r}"
                    )
                    await asyncio.sleep(RETRY_DELAY)
                    continue
                received = time.time_ns()
                status = response.status_code
                counters.status[status] = counters.status.get(status, 0) + 1
                if status not in (200, 304):
                    self._error(
                        counters.errors,
                        self.errors,
                        f"http {status}",
                        f"client {i}: {response.text[:200]}",
                    )
                    await asyncio.sleep(RETRY_DELAY)
                    continue
                counters.polls += 1
                self.records.append((sent, received, status, wait if etag else 0.0, me.config))
                if status == 200:
                    body = response.json()
                    etag = response.headers.get("etag")
                    held.update(body)
                    changed.set()
                    if body["version"] != version:
                        if version is None:
                            self.holding += 1
                        version = body["version"]
                        self._emit(f"v {i} {version} {received}\n")
                        if self.holding == self.count and not self._ready_sent:
                            self._ready_sent = True
                            self._emit(f"ready {self.count}\n")
                wait = self.wait
        finally:
            reporter.cancel()
            with contextlib.suppress(Exception):
                await http.aclose()

    async def _reporter(
        self,
        http: httpx.AsyncClient,
        me: Identity,
        path: str,
        held: dict[str, Any],
        changed: asyncio.Event,
    ) -> None:
        """Health reports on the version held: at once on a staged one, then periodically."""
        counters = self.counters
        next_stable = time.monotonic() + random.uniform(0, STABLE_REPORT_EVERY)
        while True:
            staged = held.get("stage", "stable") != "stable"
            timeout = STAGED_REPORT_EVERY if staged else next_stable - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(0.0, timeout))
            changed.clear()
            if not held:
                continue
            staged = held["stage"] != "stable"
            if not staged and time.monotonic() < next_stable:
                continue
            next_stable = time.monotonic() + STABLE_REPORT_EVERY
            bad = isinstance(held["value"], dict) and held["value"].get("soak_fail") is True
            report: dict[str, Any] = {
                "path": path,
                "client": me.client,
                "version": held["version"],
                "ok": 2 if bad else 20,
                "failed": 18 if bad else 0,
                "labels": me.labels,
            }
            if me.channel:
                report["channel"] = me.channel
            if bad:
                report["error"] = "soak: the bad value fails most operations"
            try:
                response = await http.post("/v1/reports", json=report)
            except httpx.HTTPError as exc:
                self._error(
                    counters.report_errors, self.reports, type(exc).__name__, f"report: {exc!r}"
                )
                continue
            if response.status_code == 202:
                counters.reports += 1
                self.reports.append((time.time_ns(), "202"))
            else:
                self._error(
                    counters.report_errors,
                    self.reports,
                    f"http {response.status_code}",
                    f"report {report}: {response.text[:200]}",
                )

    def write_records(self, path: str) -> None:
        with open(path, "w", encoding="ascii") as out:
            out.writelines(
                f"p {sent} {received} {status} {wait:.2f} {config}\n"
                for sent, received, status, wait, config in self.records
            )
            out.writelines(f"e {at} {what}\n" for at, what in self.errors)
            out.writelines(f"r {at} {what}\n" for at, what in self.reports)
            out.writelines(f"l {at} {late:.3f}\n" for at, late in self.lags)


async def main(spec: dict[str, Any]) -> None:
    fleet = Fleet(spec)
    runner = asyncio.create_task(fleet.run())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError, BaseExceptionGroup):
        await runner
    fleet.write_records(spec["records"])
    counters = fleet.counters
    summary = {
        "polls": counters.polls,
        "status": {str(code): n for code, n in sorted(counters.status.items())},
        "errors": counters.errors,
        "reports": counters.reports,
        "report_errors": counters.report_errors,
        "last_error": counters.last_error,
    }
    fleet._emit(f"done {json.dumps(summary)}\n")


if __name__ == "__main__":
    uvloop.run(main(json.loads(sys.argv[1])))
