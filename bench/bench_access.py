"""Access on the poll path: requests/s of one API process answering 1,000 clients' conditional
GETs with 304, each poll carrying a bearer token, under an access policy of 1,000 fleets' client
tokens (each checked by its SHA-256, its namespace by pattern) next to the single-team mode's one
client token (a constant-time comparison). Goal: the policy costs at most 5% (ratio >= 0.95).

Both APIs serve the same store in their own processes (uvicorn, httptools, uvloop, one worker);
wrk drives both with the same script, threads, connections and duration, in back-to-back pairs,
each run after its own warm-up; the ratio is the median of the pairs' ratios (the machine is
shared: what else it does shifts both sides of a pair alike). Every answer must be a 304: a
refused token would be a 401 and fail the run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
from _common import (
    ApiProcess,
    bounded,
    database,
    emit,
    log,
    raise_fd_limit,
    require_wrk,
    seed_live_rollout,
)
from _scale import parse_tiny
from bench_poll_cost import (
    CLIENTS,
    DURATION_SECONDS,
    ROUNDS,
    WARMUP_SECONDS,
    cycling_requests,
    lua_string,
    paired_rounds,
    poll_target,
    run_wrk,
    wrk_settings,
)

GOAL_RATIO = 0.95
FLEETS = 1000
"""Client tokens the policy names; the polls use the last one (found by its digest either way)."""
SINGLE_TEAM_TOKEN = "single-team-client-token"


def fleet_secret(i: int) -> str:
    return f"fleet-{i:04d}-" + hashlib.sha256(str(i).encode()).hexdigest()[:24]


def write_policy(directory: Path) -> Path:
    """1,000 fleets, each in its own namespace pattern; the bench's fleet reads `default`."""
    clients = [
        {
            "name": f"fleet-{i:04d}",
            "secret_sha256": hashlib.sha256(fleet_secret(i).encode()).hexdigest(),
            "namespaces": ["default"] if i == FLEETS - 1 else [f"team-{i:04d}", f"team-{i:04d}-*"],
        }
        for i in range(FLEETS)
    ]
    path = directory / "access.json"
    path.write_text(json.dumps({"clients": clients}))
    return path


async def fetch_etags(api: ApiProcess, token: str) -> list[str]:
    """Each client's ETag, as its first poll gets it with `token`; checks that it earns a 304."""
    headers = {"Authorization": f"Bearer {token}"}
    etags: list[str] = []
    async with httpx.AsyncClient(base_url=api.base_url, timeout=10, headers=headers) as http:
        for i in range(CLIENTS):
            answer = await http.get(poll_target(i))
            answer.raise_for_status()
            etags.append(answer.headers["etag"])
        check = await http.get(poll_target(0), headers={"If-None-Match": etags[0]})
        if check.status_code != 304:
            raise SystemExit(f"a matching If-None-Match got {check.status_code}, not 304")
    return etags


def write_lua(directory: Path, name: str, etags: list[str], token: str) -> Path:
    """Polls cycling through the clients, each with its If-None-Match and the bearer token."""
    rows = ",\n".join(
        f"  {{{lua_string(poll_target(i))}, {lua_string(etag)}}}" for i, etag in enumerate(etags)
    )
    auth = lua_string(f"Bearer {token}")
    script = directory / f"{name}.lua"
    script.write_text(
        f"local clients = {{\n{rows}\n}}\n"
        + cycling_requests(
            f'wrk.format("GET", c[1], {{["If-None-Match"] = c[2], ["Authorization"] = {auth}}})'
        )
    )
    return script


async def main() -> None:
    parse_tiny(__doc__)  # --tiny: bench_poll_cost's sizes shrink
    wrk = require_wrk()
    raise_fd_limit()
    with database("sqlite") as url, tempfile.TemporaryDirectory() as scratch:
        seed_live_rollout(url)
        folder = Path(scratch)
        policy_token = fleet_secret(FLEETS - 1)
        os.environ["BENCH_CLIENT_TOKEN"] = SINGLE_TEAM_TOKEN
        async with bounded(600, "the access benchmark"), ApiProcess("api", url) as single_team:
            del os.environ["BENCH_CLIENT_TOKEN"]
            os.environ["BENCH_ACCESS_FILE"] = str(write_policy(folder))
            async with ApiProcess("api", url) as policy:
                del os.environ["BENCH_ACCESS_FILE"]
                runs = (
                    (
                        "single_team",
                        single_team,
                        write_lua(
                            folder,
                            "single_team",
                            await fetch_etags(single_team, SINGLE_TEAM_TOKEN),
                            SINGLE_TEAM_TOKEN,
                        ),
                    ),
                    (
                        "policy",
                        policy,
                        write_lua(
                            folder, "policy", await fetch_etags(policy, policy_token), policy_token
                        ),
                    ),
                )
                rounds: list[dict[str, float]] = []
                for number in range(1, ROUNDS + 1):
                    measured: dict[str, float] = {}
                    # Which side goes first alternates: neither always has the warmer machine.
                    for name, server, lua in runs if number % 2 else runs[::-1]:
                        await run_wrk(wrk, server.base_url, lua, WARMUP_SECONDS)
                        measured[name] = await run_wrk(wrk, server.base_url, lua, DURATION_SECONDS)
                        log(f"round {number}: {name} {measured[name]:.0f} requests/s")
                    rounds.append(measured)
                refused = await policy.metric("tempoconf_api_access_denied_total", lambda _: True)
    ratio = statistics.median(r["policy"] / r["single_team"] for r in rounds)
    emit(
        {
            "bench": "access",
            "clients": CLIENTS,
            "policy_client_tokens": FLEETS,
            "wrk": wrk_settings(),
            "single_team_rps": round(statistics.median(r["single_team"] for r in rounds)),
            "policy_rps": round(statistics.median(r["policy"] for r in rounds)),
            "ratio": round(ratio, 3),
            "rounds": paired_rounds(rounds, "policy", "single_team"),
            "refused": int(refused),
            "goal": f"ratio >= {GOAL_RATIO}",
            "goal_met": ratio >= GOAL_RATIO and refused == 0,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
