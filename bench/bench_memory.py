"""Memory: resident memory (VmRSS) of one API process idle, and while it holds 10,000 open
long-polls (`wait=60`). Goals: <= 8 KB per open long-poll (the RSS it adds over idle), and
<= 200 MB RSS with the 10,000 long-polls.

The API (uvicorn, httptools, uvloop, one worker) serves a config with a live rollout (canary and
10% stages) from SQLite; the clients are load-generator processes, so their memory is not counted.
"""

from __future__ import annotations

import asyncio
import sys

from _common import (
    ApiProcess,
    LoadGen,
    bounded,
    database,
    emit,
    log,
    require_fds,
    seed_live_rollout,
)
from _scale import sized

CLIENTS = sized(10_000, 200)
GOAL_MB = 200.0
GOAL_KB_PER_LONG_POLL = 8.0
LONG_POLL_WAIT = 60.0
HOLD_SECONDS = sized(3.0, 1.0)
"""Sample RSS over this long once every long-poll waits, and keep the highest."""
RUN_TIMEOUT = 150.0


async def main() -> None:
    require_fds(CLIENTS + 2000)
    with database("sqlite") as url:
        seed_live_rollout(url)
        async with bounded(RUN_TIMEOUT, "the memory benchmark"), ApiProcess("api", url) as api:
            await asyncio.sleep(1.0)  # let start-up garbage settle before the idle figure
            idle_mb = api.rss_mb()
            log(f"idle: {idle_mb} MB")
            async with LoadGen(api.port, CLIENTS, wait=LONG_POLL_WAIT, spread=False) as fleet:
                await fleet.ready(api, timeout=90)
                waiting = int(await api.metric("tempoconf_api_long_polls_waiting"))
                held_mb = 0.0
                for _ in range(int(HOLD_SECONDS / 0.5)):
                    held_mb = max(held_mb, api.rss_mb())
                    await asyncio.sleep(0.5)
                log(f"{waiting} long-polls waiting: {held_mb} MB")
            errors = fleet.totals()["connection_errors"]
    kb_per_long_poll = round((held_mb - idle_mb) * 1000 / CLIENTS, 1)
    emit(
        {
            "bench": "memory",
            "clients": CLIENTS,
            "long_polls_waiting": waiting,
            "rss_idle_mb": idle_mb,
            "rss_with_long_polls_mb": held_mb,
            "kb_per_long_poll": kb_per_long_poll,
            "connection_errors": errors,
            "goal": f"<= {GOAL_KB_PER_LONG_POLL:g} KB per open long-poll, and RSS <= "
            f"{GOAL_MB:g} MB with {CLIENTS} open long-polls",
            "kb_per_long_poll_goal_met": kb_per_long_poll <= GOAL_KB_PER_LONG_POLL,
            "rss_goal_met": held_mb <= GOAL_MB,
            "goal_met": kb_per_long_poll <= GOAL_KB_PER_LONG_POLL and held_mb <= GOAL_MB,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
