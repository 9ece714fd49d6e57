"""Propagation: from the moment a stage is committed to the store until the clients it matches
hold the new version, with every client long-polling. Goal: p99 <= 0.3 s with 10,000 clients, on
SQLite and on PostgreSQL, on a quiet machine; the 1,000-client runs are reported as context.

Three kinds of process, as in production: this one writes to the store (as the worker's activity
would), the API serves from its own process, and the clients poll from load-generator processes.
The clock is the wall clock shared by all of them: the stage's time is taken right after
`store.publish_stage` returns, each client's when its 200 arrives.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from _common import (
    CANARY_EVERY,
    CONFIG_PATH,
    NEW_VALUE,
    ApiProcess,
    BenchRollout,
    LoadGen,
    bounded,
    client_identity,
    database,
    emit,
    latency_figures,
    log,
    require_fds,
    seed_config,
)
from _scale import parse_tiny, sized
from sqlalchemy.exc import OperationalError

from tempoconf.resolution import stage_matches
from tempoconf.store.store import Store

GOAL_P99_S = 0.3
GOAL_CLIENTS = 10_000
RUNS = sized(
    [("sqlite", 1000), ("postgresql", 1000), ("sqlite", 10_000), ("postgresql", 10_000)],
    [("sqlite", 100), ("postgresql", 100)],
)
TRIALS = sized(3, 1)
"""Rollouts per run, each measured; the figures pool every trial's per-client latencies."""
LONG_POLL_WAIT = 30.0
SETTLE_TIMEOUT = 15.0
"""After a write, wait at most this long for every client it moves."""
RUN_TIMEOUT = 180.0


async def trial(
    store: Store, api: ApiProcess, fleet: LoadGen, stable: str, number: int
) -> dict[str, Any]:
    """One rollout: a canary stage, then a 50% stage (measured), then a revert (measured)."""
    clients = fleet.count
    everyone = set(range(clients))
    canaries = set(range(0, clients, CANARY_EVERY))
    rollout = BenchRollout(store)
    version = await asyncio.to_thread(rollout.begin, {**NEW_VALUE, "trial": number})
    await asyncio.to_thread(rollout.publish, rollout.stage(0, channel="canary"))
    if not await fleet.until(lambda: fleet.on(version, canaries) == len(canaries), SETTLE_TIMEOUT):
        raise SystemExit("canary clients never got the staged version")
    stage = rollout.stage(1, percentile=50)
    # The clients this publish moves: stable before, the new version after (canaries hold it
    # already, through stage 0).
    movers = {
        i for i in everyone - canaries if stage_matches(stage, CONFIG_PATH, client_identity(i))
    }
    await fleet.settled(api)
    committed_ns = await asyncio.to_thread(rollout.publish, stage)
    await fleet.until(lambda: fleet.on(version, movers) == len(movers), SETTLE_TIMEOUT)
    staged = fleet.latencies(version, movers, committed_ns)
    stayed = everyone - movers - canaries
    strays = len(stayed) - fleet.on(stable, stayed)
    on_version = movers | canaries
    await fleet.settled(api)
    reverted_ns = await asyncio.to_thread(rollout.revert)
    await fleet.until(lambda: fleet.on(stable, everyone) == clients, SETTLE_TIMEOUT)
    reverted = fleet.latencies(stable, on_version, reverted_ns)
    return {
        "movers": len(movers),
        "staged": staged,
        "reverted": reverted,
        "reverted_expected": len(on_version),
        "strays": strays,
    }


async def measure(backend: str, clients: int) -> dict[str, Any]:
    """One run: `clients` long-poll one config while TRIALS rollouts go by."""
    with database(backend) as url:
        store = Store(url, migrate=True)
        try:
            stable = seed_config(store)
            async with (
                ApiProcess("api", url) as api,
                LoadGen(api.port, clients, wait=LONG_POLL_WAIT) as fleet,
            ):
                await fleet.ready(api, timeout=90)
                log(
                    f"{backend}, {clients} clients: all long-polling; {TRIALS} rollouts, each "
                    f"publishing a 50% stage, then reverting"
                )
                trials = [await trial(store, api, fleet, stable, n) for n in range(TRIALS)]
            totals = fleet.totals()
        finally:
            store.close()
    staged = latency_figures(
        [x for t in trials for x in t["staged"]], sum(t["movers"] for t in trials)
    )
    reverted = latency_figures(
        [x for t in trials for x in t["reverted"]], sum(t["reverted_expected"] for t in trials)
    )
    p99 = staged["p99_s"]
    result = {
        "backend": backend,
        "clients": clients,
        "trials": TRIALS,
        "stage_moves_per_trial": trials[0]["movers"],
        **staged,
        "p99_per_trial_s": [latency_figures(t["staged"], t["movers"])["p99_s"] for t in trials],
        "p99_within_goal": p99 is not None and p99 <= GOAL_P99_S,
        "revert_p50_s": reverted["p50_s"],
        "revert_p99_s": reverted["p99_s"],
        "revert_max_s": reverted["max_s"],
        "clients_moved_wrongly": sum(t["strays"] for t in trials),
        "connection_errors": totals["connection_errors"],
    }
    log(f"{backend}, {clients} clients: {result}")
    return result


async def main() -> None:
    parse_tiny(__doc__)
    require_fds(max(count for _, count in RUNS) + 2000)
    runs: list[dict[str, Any]] = []
    for backend, clients in RUNS:
        try:
            async with bounded(RUN_TIMEOUT, f"propagation on {backend} with {clients} clients"):
                runs.append(await measure(backend, clients))
        except OperationalError as exc:
            log(f"{backend} is unavailable, skipped: {exc}")
            runs.append(
                {
                    "backend": backend,
                    "clients": clients,
                    "skipped": f"database unavailable: {str(exc).splitlines()[0]}",
                }
            )
    emit(
        {
            "bench": "propagation",
            "goal": f"p99 <= {GOAL_P99_S:g} s with {GOAL_CLIENTS} clients on SQLite and PostgreSQL",
            "long_poll_wait_s": LONG_POLL_WAIT,
            "runs": runs,
            "goal_met": verdict([run for run in runs if run["clients"] == GOAL_CLIENTS]),
        }
    )


def verdict(judged: list[dict[str, Any]]) -> bool | None:
    """False on any miss; None (unknown) when a judged run was skipped; else True."""
    ran = [run for run in judged if "skipped" not in run]
    if not all(run["p99_within_goal"] for run in ran):
        return False
    return True if len(ran) == len(judged) else None


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
