"""Every core: 304 poll throughput of `tempoconf api --workers 2` next to `tempoconf api` (one
process), on the same store, in the same run, judged against what a second process gains the
floor in the same rounds. Goal: the API's ratio (two workers over one process) is at least 0.95
of the lean floor's (two processes over one).

Both are the real command (a supervisor and two SO_REUSEPORT workers; one process), started as
an operator starts them. wrk drives both with bench_poll_cost's script (1,000 clients, each with
its own If-None-Match), the same threads, connections and duration, after a warm-up each, in
back-to-back pairs; the ratio is the median of the pairs' ratios.

In the same rounds the lean floor (bench/_serve.py's `lean_floor`: the API's own protocol
answering a constant 304, no lookup) runs as one process and as two sharing a port with
SO_REUSEPORT: `floor_ratio` is what a second process can gain on this machine for a request that
cheap, with wrk on the same cores (which a 1.5x goal ignored: wrk takes a third of them). The
goal compares the API's gain with that one, round by round (`to_floor_ratio`). The floor runs
before the API in odd rounds and after it in even ones.

`cores` gives, per round and per run, the cores the server processes (a supervisor's workers
included) and wrk used over the measured seconds, and the server's CPU microseconds per request:
whether a second process costs more per request, and how much of the machine wrk left.
`--tiny` runs it in seconds (100 clients, 1 s runs, 2 rounds); its figures mean nothing.
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
)
from bench_poll_cost import (
    Size,
    fetch_etags,
    in_round_order,
    measure,
    median_of,
    paired_rounds,
    size_from_arguments,
    write_lua,
    wrk_settings,
)

GOAL_TO_FLOOR = 0.95
"""The API's gain from a second worker, as a share of the lean floor's in the same round."""
WORKERS = 2


def api(database_url: str, workers: int) -> CliProcess:
    port = free_port()
    return CliProcess(
        f"http://127.0.0.1:{port}",
        "api", "--host", "127.0.0.1", "--port", str(port), "--database-url", database_url,
        "--workers", str(workers),
    )  # fmt: skip


async def main(size: Size) -> None:
    wrk = require_wrk()
    raise_fd_limit()
    with database("sqlite") as url, tempfile.TemporaryDirectory() as scratch:
        seed_live_rollout(url)
        shared = free_port()
        async with (
            bounded(900, "the workers benchmark"),
            api(url, 1) as single,
            api(url, WORKERS) as several,
            ApiProcess("lean_floor") as floor_single,
            contextlib.AsyncExitStack() as floors,
        ):
            floor_pair = [
                await floors.enter_async_context(ApiProcess("lean_floor", shared_port=shared))
                for _ in range(WORKERS)
            ]
            etags = await fetch_etags(single, size.clients)
            script = write_lua(Path(scratch), etags)
            runs = [
                ("floor_one", floor_single.base_url, [floor_single.pid]),
                ("floor_workers", f"http://127.0.0.1:{shared}", [f.pid for f in floor_pair]),
                ("one", single.base_url, [single.pid]),
                ("workers", several.base_url, [several.pid]),
            ]
            rounds: list[dict[str, float]] = []
            cores: list[dict[str, dict[str, float]]] = []
            for number in range(1, size.rounds + 1):
                measured: dict[str, float] = {}
                used: dict[str, dict[str, float]] = {}
                for name, base_url, pids in in_round_order(runs, number):
                    run = await measure(wrk, base_url, script, pids, size)
                    measured[name], used[name] = run.rps, run.cores()
                    log(f"round {number}: {name} {run.rps:.0f} requests/s, cores {used[name]}")
                rounds.append(measured)
                cores.append(used)
    ratio = median_of(rounds, "workers", "one")
    floor_ratio = median_of(rounds, "floor_workers", "floor_one")
    to_floor = [(r["workers"] / r["one"]) / (r["floor_workers"] / r["floor_one"]) for r in rounds]
    to_floor_ratio = round(statistics.median(to_floor), 3)
    emit(
        {
            "bench": "workers",
            "workers": WORKERS,
            "clients": size.clients,
            "wrk": wrk_settings(size=size),
            "one_process_rps": round(statistics.median(r["one"] for r in rounds)),
            "workers_rps": round(statistics.median(r["workers"] for r in rounds)),
            "ratio": ratio,
            "floor": "lean_floor (the API's protocol, a constant 304)",
            "floor_one_process_rps": round(statistics.median(r["floor_one"] for r in rounds)),
            "floor_workers_rps": round(statistics.median(r["floor_workers"] for r in rounds)),
            "floor_ratio": floor_ratio,
            "to_floor_ratio": to_floor_ratio,
            "rounds": [
                {**pair, "to_floor": round(share, 3)}
                for pair, share in zip(
                    paired_rounds(rounds, "workers", "one"), to_floor, strict=True
                )
            ],
            "floor_rounds": paired_rounds(rounds, "floor_workers", "floor_one"),
            "order": [[name for name, _, _ in in_round_order(runs, n)] for n in (1, 2)],
            "cores_median": {
                name: {
                    field: round(statistics.median(used[name][field] for used in cores), 2)
                    for field in ("server", "wrk", "server_us_per_request")
                }
                for name, _, _ in runs
            },
            "cores": cores,
            "goal": f"to_floor_ratio (ratio / floor_ratio, per round) >= {GOAL_TO_FLOOR}",
            "goal_met": to_floor_ratio >= GOAL_TO_FLOOR,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main(size_from_arguments(__doc__))))
