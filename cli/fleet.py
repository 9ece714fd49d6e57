"""A simulated fleet for the demo: N clients polling the distribution API, each reporting health.

Every client polls `GET /v1/configs/{path}` about every `interval` seconds with `If-None-Match`,
remembers the version and stage it was served, and posts a health report for that version now and
then. About `canary_share` of the clients are on channel `canary`; ids are `host-0001`, ...
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass
from types import TracebackType

import httpx

__all__ = ["Fleet", "SimulatedClient"]

UNSERVED = ("-", "-")
"""The (version, stage) of a client that has no answer yet."""


@dataclass
class SimulatedClient:
    client_id: str
    channel: str | None
    version: str | None = None
    stage: str | None = None
    etag: str | None = None
    polls: int = 0
    failed_polls: int = 0
    last_error: str | None = None


class Fleet:
    """`async with Fleet(api_url, path, size=200) as fleet:` runs the clients; `counts()` tallies them."""

    def __init__(
        self,
        api_url: str,
        path: str,
        *,
        namespace: str = "default",
        size: int = 200,
        interval: float = 0.5,
        canary_share: float = 0.05,
        report_interval: float = 3.0,
        seed: int = 7,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.path = path
        self.namespace = namespace
        self.interval = interval
        self.report_interval = report_interval
        # Spread the canaries evenly (every 1/share-th client, starting with host-0001) so even a
        # tiny fleet has one.
        every = max(1, round(1 / canary_share)) if canary_share > 0 else 0
        self.clients = [
            SimulatedClient(
                client_id=f"host-{number:04d}",
                channel="canary" if every and (number - 1) % every == 0 else None,
            )
            for number in range(1, size + 1)
        ]
        self._random = random.Random(seed)
        self._http: httpx.AsyncClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reports_supported = True

    async def __aenter__(self) -> Fleet:
        self._http = httpx.AsyncClient(
            base_url=self.api_url,
            timeout=10.0,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )
        self._tasks = [
            asyncio.create_task(self._run(client), name=f"fleet-{client.client_id}")
            for client in self.clients
        ]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
        while True:
            await self._poll(client)
            if self._reports_supported and client.version and loop.time() >= next_report:
                await self._report(client)
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
        except httpx.HTTPError as error:
            client.failed_polls += 1
            client.last_error = f"{type(error).__name__}: {error}"
            return
        if response.status_code == 304:
            return
        if response.status_code != 200:
            client.failed_polls += 1
            client.last_error = f"HTTP {response.status_code}"
            return
        body = response.json()
        client.version = body.get("version")
        client.stage = body.get("stage")
        client.etag = response.headers.get("ETag")
        client.last_error = None

    async def _report(self, client: SimulatedClient) -> None:
        assert self._http is not None
        report = {
            "path": self.path,
            "namespace": self.namespace,
            "client": client.client_id,
            "version": client.version,
            "ok": self._random.randint(50, 100),
            "failed": 0,
        }
        with contextlib.suppress(httpx.HTTPError):
            response = await self._http.post("/v1/reports", json=report)
            if response.status_code in (404, 405):
                self._reports_supported = False  # an API without the reports endpoint: stop trying
