"""Every core: 304 poll throughput of `tempoconf api --workers 2` next to `tempoconf api` (one
process), on the same store, in the same run. Goal: at least 1.5x (wrk shares the 2 cores).

Both are the real command (a supervisor and two SO_REUSEPORT workers; one process), started as
an operator starts them. wrk drives both with bench_poll_cost's script (1,000 clients, each with
its own If-None-Match), the same threads, connections and duration, after a warm-up each, in
back-to-back pairs; the ratio is the median of the pairs' ratios.

In the same rounds the floor (bench/_serve.py's fixed 304) runs as one process and as two sharing
a port: `floor_ratio` is what two processes can gain on this machine for a request that cheap,
with wrk on the same cores. Once the API answers as cheaply as the floor, its ratio cannot pass
the floor's.

`cores` gives, per round and per run, the cores the server processes (a supervisor's workers
included) and wrk used over the measured seconds, and the server's CPU microseconds per request:
whether a second process costs more per request, and how much of the machine wrk left.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path

from _common import (
    ApiProcess,
    CliProcess,
    bounded,
    database,
    emit,
    free_port,
    log,
    raise_fd_limit,
    require_wrk,
    seed_live_rollout,
    tree_cpu_seconds,
    waited_children_cpu_seconds,
)
from _scale import sized
from bench_poll_cost import (
    CLIENTS,
    DURATION_SECONDS,
    WARMUP_SECONDS,
    fetch_etags,
    paired_rounds,
    run_wrk,
    write_lua,
    wrk_settings,
)

GOAL_RATIO = 1.5
WORKERS = 2
ROUNDS = sized(3, 1)
"""Pairs (one process, then --workers 2) measured."""


def api(database_url: str, workers: int) -> CliProcess:
    port = free_port()
    return CliProcess(
        f"http://127.0.0.1:{port}",
        "api", "--host", "127.0.0.1", "--port", str(port), "--database-url", database_url,
        "--workers", str(workers),
    )  # fmt: skip


async def main() -> None:
    wrk = require_wrk()
    raise_fd_limit()
    with database("sqlite") as url, tempfile.TemporaryDirectory() as scratch:
        seed_live_rollout(url)
        shared = free_port()
        async with (
            bounded(900, "the workers benchmark"),
            api(url, 1) as single,
            api(url, WORKERS) as several,
            ApiProcess("floor") as floor_single,
            contextlib.AsyncExitStack() as floors,
        ):
            floor_pair = [
                await floors.enter_async_context(ApiProcess("floor", shared_port=shared))
                for _ in range(WORKERS)
            ]
            several_floors = f"http://127.0.0.1:{shared}"
            script = write_lua(Path(scratch), await fetch_etags(single))  # type: ignore[arg-type]
            floor_pids = [floor_single.pid]
            rounds: list[dict[str, float]] = []
            cores: list[dict[str, dict[str, float]]] = []
            for number in range(1, ROUNDS + 1):
                measured: dict[str, float] = {}
                used: dict[str, dict[str, float]] = {}
                for name, base_url, pids in (
                    ("floor_one", floor_single.base_url, floor_pids),
                    ("floor_workers", several_floors, [floor.pid for floor in floor_pair]),
                    ("one", single.base_url, [single.pid]),
                    ("workers", several.base_url, [several.pid]),
                ):
                    await run_wrk(wrk, base_url, script, WARMUP_SECONDS)
                    server_before = sum(tree_cpu_seconds(pid) for pid in pids)
                    wrk_before = waited_children_cpu_seconds()
                    measured[name] = await run_wrk(wrk, base_url, script, DURATION_SECONDS)
                    server = sum(tree_cpu_seconds(pid) for pid in pids) - server_before
                    used[name] = {
                        "server": round(server / DURATION_SECONDS, 2),
                        "wrk": round(
                            (waited_children_cpu_seconds() - wrk_before) / DURATION_SECONDS, 2
                        ),
                        "server_us_per_request": round(
                            1e6 * server / (measured[name] * DURATION_SECONDS), 1
                        ),
                    }
                    log(
                        f"round {number}: {name} {measured[name]:.0f} requests/s, cores {used[name]}"
                    )
                rounds.append(measured)
                cores.append(used)
    ratio = statistics.median(r["workers"] / r["one"] for r in rounds)
    floor_ratio = statistics.median(r["floor_workers"] / r["floor_one"] for r in rounds)
    emit(
        {
            "bench": "workers",
            "workers": WORKERS,
            "clients": CLIENTS,
            "wrk": wrk_settings(ROUNDS),
            "one_process_rps": round(statistics.median(r["one"] for r in rounds)),
            "workers_rps": round(statistics.median(r["workers"] for r in rounds)),
            "ratio": round(ratio, 3),
            "floor_one_process_rps": round(statistics.median(r["floor_one"] for r in rounds)),
            "floor_workers_rps": round(statistics.median(r["floor_workers"] for r in rounds)),
            "floor_ratio": round(floor_ratio, 3),
            "rounds": paired_rounds(rounds, "workers", "one"),
            "floor_rounds": paired_rounds(rounds, "floor_workers", "floor_one"),
            "cores": cores,
            "goal": f"ratio >= {GOAL_RATIO}",
            "goal_met": ratio >= GOAL_RATIO,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
