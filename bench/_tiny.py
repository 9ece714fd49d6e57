"""`make bench-tiny`: runs each benchmark given with `--tiny` and checks that it ran (exit 0, its
last stdout line a JSON object with a "bench" key), not its figures. Prints the time each took;
a failure's output tail is shown, and the run goes on to the next. Exits 1 if any failed.

    .venv/bin/python bench/_tiny.py [--jobs N] bench/bench_*.py

`--jobs N` runs N at once (default 1): their figures are not read, and most of a tiny run is
spent waiting for servers to start, so CI runs three at a time. Each benchmark takes free ports
and temporary folders of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TIMEOUT_SECONDS = 300
"""One tiny benchmark runs in seconds; past this it is stuck (its process group is killed)."""
TAIL_CHARS = 4000


def problem_with(returncode: int, stdout: str) -> str | None:
    """What is wrong with a finished run, or None when it ran."""
    if returncode != 0:
        return f"exited {returncode}"
    lines = stdout.strip().splitlines()
    if not lines:
        return "printed nothing on stdout"
    try:
        figures = json.loads(lines[-1])
    except json.JSONDecodeError as error:
        return f"its last stdout line is not JSON ({error}): {lines[-1][:200]!r}"
    if not isinstance(figures, dict) or "bench" not in figures:
        return f'its last stdout line has no "bench" key: {lines[-1][:200]!r}'
    return None


def run(script: Path) -> tuple[float, str | None]:
    """Seconds the script took with --tiny, and what went wrong (None when nothing did)."""
    started = time.monotonic()
    # A session of its own: on a timeout its servers and load generators are killed with it.
    process = subprocess.Popen(
        [sys.executable, str(script), "--tiny"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_SECONDS)
        problem = problem_with(process.returncode, stdout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        problem = f"still running after {TIMEOUT_SECONDS} s"
    took = time.monotonic() - started
    if problem is not None:
        sys.stderr.write(f"--- {script.name} stderr (tail)\n{stderr[-TAIL_CHARS:]}\n")
        sys.stderr.write(f"--- {script.name} stdout (tail)\n{stdout[-TAIL_CHARS:]}\n")
    return took, problem


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/_tiny.py", description="make bench-tiny")
    parser.add_argument("--jobs", type=int, default=1, help="benchmarks run at once")
    parser.add_argument("scripts", nargs="+", type=Path, metavar="bench/bench_X.py")
    options = parser.parse_args(arguments)
    if options.jobs < 1:
        parser.error(f"--jobs must be 1 or more, not {options.jobs}")
    scripts: list[Path] = options.scripts
    missing = [str(script) for script in scripts if not script.is_file()]
    if missing:
        print(f"bench-tiny: no such benchmark: {', '.join(missing)}", file=sys.stderr)
        return 2
    began = time.monotonic()
    failed: list[str] = []

    def run_and_say(script: Path) -> None:
        took, problem = run(script)
        verdict = "ok" if problem is None else f"FAILED: {problem}"
        print(f"bench-tiny: {script.name:<24} {took:6.1f} s  {verdict}", flush=True)
        if problem is not None:
            failed.append(script.name)

    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        list(pool.map(run_and_say, scripts))
    total = time.monotonic() - began
    summary = f"{len(scripts) - len(failed)} of {len(scripts)} ran in {total:.1f} s"
    print(f"bench-tiny: {summary}" + (f"; failed: {', '.join(sorted(failed))}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
