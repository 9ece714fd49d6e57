"""Poll cost: requests/s of one API process answering conditional GETs with 304, for 1,000
distinct clients, next to the floor of Python on this machine (a raw ASGI app answering a fixed
304 on the same server settings). Goal: the API reaches at least 0.9 of the floor.

In the same run, beside the 304 poll: OFREP's bulk evaluation (`POST /ofrep/v1/evaluate/flags`)
for the same 1,000 clients, answered 304 (each with its ETag) and 200 (without one), so the two
protocols are compared on the same process, store and machine load.

Both servers are uvicorn (httptools, uvloop, one worker) in their own processes; wrk drives both
with the same threads, connections and duration, each run after its own warm-up. The machine is
shared (2 cores, wrk on them too), so the two are measured in back-to-back pairs and the ratio is
the median of the pairs' ratios: what else the machine does shifts both sides of a pair alike.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import tempfile
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
from _scale import sized

CLIENTS = sized(1000, 100)
GOAL_RATIO = 0.9
THREADS = 2
CONNECTIONS = 64
WARMUP_SECONDS = sized(2, 1)
DURATION_SECONDS = sized(8, 1)
ROUNDS = sized(3, 1)
"""Pairs (floor, then API) measured."""

OFREP_BULK = "/ofrep/v1/evaluate/flags"

_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_SOCKET_ERRORS = re.compile(r"Socket errors: (.*)")


def poll_target(i: int) -> str:
    identity = client_identity(i)
    target = f"/v1/configs/{CONFIG_PATH}?client={identity.client_id}"
    return target + (f"&channel={identity.channel}" if identity.channel else "")


async def fetch_etags(api: ApiProcess) -> list[str]:
    """Each client's ETag, as its first poll would get it; checks that it earns a 304."""
    etags: list[str] = []
    stages: dict[str, int] = {}
    async with httpx.AsyncClient(base_url=api.base_url, timeout=10) as http:
        for i in range(CLIENTS):
            answer = await http.get(poll_target(i))
            answer.raise_for_status()
            etags.append(answer.headers["etag"])
            stage = answer.json()["stage"]
            stages[stage] = stages.get(stage, 0) + 1
        check = await http.get(poll_target(0), headers={"If-None-Match": etags[0]})
        if check.status_code != 304:
            raise SystemExit(f"a matching If-None-Match got {check.status_code}, not 304")
    log(f"clients per stage: {stages}")
    return etags


def ofrep_body(i: int) -> str:
    """Client i's evaluation context, as an OFREP provider sends it on every call."""
    identity = client_identity(i)
    context = {"targetingKey": identity.client_id}
    if identity.channel:
        context["channel"] = identity.channel
    return json.dumps({"context": context}, separators=(",", ":"))


async def fetch_ofrep_etags(api: ApiProcess) -> list[str]:
    """Each client's bulk-evaluation ETag; checks that it earns a 304."""
    etags: list[str] = []
    async with httpx.AsyncClient(base_url=api.base_url, timeout=10) as http:
        for i in range(CLIENTS):
            answer = await http.post(OFREP_BULK, content=ofrep_body(i))
            answer.raise_for_status()
            etags.append(answer.headers["etag"])
        check = await http.post(
            OFREP_BULK, content=ofrep_body(0), headers={"If-None-Match": etags[0]}
        )
        if check.status_code != 304:
            raise SystemExit(f"OFREP: a matching If-None-Match got {check.status_code}, not 304")
    return etags


def cycling_requests(format_call: str) -> str:
    """The rest of a wrk script after its `clients` table: each request made once by
    `format_call` (Lua, over a client row `c`), then sent in turn; threads start at different
    clients."""
    return (
        "local requests = {}\n"
        "local n = 0\n"
        "local i = 0\n"
        "function init(args)\n"
        "  for k, c in ipairs(clients) do\n"
        f"    requests[k] = {format_call}\n"
        "  end\n"
        "  n = #requests\n"
        "  i = math.random(n) - 1\n"
        "end\n"
        "function request()\n"
        "  i = i % n + 1\n"
        "  return requests[i]\n"
        "end\n"
    )


def lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_ofrep_lua(directory: Path, etags: list[str] | None) -> Path:
    """A wrk script of bulk evaluations cycling through the clients, each with its own context
    (and, with `etags`, its own If-None-Match: 304s; without, 200s)."""
    rows = []
    for i in range(CLIENTS):
        headers = '["Content-Type"] = "application/json"'
        if etags is not None:
            headers += f', ["If-None-Match"] = {lua_string(etags[i])}'
        rows.append(f"  {{{{{headers}}}, {lua_string(ofrep_body(i))}}}")
    script = directory / ("ofrep_304.lua" if etags is not None else "ofrep_200.lua")
    script.write_text(
        "local clients = {\n"
        + ",\n".join(rows)
        + "\n}\n"
        + cycling_requests(f'wrk.format("POST", "{OFREP_BULK}", c[1], c[2])')
    )
    return script


def write_lua(directory: Path, etags: list[str]) -> Path:
    """A wrk script that cycles through the clients, each with its own If-None-Match."""
    rows = ",\n".join(
        f'  {{"{poll_target(i)}", "{etag.replace(chr(34), chr(92) + chr(34))}"}}'
        for i, etag in enumerate(etags)
    )
    script = directory / "polls.lua"
    script.write_text(
        f"local clients = {{\n{rows}\n}}\n"
        + cycling_requests('wrk.format("GET", c[1], {["If-None-Match"] = c[2]})')
    )
    return script


def wrk_settings(rounds: int = ROUNDS) -> dict[str, int]:
    """How wrk drove a run, as every wrk bench prints it."""
    return {
        "threads": THREADS,
        "connections": CONNECTIONS,
        "duration_s": DURATION_SECONDS,
        "warmup_s": WARMUP_SECONDS,
        "rounds": rounds,
    }


def paired_rounds(rounds: list[dict[str, float]], top: str, bottom: str) -> list[dict[str, float]]:
    """Each round's two rates (requests/s) and their ratio `top / bottom`, as printed."""
    return [
        {bottom: round(r[bottom]), top: round(r[top]), "ratio": round(r[top] / r[bottom], 3)}
        for r in rounds
    ]


async def run_wrk(wrk: str, url: str, script: Path, seconds: int) -> float:
    """Requests/s that wrk measured; refuses a run with errors or non-304 answers."""
    process = await asyncio.create_subprocess_exec(
        wrk,
        f"-t{THREADS}",
        f"-c{CONNECTIONS}",
        f"-d{seconds}s",
        "-s",
        str(script),
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output = (await process.communicate())[0].decode()
    rps = _RPS.search(output)
    if process.returncode != 0 or rps is None:
        raise SystemExit(f"wrk failed:\n{output}")
    for pattern in (_NON_2XX, _SOCKET_ERRORS):
        if (found := pattern.search(output)) is not None:
            log(f"wrk reports {found.group(0)}")
    return float(rps.group(1))


async def main() -> None:
    wrk = require_wrk()
    raise_fd_limit()
    with database("sqlite") as url, tempfile.TemporaryDirectory() as scratch:
        seed_live_rollout(url)
        async with (
            bounded(600, "the poll-cost benchmark"),
            ApiProcess("api", url) as api,
            ApiProcess("floor") as floor,
        ):
            etags = await fetch_etags(api)
            script = write_lua(Path(scratch), etags)
            ofrep_304 = write_ofrep_lua(Path(scratch), await fetch_ofrep_etags(api))
            ofrep_200 = write_ofrep_lua(Path(scratch), None)
            runs = (
                ("floor", floor, script),
                ("api", api, script),
                ("ofrep_304", api, ofrep_304),
                ("ofrep_200", api, ofrep_200),
            )
            rounds: list[dict[str, float]] = []
            for number in range(1, ROUNDS + 1):
                measured: dict[str, float] = {}
                for name, server, lua in runs:
                    await run_wrk(wrk, server.base_url, lua, WARMUP_SECONDS)
                    measured[name] = await run_wrk(wrk, server.base_url, lua, DURATION_SECONDS)
                    log(f"round {number}: {name} {measured[name]:.0f} requests/s")
                rounds.append(measured)
            ofrep_counts = {
                code: int(
                    await api.metric(
                        "tempoconf_api_ofrep_evaluations_total",
                        lambda labels, code=code: (
                            'kind="bulk"' in labels and f'code="{code}"' in labels
                        ),
                    )
                )
                for code in ("200", "304")
            }
            not_modified = await api.metric(
                "tempoconf_api_polls_total", lambda labels: 'code="304"' in labels
            )
            modified = await api.metric(
                "tempoconf_api_polls_total", lambda labels: 'code="200"' in labels
            )
    ratio = statistics.median(r["api"] / r["floor"] for r in rounds)
    ofrep_ratio = statistics.median(r["ofrep_304"] / r["api"] for r in rounds)
    emit(
        {
            "bench": "poll_cost",
            "clients": CLIENTS,
            "wrk": wrk_settings(),
            "api_rps": round(statistics.median(r["api"] for r in rounds)),
            "floor_rps": round(statistics.median(r["floor"] for r in rounds)),
            "ratio": round(ratio, 3),
            "ofrep_bulk_304_rps": round(statistics.median(r["ofrep_304"] for r in rounds)),
            "ofrep_bulk_200_rps": round(statistics.median(r["ofrep_200"] for r in rounds)),
            "ofrep_304_to_poll_304": round(ofrep_ratio, 3),
            "rounds": [
                {
                    "floor": round(r["floor"]),
                    "api": round(r["api"]),
                    "ratio": round(r["api"] / r["floor"], 3),
                    "ofrep_304": round(r["ofrep_304"]),
                    "ofrep_200": round(r["ofrep_200"]),
                }
                for r in rounds
            ],
            "api_polls_304": int(not_modified),
            "api_polls_200": int(modified),
            "ofrep_bulk_304": ofrep_counts["304"],
            "ofrep_bulk_200": ofrep_counts["200"],
            "goal": f"ratio >= {GOAL_RATIO}",
            "goal_met": ratio >= GOAL_RATIO,
        }
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
