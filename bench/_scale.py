"""`--tiny`: a benchmark at the smallest sizes that still run every one of its code paths (servers
started, load generated, its JSON line printed), in seconds. `make bench-tiny` runs every
benchmark so, in CI, so that none of them rots; the figures of a tiny run mean nothing.

The flag is read from the command line when a benchmark module is imported, so the sizes other
benchmarks import (bench_poll_cost's wrk durations, bench_propagation's trials) shrink with it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TypeVar

T = TypeVar("T")

TINY_FLAG = "--tiny"
TINY_HELP = "the smallest sizes that run every code path, in seconds (figures mean nothing)"
TINY = TINY_FLAG in sys.argv[1:]


def sized(normal: T, tiny: T) -> T:
    """`tiny` under --tiny, else `normal`."""
    return tiny if TINY else normal


def parse_tiny(description: str | None) -> bool:
    """The command line of a benchmark whose only option is --tiny (anything else is refused)."""
    parser = argparse.ArgumentParser(description=(description or "").split("\n\n")[0])
    parser.add_argument(TINY_FLAG, action="store_true", help=TINY_HELP)
    return bool(parser.parse_args().tiny)
