"""The dev stack serves as `tempoconf api` does: requests/s of 200 answers (a config's full
value, no ETag) on keep-alive connections from `tempoconf dev`'s API next to `tempoconf api` on
the same store, in the same run. Goal: dev at least 0.9x api.

Both are the real commands: `tempoconf dev` (Temporal dev server, worker and API in one process,
what `make run` starts) and `tempoconf api` over dev's own SQLite store. On the stdlib loop with a
listening socket of proto 0, dev's API once took ~44 ms per keep-alive 200 (Nagle plus delayed
ACK on uvicorn's separate head and body writes): about 1,500 requests/s against 28,600.
wrk drives both with the same script (1,000 clients cycled, no If-None-Match), threads,
connections and duration, after a warm-up each, in back-to-back pairs; the ratio is the median
of the pairs' ratios.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import (
    CONFIG_PATH,
    CliProcess,
    bounded,
    emit,
    free_port,
    log,
    raise_fd_limit,
    require_wrk,
    seed_live_rollout,
)
from _scale import parse_tiny, sized
from bench_poll_cost import (
    CLIENTS,
    DURATION_SECONDS,
    WARMUP_SECONDS,
    cycling_requests,
    paired_rounds,
    poll_target,
    run_wrk,
    wrk_settings,
)

GOAL_RATIO = 0.9
ROUNDS = sized(3, 1)
"""Pairs (api, then dev) measured."""


def write_lua_200(directory: Path) -> Path:
    """A wrk script that cycles through the clients without If-None-Match: every answer a 200."""
    rows = ",\n".join(f'  {{"{poll_target(i)}"}}' for i in range(CLIENTS))
    script = directory / "gets.lua"
    script.write_text(
        f"local clients = {{\n{rows}\n}}\n" + cycling_requests('wrk.format("GET", c[1])')
    )
    return script


async def wait_for_config(base_url: str) -> None:
    """Until the API serves the seeded config (dev reads the store it was written to)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=5) as http:
        for _ in range(300):
            if (await http.get(poll_target(0))).status_code == 200:
                return
            await asyncio.sleep(0.1)
    raise SystemExit(f"{base_url} never served {CONFIG_PATH}")


SEQUENTIAL_REQUESTS = sized(200, 20)


async def keep_alive_latency_ms(base_url: str) -> float:
    """Median milliseconds per 200 on ONE keep-alive connection, requests one after the other:
    the figure the 40 ms stall (Nagle plus delayed ACK) showed in."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    request = f"GET {poll_target(1)} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    took = []
    try:
        for _ in range(SEQUENTIAL_REQUESTS):
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            took.append(time.perf_counter() - start)
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"{base_url}: {head.splitlines()[0]!r}, not 200")
    finally:
        writer.close()
    return round(statistics.median(took) * 1000, 2)


async def main() -> None:
    parse_tiny(__doc__)
    wrk = require_wrk()
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="tempoconf-bench-dev-") as scratch:
        data_dir = Path(scratch) / "state"
        dev_port, api_port = free_port(), free_port()
        dev = CliProcess(
            f"http://127.0.0.1:{dev_port}",
            "dev", "--data-dir", str(data_dir), "--temporal-port", "0", "--ui-port", "0",
            "--api-port", str(dev_port),
        )  # fmt: skip
        async with bounded(600, "the dev-serving benchmark"), dev:
            url = f"sqlite:///{(data_dir / 'tempoconf.db').resolve()}"
            seed_live_rollout(url)
            await wait_for_config(dev.base_url)
            api = CliProcess(
                f"http://127.0.0.1:{api_port}",
                "api", "--host", "127.0.0.1", "--port", str(api_port), "--database-url", url,
            )  # fmt: skip
            async with api:
                await wait_for_config(api.base_url)
                latency_ms = {
                    "api": await keep_alive_latency_ms(api.base_url),
                    "dev": await keep_alive_latency_ms(dev.base_url),
                }
                log(f"one keep-alive connection, median ms per 200: {latency_ms}")
                script = write_lua_200(Path(scratch))
                rounds: list[dict[str, float]] = []
                for number in range(1, ROUNDS + 1):
                    measured: dict[str, float] = {}
                    for name, server in (("api", api), ("dev", dev)):
                        await run_wrk(wrk, server.base_url, script, WARMUP_SECONDS)
                        measured[name] = await run_wrk(
                            wrk, server.base_url, script, DURATION_SECONDS
                        )
                        log(f"round {number}: {name} {measured[name]:.0f} requests/s (200s)")
                    rounds.append(measured)
    ratio = statistics.median(r["dev"] / r["api"] for r in rounds)
    emit(
        {
            "bench": "dev_serving",
            "clients": CLIENTS,
            "answers": "200 (full value, keep-alive)",
            "wrk": wrk_settings(ROUNDS),
            "dev_rps": round(statistics.median(r["dev"] for r in rounds)),
            "api_rps": round(statistics.median(r["api"] for r in rounds)),
            "ratio": round(ratio, 3),
            "keep_alive_sequential_median_ms": latency_ms,
            "rounds": paired_rounds(rounds, "dev", "api"),
            "goal": f"ratio >= {GOAL_RATIO}",
            "goal_met": ratio >= GOAL_RATIO,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
