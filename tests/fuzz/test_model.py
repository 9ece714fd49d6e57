"""The model check (issue 12): random sequences of operator commands against a live stack, each
step checked against the small reference model of tests/fuzz/model.py.

The stack is real: the Temporal dev server (tests/fixtures/temporal.py), a worker on the store,
the API over HTTP (tests/fixtures/services.py `live_api`), on SQLite and on PostgreSQL. Every
operator step goes the way `tempoconf rollout ...` goes with TEMPOCONF_API_URL set: the CLI's own
`ApiBackend` through the admin API, which sends the workflow's updates; `terminate` is Temporal's
own (`temporal workflow terminate`), since tempoconf has none. Rollouts run on the real clock
(the model, not a timer, decides when a stage widens: every hold is an hour).

A hypothesis `RuleBasedStateMachine` draws start, halt, bypass, advance, pause, resume, approve,
report (healthy or failing, from inside or outside the cohort), terminate and "wait until a
terminated rollout's leases lapse", on two configs at once. After every step:
- each of 12 client identities per config (tests/fuzz/model.py `identities_for`) is served
  exactly what the model says (version and stage), once the step has propagated;
- no poll, ever, answers a version every client had seen taken away (halted, reverted as
  unhealthy, replaced as stable, a terminated rollout's once its leases ran out);
- a served lease is never expired and never longer than one expiration from now;
- the workflow is where the model says (state, stage, paused), a refused update is refused and
  an accepted one accepted;
- every rollout that ended has exactly one outcome in its audit trail, last, the one the model
  expects, with each of its stages published once (a terminated one: `rollout.terminated`, from
  the sweep that runs beside the worker); a start after a terminate takes or reclaims the lock.

Access where features meet: the stack runs under a two-team policy (tests/fuzz/model_stack.py:
a token of each role in `default` and `team-b`, the model's own admin in both, a fleet client
reading both, the signing key). One config lives in each namespace, and a changeset spans both.
Each start and command is sent as a drawn principal; the model (`Principal.may`) says whether
it is allowed (the role in every namespace the rollout touches) or refused (403 naming the role
missing, and nothing changes). Every approval that counted is taken from its workflow's history
and, at a later step, sent again straight to Temporal, as an update or a signal: it never counts.

In CI: TEMPOCONF_MODEL_EXAMPLES (default 50) examples of up to TEMPOCONF_MODEL_STEPS (default
30) steps per backend. A longer run sets them higher:
`TEMPOCONF_MODEL_EXAMPLES=200 .venv/bin/python -m pytest -s -m fuzz tests/fuzz/test_model.py`,
or `bench/bench_model.py --minutes 30` (`make bench` runs it). The seed is printed
(`-s`, and with a failure's output); HYPOTHESIS_SEED=N replays it. Shrinking is off (an example
costs seconds of real time); TEMPOCONF_MODEL_SHRINK=1 turns it on to minimise a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tempoconf.store.store import Store
from tests.fuzz.model_machine import run_machine
from tests.fuzz.model_stack import (  # noqa: F401 (the model_* are this module's fixtures)
    CONTINUE_AS_NEW_AFTER_EVENTS,
    EXAMPLES,
    STEPS,
    SUMMARY_PREFIX,
    LiveStack,
    model_backend_name,
    model_realtime_client,
    model_temporal_env,
    operator_stack,
)

pytestmark = pytest.mark.fuzz


# A longer run (TEMPOCONF_MODEL_EXAMPLES) gets a longer bound than the suite's 300 s per test.
@pytest.mark.timeout(max(300, EXAMPLES * STEPS * 3))
async def test_the_live_stack_serves_what_the_model_says(
    store: Store,
    backend_name: str,
    temporal_env: WorkflowEnvironment,
    realtime_client: Client,
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("HYPOTHESIS_SEED") or random.randrange(2**32))
    print(
        f"\nmodel check on {backend_name}: seed {seed} (replay: HYPOTHESIS_SEED={seed}), "
        f"{EXAMPLES} example(s) of up to {STEPS} steps"
    )
    started = time.monotonic()
    async with operator_stack(
        store, temporal_env, tmp_path, continue_as_new_after_events=CONTINUE_AS_NEW_AFTER_EVENTS
    ) as (backends, http):
        stack = LiveStack(asyncio.get_running_loop(), backends, http, realtime_client, backend_name)
        try:
            await asyncio.to_thread(run_machine, stack, seed)
        except BaseException as failure:
            # Hypothesis attaches the failing steps as notes, which pytest.fail's message
            # (pytrace=False) would not show.
            print("\n".join(getattr(failure, "__notes__", [])))
            raise
        print(f"model check on {backend_name}: {stack.figures()}")
    elapsed = time.monotonic() - started
    print(f"model check on {backend_name}: {stack.examples} examples passed in {elapsed:.1f}s")
    summary = {**stack.summary(), "seed": seed, "examples": EXAMPLES, "max_steps": STEPS}
    print(f"{SUMMARY_PREFIX}{json.dumps({**summary, 'elapsed_seconds': round(elapsed, 1)})}")
