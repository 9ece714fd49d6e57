"""`tempoconf diff DIR` of a tree of 1,000 configs, 10 of them changed, through the admin API.
Goal: <= 5 s.

The store holds 1,000 promoted configs (values of 1-2 KB, a JSON Schema on 100 of them); the
tree has the same files with 10 values changed. The command runs as a CI job would run it: the
console script in a subprocess, with only TEMPOCONF_API_URL and an admin token, against the API
in its own process. The same diff in direct mode (the store itself) is measured beside it. Each
figure is the wall time of the whole command, start-up included; SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ApiProcess, database, emit, log, stdout_to_stderr
from _scale import parse_tiny, sized

from tempoconf.canonical import version_id
from tempoconf.resolution import VersionRecord
from tempoconf.store.store import Store

CONFIGS = sized(1000, 20)
CHANGED = sized(10, 2)
WITH_SCHEMA = sized(100, 5)
TRIALS = sized(3, 1)
GOAL_S = 5.0
NAMESPACE = "bench"
TEMPOCONF = Path(sys.executable).parent / "tempoconf"
SCHEMA = {
    "type": "object",
    "required": ["service"],
    "properties": {"replicas": {"type": "integer"}},
}


def value(i: int, generation: int = 0) -> dict[str, Any]:
    """A realistic value of 1-2 KB: a service's settings."""
    return {
        "service": f"svc-{i:04d}",
        "replicas": 3 + generation,
        "endpoints": [f"https://svc-{i:04d}-{n}.example.internal:8443/v1" for n in range(8)],
        "limits": {f"route_{n}": {"rps": 100 * n + i % 7, "burst": 20 + n} for n in range(12)},
        "flags": {f"feature_{n}": (i + n) % 3 == 0 for n in range(16)},
    }


def path(i: int) -> str:
    return f"fleet/group-{i // 100:02d}/svc-{i:04d}"


def seed(url: str) -> None:
    store = Store(url, migrate=True)
    try:
        for i in range(CONFIGS):
            stable = value(i)
            version = version_id(stable)
            store.put_version(NAMESPACE, path(i), VersionRecord(version, stable, author="bench"))
            store.set_stable(
                NAMESPACE, path(i), version, actor="bench", reason="seed", event_key=f"seed:{i}"
            )
            if i < WITH_SCHEMA:
                store.set_schema(NAMESPACE, path(i), SCHEMA, actor="bench")
    finally:
        store.close()


def write_tree(root: Path) -> None:
    """The served configs, 10 of them (spread over the tree) with a new value."""
    changed = {i * (CONFIGS // CHANGED) + 7 for i in range(CHANGED)}
    for i in range(CONFIGS):
        file = root / NAMESPACE / (path(i) + ".json")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(value(i, 1 if i in changed else 0), indent=2))
        if i < WITH_SCHEMA:
            (file.parent / f"svc-{i:04d}.schema.json").write_text(json.dumps(SCHEMA))


def timed_diff(tree: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [str(TEMPOCONF), "diff", str(tree), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 2:
        raise SystemExit(f"diff exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr}")
    started_configs = [c for c in json.loads(done.stdout)["configs"] if c["action"] == "start"]
    if len(started_configs) != CHANGED:
        raise SystemExit(f"diff found {len(started_configs)} changed configs, not {CHANGED}")
    return elapsed


def base_env() -> dict[str, str]:
    env = {
        key: item
        for key, item in os.environ.items()
        if not key.startswith(("TEMPOCONF_", "TEMPORAL_", "OTEL_"))
    }
    return env


async def run(backend: str) -> dict[str, Any]:
    with database(backend) as url, tempfile.TemporaryDirectory(prefix="tempoconf-tree-") as where:
        log(f"{backend}: seeding {CONFIGS} promoted configs")
        seed(url)
        tree = Path(where) / "configs"
        write_tree(tree)
        async with ApiProcess("api", url) as api:
            through_api = {
                **base_env(),
                "TEMPOCONF_API_URL": api.base_url,
                "TEMPOCONF_ADMIN_TOKEN": "bench",  # the API runs with none: any is taken
            }
            direct = {**base_env(), "TEMPOCONF_DATABASE_URL": url}
            api_times, direct_times = [], []
            for trial in range(TRIALS):
                api_times.append(await asyncio.to_thread(timed_diff, tree, through_api))
                direct_times.append(await asyncio.to_thread(timed_diff, tree, direct))
                log(
                    f"{backend}: trial {trial + 1}: api {api_times[-1]:.2f} s, direct {direct_times[-1]:.2f} s"
                )
    return {
        "api_s": {
            "median": round(statistics.median(api_times), 2),
            "max": round(max(api_times), 2),
        },
        "direct_s": {
            "median": round(statistics.median(direct_times), 2),
            "max": round(max(direct_times), 2),
        },
        "goal_met": max(api_times) <= GOAL_S,
    }


def main() -> None:
    parse_tiny(__doc__)
    results: dict[str, Any] = {}
    with stdout_to_stderr():
        for backend in ("sqlite", "postgresql"):
            results[backend] = asyncio.run(run(backend))
    emit(
        {
            "bench": "diff",
            "configs": CONFIGS,
            "changed": CHANGED,
            "goal_s": GOAL_S,
            **results,
            "goal_met": all(result["goal_met"] for result in results.values()),
        }
    )


if __name__ == "__main__":
    main()
