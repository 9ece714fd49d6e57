"""Poll cost: requests/s of one API process answering conditional GETs with 304, for 1,000
distinct clients, next to three references in the same run:

- the lean floor (the goal's): the API's own serving path, api/lean_protocol.py's protocol with
  the API's bounds, answering a constant 304 on the connection with no lookup (bench/_serve.py
  `lean_floor`). Goal: the API reaches at least 0.9 of it.
- nginx answering `If-None-Match` with 304 for a static file (bench/_nginx.py), driven by the same
  wrk script with nginx's ETag: C, with no Python per request (reported, not judged; skipped
  when nginx is not installed).
- the ASGI floor: a raw ASGI app answering a fixed 304 on uvicorn's own protocol (what the API
  was judged against before issue 30; the API's direct answers skip ASGI, so it is no floor).

In the same run, beside the 304 poll: OFREP's bulk evaluation (`POST /ofrep/v1/evaluate/flags`)
for the same 1,000 clients, answered 304 (each with its ETag) and 200 (without one), so the two
protocols are compared on the same process, store and machine load.

Every server is one process (the Python ones uvicorn with httptools and uvloop); wrk drives each
with the same threads, connections and duration, each run after its own warm-up. The machine is
shared (2 cores, wrk on them too), so the servers are measured back to back in rounds, the order
reversed every other round (the floor runs before the API in one round, after it in the next),
and each ratio is the median of the rounds' ratios. `--tiny` runs it in seconds (100 clients,
1 s runs without warm-up, 2 rounds): a smoke test, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    tree_cpu_seconds,
    waited_children_cpu_seconds,
)
from _nginx import NginxProcess, find_nginx
from _scale import sized

CLIENTS = sized(1000, 100)
GOAL_RATIO = 0.9
THREADS = 2
CONNECTIONS = 64
WARMUP_SECONDS = sized(2, 1)
DURATION_SECONDS = sized(8, 1)
ROUNDS = sized(3, 1)
"""Pairs measured by the benches that share this one's script (bench_access.py)."""
ALTERNATING_ROUNDS = 4
"""Rounds measured here: an even number, so each order (floor first, API first) runs as often."""


@dataclass(frozen=True)
class Size:
    """How big a run is: the clients polled, and wrk's seconds and rounds."""

    clients: int = CLIENTS
    warmup_s: int = WARMUP_SECONDS
    duration_s: int = DURATION_SECONDS
    rounds: int = ALTERNATING_ROUNDS


TINY = Size(clients=100, warmup_s=0, duration_s=1, rounds=2)
"""`--tiny`: seconds, for CI (the figures are not meant to be read)."""

OFREP_BULK = "/ofrep/v1/evaluate/flags"

_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_SOCKET_ERRORS = re.compile(r"Socket errors: (.*)")


def poll_target(i: int) -> str:
    identity = client_identity(i)
    target = f"/v1/configs/{CONFIG_PATH}?client={identity.client_id}"
    return target + (f"&channel={identity.channel}" if identity.channel else "")


async def fetch_etags(api: Any, clients: int = CLIENTS) -> list[str]:
    """Each client's ETag, as its first poll would get it; checks that it earns a 304."""
    etags: list[str] = []
    stages: dict[str, int] = {}
    async with httpx.AsyncClient(base_url=api.base_url, timeout=10) as http:
        for i in range(clients):
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


async def fetch_ofrep_etags(api: ApiProcess, clients: int = CLIENTS) -> list[str]:
    """Each client's bulk-evaluation ETag; checks that it earns a 304."""
    etags: list[str] = []
    async with httpx.AsyncClient(base_url=api.base_url, timeout=10) as http:
        for i in range(clients):
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


def write_ofrep_lua(directory: Path, etags: list[str] | None, clients: int = CLIENTS) -> Path:
    """A wrk script of bulk evaluations cycling through the clients, each with its own context
    (and, with `etags`, its own If-None-Match: 304s; without, 200s)."""
    rows = []
    for i in range(clients):
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


def write_lua(directory: Path, etags: list[str], name: str = "polls.lua") -> Path:
    """A wrk script that cycles through the clients, each with its own If-None-Match."""
    rows = ",\n".join(
        f'  {{"{poll_target(i)}", "{etag.replace(chr(34), chr(92) + chr(34))}"}}'
        for i, etag in enumerate(etags)
    )
    script = directory / name
    script.write_text(
        f"local clients = {{\n{rows}\n}}\n"
        + cycling_requests('wrk.format("GET", c[1], {["If-None-Match"] = c[2]})')
    )
    return script


def wrk_settings(rounds: int = ROUNDS, size: Size | None = None) -> dict[str, int]:
    """How wrk drove a run, as every wrk bench prints it."""
    size = size or Size(rounds=rounds)  # the benches that pass `rounds` use the normal size
    return {
        "threads": THREADS,
        "connections": CONNECTIONS,
        "duration_s": size.duration_s,
        "warmup_s": size.warmup_s,
        "rounds": size.rounds,
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


@dataclass(frozen=True)
class Measured:
    """One measured wrk run: requests/s, and the cores the server's processes and wrk used."""

    rps: float
    server_cores: float
    wrk_cores: float

    @property
    def server_us_per_request(self) -> float:
        return 1e6 * self.server_cores / self.rps

    def cores(self) -> dict[str, float]:
        return {
            "server": round(self.server_cores, 2),
            "wrk": round(self.wrk_cores, 2),
            "server_us_per_request": round(self.server_us_per_request, 1),
        }


async def measure(wrk: str, url: str, script: Path, pids: list[int], size: Size) -> Measured:
    """A warm-up (when the size has one), then a measured run; CPU seconds of the server's
    processes (their live descendants included) and of wrk's, over the measured wall time."""
    if size.warmup_s:
        await run_wrk(wrk, url, script, size.warmup_s)
    server_before = sum(tree_cpu_seconds(pid) for pid in pids)
    wrk_before = waited_children_cpu_seconds()
    rps = await run_wrk(wrk, url, script, size.duration_s)
    server = sum(tree_cpu_seconds(pid) for pid in pids) - server_before
    wrk_cpu = waited_children_cpu_seconds() - wrk_before
    return Measured(rps, server / size.duration_s, wrk_cpu / size.duration_s)


def in_round_order(runs: list[Any], number: int) -> list[Any]:
    """Round `number`'s order: as given in odd rounds, reversed in even ones, so no server
    always runs first (on a warmer, or quieter, machine)."""
    return runs if number % 2 else runs[::-1]


def median_of(rounds: list[dict[str, float]], top: str, bottom: str) -> float | None:
    if any(r.get(top) is None or r.get(bottom) is None for r in rounds):
        return None
    return round(statistics.median(r[top] / r[bottom] for r in rounds), 3)


async def main(size: Size) -> None:
    wrk = require_wrk()
    nginx = find_nginx()
    if nginx is None:
        log("nginx is not installed (Debian: apt-get install -y nginx): its figures are null")
    raise_fd_limit()
    with database("sqlite") as url, tempfile.TemporaryDirectory() as scratch:
        seed_live_rollout(url)
        async with (
            bounded(900, "the poll-cost benchmark"),
            ApiProcess("api", url) as api,
            ApiProcess("lean_floor") as lean_floor,
            ApiProcess("floor") as asgi_floor,
            contextlib.AsyncExitStack() as optional,
        ):
            reference = await optional.enter_async_context(NginxProcess(nginx)) if nginx else None
            etags = await fetch_etags(api, size.clients)
            script = write_lua(Path(scratch), etags)
            ofrep_304 = write_ofrep_lua(
                Path(scratch), await fetch_ofrep_etags(api, size.clients), size.clients
            )
            ofrep_200 = write_ofrep_lua(Path(scratch), None, size.clients)
            compared: list[tuple[str, str, list[int], Path]] = [
                ("lean_floor", lean_floor.base_url, [lean_floor.pid], script),
                ("api", api.base_url, [api.pid], script),
                ("asgi_floor", asgi_floor.base_url, [asgi_floor.pid], script),
            ]
            if reference is not None:
                nginx_script = write_lua(
                    Path(scratch), [reference.etag] * size.clients, "nginx.lua"
                )
                compared.append(("nginx", reference.base_url, [reference.pid], nginx_script))
            rounds: list[dict[str, float]] = []
            cores: list[dict[str, dict[str, float]]] = []
            for number in range(1, size.rounds + 1):
                measured: dict[str, float] = {}
                used: dict[str, dict[str, float]] = {}
                order = in_round_order(compared, number) + [
                    ("ofrep_304", api.base_url, [api.pid], ofrep_304),
                    ("ofrep_200", api.base_url, [api.pid], ofrep_200),
                ]
                for name, base_url, pids, lua in order:
                    run = await measure(wrk, base_url, lua, pids, size)
                    measured[name], used[name] = run.rps, run.cores()
                    log(f"round {number}: {name} {run.rps:.0f} requests/s, cores {used[name]}")
                rounds.append(measured)
                cores.append(used)
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

    def rps(name: str) -> int | None:
        if any(name not in r for r in rounds):
            return None
        return round(statistics.median(r[name] for r in rounds))

    def us_per_request(name: str) -> float | None:
        if any(name not in used for used in cores):
            return None
        return round(statistics.median(used[name]["server_us_per_request"] for used in cores), 1)

    ratio = median_of(rounds, "api", "lean_floor")
    assert ratio is not None
    # The same comparison in CPU: what each request cost the server, whoever the scheduler
    # favoured in the round (on a loaded machine the requests/s are the scheduler's as much).
    cpu_ratio = round(
        statistics.median(
            used["lean_floor"]["server_us_per_request"] / used["api"]["server_us_per_request"]
            for used in cores
        ),
        3,
    )
    emit(
        {
            "bench": "poll_cost",
            "clients": size.clients,
            "wrk": wrk_settings(size=size),
            "api_rps": rps("api"),
            "lean_floor_rps": rps("lean_floor"),
            "nginx_rps": rps("nginx"),
            "asgi_floor_rps": rps("asgi_floor"),
            "ratio": ratio,
            "cpu_ratio": cpu_ratio,
            "api_to_nginx": median_of(rounds, "api", "nginx"),
            "api_to_asgi_floor": median_of(rounds, "api", "asgi_floor"),
            "server_us_per_request": {
                name: us_per_request(name) for name in ("api", "lean_floor", "nginx", "asgi_floor")
            },
            "ofrep_bulk_304_rps": rps("ofrep_304"),
            "ofrep_bulk_200_rps": rps("ofrep_200"),
            "ofrep_304_to_poll_304": median_of(rounds, "ofrep_304", "api"),
            "rounds": [
                {
                    "order": [name for name in r if not name.startswith("ofrep")],
                    **{name: round(value) for name, value in r.items()},
                    "ratio": round(r["api"] / r["lean_floor"], 3),
                }
                for r in rounds
            ],
            "cores": cores,
            "api_polls_304": int(not_modified),
            "api_polls_200": int(modified),
            "ofrep_bulk_304": ofrep_counts["304"],
            "ofrep_bulk_200": ofrep_counts["200"],
            "goal": f"ratio (api / lean_floor) >= {GOAL_RATIO}",
            "goal_met": ratio >= GOAL_RATIO,
        }
    )


def size_from_arguments(description: str | None) -> Size:
    """The size a bench's command line asks for: normal, or `--tiny`."""
    parser = argparse.ArgumentParser(description=(description or "").split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a run of seconds (CI smoke test)")
    return TINY if parser.parse_args().tiny else Size()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(size_from_arguments(__doc__))))
