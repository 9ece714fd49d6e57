"""Local evaluation and bundles: how fast the SDK's `LocalConfig` resolves identities in-process,
and what a bundle revalidation (`GET /v1/bundles/{path}` answered 304) costs next to a config
poll's 304 on the same API process.

The store has the benchmarks' live rollout (a canary stage and a 10% stage). First, 1,000
identities are resolved both ways, locally and by `GET /v1/configs/{path}`, and must agree (the
benchmark stops otherwise). Then `LocalConfig.get` runs for 10,000 distinct identities, three
times; the figure is the median time. Then wrk drives the API with bundle 304s and with config
304s (bench_poll_cost's script: 1,000 clients, each with its ETag), in back-to-back pairs.

Goals: 10,000 local evaluations in at most 0.3 s (the issue's propagation bar for 10,000 clients,
with no request at all), and a bundle 304 at least 0.9x as fast as a config poll's 304.
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
    ApiProcess,
    bounded,
    client_identity,
    database,
    emit,
    log,
    raise_fd_limit,
    require_wrk,
    seed_live_rollout,
)
from _scale import parse_tiny, sized
from bench_poll_cost import DURATION_SECONDS, WARMUP_SECONDS, fetch_etags, run_wrk, write_lua

from tempoconf.client import LocalConfig

CHECKED = sized(1000, 100)
EVALUATED = sized(10_000, 1000)
ROUNDS = sized(3, 1)
GOAL_SECONDS = 0.3
GOAL_RATIO = 0.9
BUNDLE = f"/v1/bundles/{CONFIG_PATH}"


def agree(config: LocalConfig, base_url: str) -> dict[str, int]:
    """Resolve CHECKED identities locally and through the API; exit on the first difference."""
    stages: dict[str, int] = {}
    with httpx.Client(base_url=base_url, timeout=10) as http:
        for i in range(CHECKED):
            identity = client_identity(i)
            local = config.get(identity.client_id, identity.channel)
            params = {"client": identity.client_id}
            if identity.channel:
                params["channel"] = identity.channel
            served = http.get(f"/v1/configs/{CONFIG_PATH}", params=params).json()
            if (local.version, local.stage) != (served["version"], served["stage"]):
                raise SystemExit(f"{identity}: locally {local.stage}, the API {served['stage']}")
            stages[local.stage] = stages.get(local.stage, 0) + 1
    return stages


def evaluate(config: LocalConfig) -> float:
    """Seconds for EVALUATED local evaluations of distinct identities."""
    identities = [client_identity(i) for i in range(EVALUATED)]
    began = time.perf_counter()
    for identity in identities:
        config.get(identity.client_id, identity.channel)
    return time.perf_counter() - began


def write_bundle_lua(directory: Path, etag: str) -> Path:
    """A wrk script that revalidates the bundle (the same for every client) with its ETag."""
    script = directory / "bundle.lua"
    quoted = etag.replace("\\", "\\\\").replace('"', '\\"')
    script.write_text(
        f'local r = wrk.format("GET", "{BUNDLE}", {{["If-None-Match"] = "{quoted}"}})\n'
        "function request()\n  return r\nend\n"
    )
    return script


async def main() -> None:
    parse_tiny(__doc__)
    wrk = require_wrk()
    raise_fd_limit()
    with database("sqlite") as url, tempfile.TemporaryDirectory() as scratch:
        seed_live_rollout(url)
        async with bounded(300, "the local-evaluation benchmark"), ApiProcess("api", url) as api:
            with LocalConfig(api.base_url, CONFIG_PATH) as config:
                stages = await asyncio.to_thread(agree, config, api.base_url)
                log(f"{CHECKED} identities agree with the API: {stages}")
                seconds = [await asyncio.to_thread(evaluate, config) for _ in range(ROUNDS)]
                log(f"{EVALUATED} local evaluations: {[round(s, 3) for s in seconds]} s")
            async with httpx.AsyncClient(base_url=api.base_url, timeout=10) as http:
                etag = (await http.get(BUNDLE)).headers["etag"]
                check = await http.get(BUNDLE, headers={"If-None-Match": etag})
                if check.status_code != 304:
                    raise SystemExit(f"a matching If-None-Match got {check.status_code}, not 304")
            bundle_lua = write_bundle_lua(Path(scratch), etag)
            polls_lua = write_lua(Path(scratch), await fetch_etags(api))
            rounds: list[dict[str, float]] = []
            for number in range(1, ROUNDS + 1):
                measured: dict[str, float] = {}
                for name, lua in (("config_304", polls_lua), ("bundle_304", bundle_lua)):
                    await run_wrk(wrk, api.base_url, lua, WARMUP_SECONDS)
                    measured[name] = await run_wrk(wrk, api.base_url, lua, DURATION_SECONDS)
                    log(f"round {number}: {name} {measured[name]:.0f} requests/s")
                rounds.append(measured)
    median = statistics.median(seconds)
    ratio = statistics.median(r["bundle_304"] / r["config_304"] for r in rounds)
    emit(
        {
            "bench": "local",
            "identities_checked": CHECKED,
            "stages": stages,
            "local_evaluations": EVALUATED,
            "local_seconds": round(median, 4),
            "local_evaluations_per_s": round(EVALUATED / median),
            "bundle_304_rps": round(statistics.median(r["bundle_304"] for r in rounds)),
            "config_304_rps": round(statistics.median(r["config_304"] for r in rounds)),
            "bundle_to_config_304": round(ratio, 3),
            "rounds": [{k: round(v) for k, v in r.items()} for r in rounds],
            "goal": f"local_seconds <= {GOAL_SECONDS} and bundle_to_config_304 >= {GOAL_RATIO}",
            "goal_met": median <= GOAL_SECONDS and ratio >= GOAL_RATIO,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
