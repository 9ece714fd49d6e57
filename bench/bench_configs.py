"""Many configs: what a store of 100,000 configs costs the API against one of 10.

    .venv/bin/python bench/bench_configs.py [--configs 100000] [--backend sqlite|postgresql|both]
        [--clients 1000] [--changes 10] [--tiny]

Per backend, two runs on a fresh store each: one of `--configs` configs (values of 1-2 KB of
JSON), one of 10. In each, 1,000 clients long-poll 100 of the configs (10 of them the config the
measured changes are made to), and rollouts write in the background (lease renewals, stages on a
channel nobody is on: 2 writes/s in all, from 20 rollouts, or from one per config left in the
10-config store). Measured:

- start-up: from starting the API process until `/readyz` answers 200 (the snapshots loaded);
- RSS once loaded, before any client (the difference per config between the two runs);
- API CPU per change: `--changes` changes with no background writes, each one commit (a 100%
  stage of a new version, or its revert) that moves the changed config's 10 clients, waited for
  until they hold it; the API's CPU seconds over them, minus its idle rate (the clients
  long-polling, nothing written) over the same time, divided by the changes;
- propagation: `--changes` such changes again with the background rollouts writing, from the
  commit to each of the 10 clients' 200 (p50/p99/max over every client of every change).

Goals (on the large store): propagation p99 within 50 ms of the 10-config store's, at most 5 ms
of API CPU per change, start-up within 10 s. `--tiny`: 1,000 configs, 50 clients, 4 changes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import httpx
from _common import (
    ApiProcess,
    LoadGen,
    bounded,
    cpu_seconds,
    database,
    emit,
    latency_figures,
    log,
    require_fds,
)
from _many_configs import BackgroundRollouts, PathRollout, config_path, config_value, seed_configs
from sqlalchemy.exc import OperationalError

from tempoconf.store.store import Store

BASELINE_CONFIGS = 10
POLLED_CONFIGS = 100
CHANGED_CLIENTS = 10
"""Clients of the config the measured changes are made to (clients 0..9)."""
ROLLOUTS = 20
BACKGROUND_WRITES_PER_S = 2.0
LONG_POLL_WAIT = 30.0
IDLE_SECONDS = 5.0
CHANGE_TIMEOUT = 120.0
"""Wait at most this long for the changed config's clients to hold a change."""
PAUSE = 0.5
"""Between two changes: the clients' next long-polls are in."""
GOAL_EXTRA_P99_S = 0.05
GOAL_CPU_MS = 5.0
GOAL_STARTUP_S = 10.0
RUN_TIMEOUT = 1800.0


def layout(configs: int, clients: int) -> tuple[list[str], list[int], list[str]]:
    """The polled paths, each client's index into them (clients 0..CHANGED_CLIENTS-1 on the
    changed config, index 0; the others spread over the rest), and the background rollouts'
    paths (the last configs of the store, never the changed one)."""
    polled = [config_path(i) for i in range(min(POLLED_CONFIGS, configs))]
    others = max(1, len(polled) - 1)
    changed = min(CHANGED_CLIENTS, clients)
    index = [0 if i < changed else 1 + (i - changed) % others for i in range(clients)]
    rollouts = min(ROLLOUTS, configs - 1)
    background = [config_path(i) for i in range(configs - rollouts, configs)]
    return polled, index, background


async def wait_ready(api: ApiProcess, started: float) -> float:
    """Seconds from `started` until /readyz answers 200."""
    async with httpx.AsyncClient(base_url=api.base_url, timeout=10) as http:
        while (await http.get("/readyz")).status_code != 200:
            await asyncio.sleep(0.05)
    return time.monotonic() - started


async def measure(backend: str, configs: int, clients: int, count: int) -> dict[str, Any]:
    """One run on a fresh store of `configs` configs."""
    polled, index, background_paths = layout(configs, clients)
    with database(backend) as url:
        store = Store(url, migrate=True)
        try:
            seeded = seed_configs(store, configs)
            background = BackgroundRollouts(store, background_paths, BACKGROUND_WRITES_PER_S)
            await asyncio.to_thread(background.begin)
            started = time.monotonic()
            async with ApiProcess("api", url) as api:
                startup_s = await wait_ready(api, started)
                await asyncio.sleep(1.0)
                rss_loaded_mb = api.rss_mb()
                log(f"{backend}, {configs} configs: ready in {startup_s:.2f} s, {rss_loaded_mb} MB")
                async with LoadGen(
                    api.port,
                    clients,
                    wait=LONG_POLL_WAIT,
                    paths=polled,
                    path_index=index,
                    canary_every=0,
                ) as fleet:
                    await fleet.ready(api, timeout=CHANGE_TIMEOUT)
                    stable = fleet.holding[0]
                    idle_before = cpu_seconds(api.pid) or 0.0
                    await asyncio.sleep(IDLE_SECONDS)
                    idle_rate = ((cpu_seconds(api.pid) or 0.0) - idle_before) / IDLE_SECONDS
                    log(f"idle: {idle_rate * 1000:.1f} ms of CPU a second; {count} quiet changes")
                    cpu_before, wall_before = cpu_seconds(api.pid) or 0.0, time.monotonic()
                    quiet, quiet_expected = await changes_from(store, fleet, count, 1, stable)
                    cpu = (cpu_seconds(api.pid) or 0.0) - cpu_before
                    wall = time.monotonic() - wall_before
                    cpu_ms = (cpu - idle_rate * wall) * 1000 / count
                    log(f"{cpu_ms:.1f} ms of CPU a change; {count} changes amid rollouts")
                    async with background.running():
                        loaded, loaded_expected = await changes_from(
                            store, fleet, count, 1000, stable
                        )
                    rss_end_mb = api.rss_mb()
                totals = fleet.totals()
        finally:
            store.close()
    figures = latency_figures(loaded, loaded_expected)
    result = {
        "backend": backend,
        "configs": configs,
        "clients": clients,
        "polled_configs": len(polled),
        "background_rollouts": len(background_paths),
        "background_writes": background.writes,
        "seed": seeded,
        "startup_s": round(startup_s, 2),
        "rss_loaded_mb": rss_loaded_mb,
        "rss_end_mb": rss_end_mb,
        "idle_cpu_ms_per_s": round(idle_rate * 1000, 2),
        "cpu_ms_per_change": round(cpu_ms, 2),
        "quiet": latency_figures(quiet, quiet_expected),
        "changes": count,
        **{key: figures[key] for key in ("clients_expected", "clients_arrived")},
        **{key: figures[key] for key in ("p50_s", "p99_s", "max_s")},
        "connection_errors": totals["connection_errors"],
    }
    log(f"{backend}, {configs} configs: {result}")
    return result


async def changes_from(
    store: Store, fleet: LoadGen, count: int, generation: int, stable: str
) -> tuple[list[float], int]:
    """`count` changes of config 0, alternating a 100% stage of a new version and its revert
    (back to `stable`), each waited for until its clients hold it; returns every client's
    latency (seconds from the commit to its 200) and how many were expected."""
    movers = set(range(min(CHANGED_CLIENTS, fleet.count)))
    latencies: list[float] = []
    rollout: PathRollout | None = None
    for n in range(count):
        if rollout is None:
            rollout = PathRollout(store, config_path(0))
            value = config_value(0, generation + n)
            committed = await asyncio.to_thread(rollout.stage_everyone, value)
            target = rollout.version
        else:
            committed = await asyncio.to_thread(rollout.revert_now)
            target, rollout = stable, None
        arrived = await fleet.until(
            lambda version=target: fleet.on(version, movers) == len(movers),  # type: ignore[misc]
            CHANGE_TIMEOUT,
        )
        if not arrived:
            log(f"change {n}: {fleet.on(target, movers)} of {len(movers)} clients arrived")
        latencies += fleet.latencies(target, movers, committed)
        await asyncio.sleep(PAUSE)
    if rollout is not None:
        await asyncio.to_thread(rollout.revert)
        await fleet.until(lambda: fleet.on(stable, movers) == len(movers), CHANGE_TIMEOUT)
    return latencies, count * len(movers)


def judge(big: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """The goals of one backend: the large store against the 10-config one."""
    p99, base = big["p99_s"], baseline["p99_s"]
    extra = None if p99 is None or base is None else round(p99 - base, 4)
    rss_per_config_kb = round(
        (big["rss_loaded_mb"] - baseline["rss_loaded_mb"])
        * 1000
        / (big["configs"] - baseline["configs"]),
        2,
    )
    goals = {
        "extra_p99_within_50ms": extra is not None and extra <= GOAL_EXTRA_P99_S,
        "cpu_per_change_within_5ms": big["cpu_ms_per_change"] <= GOAL_CPU_MS,
        "startup_within_10s": big["startup_s"] <= GOAL_STARTUP_S,
    }
    return {
        "extra_p99_s": extra,
        "rss_per_config_kb": rss_per_config_kb,
        "goals": goals,
        "goal_met": all(goals.values()),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=10, help="measured changes per phase")
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--tiny", action="store_true", help="1,000 configs, 50 clients: seconds")
    args = parser.parse_args()
    if args.tiny:
        args.configs, args.clients, args.changes = 1000, 50, 4
    if args.configs <= BASELINE_CONFIGS:
        parser.error(f"--configs must be more than the baseline's {BASELINE_CONFIGS}")
    require_fds(args.clients + 1000)
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    per_backend: list[dict[str, Any]] = []
    for backend in backends:
        try:
            async with bounded(RUN_TIMEOUT, f"bench_configs on {backend}"):
                big = await measure(backend, args.configs, args.clients, args.changes)
                baseline = await measure(backend, BASELINE_CONFIGS, args.clients, args.changes)
        except OperationalError as exc:
            log(f"{backend} is unavailable, skipped: {exc}")
            per_backend.append(
                {"backend": backend, "skipped": f"database unavailable: {str(exc).splitlines()[0]}"}
            )
            continue
        per_backend.append(
            {"backend": backend, "large": big, "baseline": baseline, **judge(big, baseline)}
        )
    ran = [run for run in per_backend if "skipped" not in run]
    met: bool | None = all(run["goal_met"] for run in ran)
    if met and len(ran) < len(per_backend):
        met = None
    emit(
        {
            "bench": "configs",
            "configs": args.configs,
            "baseline_configs": BASELINE_CONFIGS,
            "clients": args.clients,
            "changes": args.changes,
            "background_writes_per_s": BACKGROUND_WRITES_PER_S,
            "runs": per_backend,
            "goal": f"with {args.configs} configs: propagation p99 <= the {BASELINE_CONFIGS}-"
            f"config store's + {GOAL_EXTRA_P99_S * 1000:g} ms, <= {GOAL_CPU_MS:g} ms of API CPU "
            f"per change, /readyz 200 within {GOAL_STARTUP_S:g} s of start",
            "goal_met": met,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
