"""Connections: 100,000 open long-polls on one API process, then on one edge relay.

    .venv/bin/python bench/bench_connections.py [--connections 100000] [--fit] [--tiny]

Per phase (the API, then an edge relay of that API), `--connections` clients long-poll one
config (`wait=60`, first waits spread) from load-generator processes of 10,000 clients each,
each binding its connections to a loopback source address of its own (127.0.0.2, 127.0.0.3,
...: one address has about 28,000 ephemeral ports towards one server port). Measured per phase:
the server's VmRSS idle and with every long-poll open (KB per long-poll: the difference over
the connections), then three rollouts as in bench_propagation.py (a canary stage, a measured 50%
stage, a revert), from the store commit to each client's 200.

Goals: <= 6 KB per open long-poll, and a 50% stage's p99 <= 1 s, on the API and on the edge.

Each server process holds one file descriptor per long-poll. The benchmark raises its open-files
limit to the hard limit (children inherit it); when the hard limit cannot hold `--connections`
it says so and stops, or with `--fit` runs the largest round thousand that fits.
`--tiny`: 2,000 connections.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
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
    raise_fd_limit,
    seed_config,
)
from bench_propagation import trial

from tempoconf.store.store import Store

GOAL_KB_PER_LONG_POLL = 6.0
GOAL_P99_S = 1.0
LONG_POLL_WAIT = 60.0
PER_GENERATOR = 10_000
FD_HEADROOM = 1000
"""Descriptors a server needs beside its clients' sockets (the store, the listener, pipes)."""
TRIALS = 3
HOLD_SECONDS = 3.0
READY_TIMEOUT = 300.0
RUN_TIMEOUT = 1800.0


def sources(connections: int) -> list[str]:
    """A loopback source address per generator (127.0.0.0/8 is all loopback): one address has
    about 28,000 ephemeral ports towards one server port (net.ipv4.ip_local_port_range,
    32768-60999 by default), a generator uses PER_GENERATOR of them."""
    return [f"127.0.0.{2 + n}" for n in range(-(-connections // PER_GENERATOR))]


def fit_connections(wanted: int, fit: bool) -> tuple[int, int]:
    """(connections to run, the open-files hard limit); stops, saying why, when the limit is
    too low and `fit` is not given."""
    hard = raise_fd_limit()
    if hard == resource.RLIM_INFINITY or wanted + FD_HEADROOM <= hard:
        return wanted, hard
    largest = (hard - FD_HEADROOM) // 1000 * 1000
    message = (
        f"the open-files hard limit is {hard}: one server process holds a descriptor per "
        f"long-poll, so {wanted} connections need about {wanted + FD_HEADROOM}. Raise it "
        f"(ulimit -Hn as root, LimitNOFILE= for a systemd unit, --ulimit nofile= for a "
        f"container; a process cannot raise its own hard limit without CAP_SYS_RESOURCE)"
    )
    if not fit:
        raise SystemExit(f"{message}, or run with --fit ({largest} connections)")
    log(f"{message}; --fit: running {largest} connections")
    return largest, hard


async def hold_rss(server: ApiProcess) -> float:
    """The highest VmRSS over HOLD_SECONDS."""
    highest = 0.0
    for _ in range(int(HOLD_SECONDS / 0.5)):
        highest = max(highest, server.rss_mb())
        await asyncio.sleep(0.5)
    return highest


async def phase(
    name: str, store: Store, server: ApiProcess, connections: int, stable: str
) -> dict[str, Any]:
    """`connections` clients on `server`: its memory, then TRIALS measured 50% stages."""
    await asyncio.sleep(1.0)  # start-up garbage settles before the idle figure
    idle_mb = server.rss_mb()
    async with LoadGen(
        server.port,
        connections,
        wait=LONG_POLL_WAIT,
        sources=sources(connections),
        per_generator=PER_GENERATOR,
    ) as fleet:
        await fleet.ready(server, timeout=READY_TIMEOUT)
        waiting = int(await server.metric("tempoconf_api_long_polls_waiting"))
        held_mb = await hold_rss(server)
        log(f"{name}: {waiting} long-polls waiting, {idle_mb} -> {held_mb} MB")
        trials = [await trial(store, server, fleet, stable, n) for n in range(TRIALS)]
        rss_end_mb = server.rss_mb()
    totals = fleet.totals()
    staged = latency_figures(
        [x for t in trials for x in t["staged"]], sum(t["movers"] for t in trials)
    )
    reverted = latency_figures(
        [x for t in trials for x in t["reverted"]], sum(t["reverted_expected"] for t in trials)
    )
    kb = round((held_mb - idle_mb) * 1000 / connections, 2)
    p99 = staged["p99_s"]
    result = {
        "connections": connections,
        "long_polls_waiting": waiting,
        "rss_idle_mb": idle_mb,
        "rss_with_long_polls_mb": held_mb,
        "rss_end_mb": rss_end_mb,
        "kb_per_long_poll": kb,
        "stage_moves_per_trial": trials[0]["movers"],
        **{key: staged[key] for key in ("p50_s", "p99_s", "max_s")},
        "p99_per_trial_s": [latency_figures(t["staged"], t["movers"])["p99_s"] for t in trials],
        "revert_p99_s": reverted["p99_s"],
        "clients_moved_wrongly": sum(t["strays"] for t in trials),
        "connection_errors": totals["connection_errors"],
        "goals": {
            "kb_per_long_poll": kb <= GOAL_KB_PER_LONG_POLL,
            "p99_of_a_50pct_stage": p99 is not None and p99 <= GOAL_P99_S,
        },
    }
    log(f"{name}: {result}")
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=100_000)
    parser.add_argument(
        "--fit", action="store_true", help="run the most connections the open-files limit allows"
    )
    parser.add_argument("--tiny", action="store_true", help="2,000 connections: a minute")
    args = parser.parse_args()
    wanted = 2000 if args.tiny else args.connections
    connections, hard = fit_connections(wanted, args.fit)
    phases: dict[str, Any] = {}
    async with bounded(RUN_TIMEOUT, "the connections benchmark"):
        with database("sqlite") as url:
            store = Store(url, migrate=True)
            try:
                stable = seed_config(store)
                async with ApiProcess("api", url) as api:
                    phases["api"] = await phase("api", store, api, connections, stable)
                    async with ApiProcess("edge", api.base_url) as edge:
                        phases["edge"] = await phase("edge", store, edge, connections, stable)
            finally:
                store.close()
    met = all(all(result["goals"].values()) for result in phases.values())
    emit(
        {
            "bench": "connections",
            "connections_wanted": wanted,
            "connections": connections,
            "open_files_hard_limit": hard,
            "limited_by_open_files": connections < wanted,
            "source_addresses": len(sources(connections)),
            "generators": -(-connections // PER_GENERATOR),
            "long_poll_wait_s": LONG_POLL_WAIT,
            "trials": TRIALS,
            **phases,
            "goal": f"on the API and on one edge: <= {GOAL_KB_PER_LONG_POLL:g} KB per open "
            f"long-poll, a 50% stage's p99 <= {GOAL_P99_S:g} s",
            "goal_met": met,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
