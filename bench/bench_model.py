"""The model check (tests/fuzz/test_model.py), run for a while: random operator steps against a
live stack, each checked against the reference model, for --minutes (default 30). Goal: no step
disagrees with the model.

It runs the test itself under pytest (the stack is the test's fixtures: the Temporal dev server,
a worker, the API over HTTP, the store), in batches of --examples-per-run examples (each of up to
30 steps, TEMPOCONF_MODEL_STEPS) per backend, each backend drawing its own seed in each batch,
until the time is up: a batch that starts before then runs to its end. SQLite, and PostgreSQL too when
TEMPOCONF_TEST_DATABASE_URL is set. The JSON line says what was run (batches, examples, steps,
outcomes per backend) and what was found: each failing batch with the seed of each failing backend
(HYPOTHESIS_SEED=N replays it) and the end of its output.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from _common import BENCH_DIR, PYTHON, emit, log
from _scale import TINY_FLAG, TINY_HELP

ROOT = BENCH_DIR.parent
PREFIX = "model check summary: "  # tests/fuzz/model_stack.py SUMMARY_PREFIX
BATCH_TIMEOUT_SECONDS = 3600
FAILURE_TAIL_CHARS = 3000


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    parser.add_argument(
        "--examples-per-run", type=int, default=10, help="examples per backend in each batch"
    )
    parser.add_argument(TINY_FLAG, action="store_true", help=TINY_HELP)
    return parser.parse_args()


def run_batch(examples: int, both: bool) -> tuple[bool, str]:
    """One pytest run of the model check: whether it passed, and its output."""
    test = "serves_what_the_model_says"  # the model check, not the file's explicit examples
    selection = ["-k", test if both else f"{test} and sqlite"]
    command = [
        PYTHON, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-o", "timeout=0",
        "-m", "fuzz", "tests/fuzz/test_model.py", *selection,
    ]  # fmt: skip
    log(f"model check, {examples} examples per backend: {' '.join(command)}")
    # No HYPOTHESIS_SEED: it would give both backends the same seed, hence the same steps.
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_SEED"}
    env["TEMPOCONF_MODEL_EXAMPLES"] = str(examples)
    try:
        run = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=BATCH_TIMEOUT_SECONDS,
        )  # fmt: skip
    except subprocess.TimeoutExpired as expired:
        return False, str(expired.stdout or "") + f"\n(timed out after {BATCH_TIMEOUT_SECONDS}s)"
    return run.returncode == 0, run.stdout + run.stderr


def main() -> None:
    args = arguments()
    # Tiny: one batch of one example on SQLite (the wrapper is what is checked).
    minutes, per_run = (0.0, 1) if args.tiny else (args.minutes, args.examples_per_run)
    both = bool(os.environ.get("TEMPOCONF_TEST_DATABASE_URL")) and not args.tiny
    started = time.monotonic()
    deadline = started + minutes * 60
    totals: dict[str, dict[str, Any]] = {}
    failures: list[dict[str, Any]] = []
    batches = 0
    while batches == 0 or time.monotonic() < deadline:
        passed, output = run_batch(per_run, both)
        batches += 1
        summarised: set[str] = set()
        for line in output.splitlines():
            if line.startswith(PREFIX):
                summary = json.loads(line[len(PREFIX) :])
                total = totals.setdefault(
                    summary["backend"],
                    {
                        "examples": 0,
                        "operator_steps": 0,
                        "seconds": 0.0,
                        "outcomes": Counter(),
                        "seeds": [],
                    },
                )
                total["examples"] += summary["examples_run"]
                total["operator_steps"] += summary["operator_steps"]
                total["seconds"] += summary["elapsed_seconds"]
                total["outcomes"].update(summary["outcomes"])
                total["seeds"].append(summary["seed"])
                summarised.add(summary["backend"])
        if not passed:
            # A failing backend prints no summary (its examples are not counted above): its seed
            # replays it.
            seeds = dict(re.findall(r"model check on (\w+): seed (\d+)", output))
            failed = {name: int(seed) for name, seed in seeds.items() if name not in summarised}
            failures.append({"seeds": failed, "output_tail": output[-FAILURE_TAIL_CHARS:]})
            sys.stderr.write(output[-FAILURE_TAIL_CHARS:])
    emit(
        {
            "bench": "model",
            "minutes": minutes,
            "examples_per_run": per_run,
            "max_steps": int(os.environ.get("TEMPOCONF_MODEL_STEPS") or 30),
            "batches": batches,
            "backends": {
                name: {
                    **total,
                    "seconds": round(total["seconds"], 1),
                    "outcomes": dict(total["outcomes"]),
                }
                for name, total in totals.items()
            },
            "examples": sum(total["examples"] for total in totals.values()),
            "operator_steps": sum(total["operator_steps"] for total in totals.values()),
            "failures": failures,
            "elapsed_seconds": round(time.monotonic() - started, 1),
            "goal": "every step as the model says",
            "goal_met": not failures,
        }
    )


if __name__ == "__main__":
    main()
