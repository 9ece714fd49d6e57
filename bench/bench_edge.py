"""Propagation through one edge relay: 10,000 clients long-polling `tempoconf edge`, against the
same 10,000 long-polling the origin API, in the same run. Goal: edge p99 <= origin p99 + 0.3 s.

Phase 1: the clients long-poll the origin (an API process over SQLite), and rollouts are measured
as in bench_propagation.py (stage committed to the store → each client holds the new version).
Phase 2: the same number of clients long-poll an edge process (`bench/_serve.py edge`) whose
upstream is that origin; the edge holds ONE long-poll upstream, on the change feed, so the
extra hop is: the origin answers the edge's feed long-poll, the edge fetches the config's bundle,
parses it and answers its own waiters. Same store, same writer, same load generators, one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from _common import (
    ApiProcess,
    LoadGen,
    bounded,
    database,
    emit,
    latency_figures,
    log,
    require_fds,
    seed_config,
)
from _scale import TINY_FLAG, TINY_HELP, sized
from bench_propagation import LONG_POLL_WAIT, TRIALS, trial

from tempoconf.store.store import Store

CLIENTS = sized(10_000, 100)
GOAL_EXTRA_S = 0.3
"""The edge may add this much to the origin's p99."""
PHASE_TIMEOUT = 240.0


async def phase(
    store: Store, stable: str, served_by: ApiProcess, name: str, clients: int, first_trial: int
) -> dict[str, Any]:
    """`clients` long-poll `served_by` while TRIALS rollouts go by (numbered from `first_trial`,
    so each rolls a value of its own); their propagation figures."""
    async with LoadGen(served_by.port, clients, wait=LONG_POLL_WAIT) as fleet:
        await fleet.ready(served_by, timeout=120)
        log(f"{name}: {clients} clients long-polling; {TRIALS} rollouts")
        trials = [
            await trial(store, served_by, fleet, stable, first_trial + n) for n in range(TRIALS)
        ]
    totals = fleet.totals()
    staged = latency_figures(
        [x for t in trials for x in t["staged"]], sum(t["movers"] for t in trials)
    )
    result = {
        "served_by": name,
        "clients": clients,
        **staged,
        "p99_per_trial_s": [latency_figures(t["staged"], t["movers"])["p99_s"] for t in trials],
        "clients_moved_wrongly": sum(t["strays"] for t in trials),
        "connection_errors": totals["connection_errors"],
    }
    log(f"{name}: {result}")
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("clients", type=int, nargs="?", default=CLIENTS)
    parser.add_argument(TINY_FLAG, action="store_true", help=TINY_HELP)
    clients = parser.parse_args().clients
    require_fds(clients + 2000)
    with database("sqlite") as url:
        store = Store(url, migrate=True)
        try:
            stable = seed_config(store)
            async with ApiProcess("api", url) as origin:
                async with bounded(PHASE_TIMEOUT, f"propagation at the origin, {clients} clients"):
                    direct = await phase(store, stable, origin, "origin", clients, 0)
                async with ApiProcess("edge", origin.base_url) as edge:
                    async with bounded(
                        PHASE_TIMEOUT, f"propagation via an edge, {clients} clients"
                    ):
                        relayed = await phase(store, stable, edge, "edge", clients, TRIALS)
        finally:
            store.close()
    origin_p99, edge_p99 = direct["p99_s"], relayed["p99_s"]
    met = (
        origin_p99 is not None
        and edge_p99 is not None
        and edge_p99 <= origin_p99 + GOAL_EXTRA_S
        and relayed["clients_arrived"] == relayed["clients_expected"]
    )
    emit(
        {
            "bench": "edge",
            "goal": f"edge p99 <= origin p99 + {GOAL_EXTRA_S:g} s, {clients} long-polling clients",
            "backend": "sqlite",
            "long_poll_wait_s": LONG_POLL_WAIT,
            "origin": direct,
            "edge": relayed,
            "edge_extra_p99_s": (
                round(edge_p99 - origin_p99, 4)
                if origin_p99 is not None and edge_p99 is not None
                else None
            ),
            "goal_met": met,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
