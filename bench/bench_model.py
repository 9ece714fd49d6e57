"""The model check (tests/fuzz/test_model.py), run long: TEMPOCONF_MODEL_EXAMPLES examples
(default here 40; CI runs 5) of random operator steps against a live stack, each step checked
against the reference model. Goal: no step disagrees with the model.

It runs the test itself under pytest (the stack is the test's fixtures: the Temporal dev server,
a worker, the API over HTTP, the store) on SQLite, and on PostgreSQL too when
TEMPOCONF_TEST_DATABASE_URL is set; the test's summary lines become the JSON line. The seed is
in it (HYPOTHESIS_SEED=N replays a run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from _common import BENCH_DIR, PYTHON, emit, log
from _scale import parse_tiny

ROOT = BENCH_DIR.parent
PREFIX = "model check summary: "  # tests/fuzz/test_model.py SUMMARY_PREFIX
TIMEOUT_SECONDS = 1800


def main() -> None:
    tiny = parse_tiny(__doc__)
    examples = os.environ.get("TEMPOCONF_MODEL_EXAMPLES") or ("1" if tiny else "40")
    test = "serves_what_the_model_says"  # the model check, not the file's explicit examples
    # Tiny: SQLite only (the wrapper is what is checked; `make test-fuzz` runs both backends).
    both = bool(os.environ.get("TEMPOCONF_TEST_DATABASE_URL")) and not tiny
    selection = ["-k", test if both else f"{test} and sqlite"]
    command = [
        PYTHON, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-o", "timeout=0",
        "-m", "fuzz", "tests/fuzz/test_model.py", *selection,
    ]  # fmt: skip
    log(f"model check, {examples} examples per backend: {' '.join(command)}")
    started = time.monotonic()
    try:
        run = subprocess.run(
            command,
            cwd=ROOT,
            env={**os.environ, "TEMPOCONF_MODEL_EXAMPLES": examples},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
        output, passed = run.stdout, run.returncode == 0
    except subprocess.TimeoutExpired as expired:
        output, passed = str(expired.stdout or ""), False
    runs: list[dict[str, Any]] = [
        json.loads(line[len(PREFIX) :]) for line in output.splitlines() if line.startswith(PREFIX)
    ]
    if not passed:
        sys.stderr.write(output[-6000:])
    emit(
        {
            "bench": "model",
            "examples_per_backend": int(examples),
            "runs": runs,
            "elapsed_seconds": round(time.monotonic() - started, 1),
            "goal": "every step as the model says",
            "goal_met": passed,
        }
    )


if __name__ == "__main__":
    main()
