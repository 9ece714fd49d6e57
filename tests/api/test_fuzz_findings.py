"""Holes the abuse suite (tests/fuzz, `make test-fuzz`) found in the API, each kept closed here."""

from __future__ import annotations

import time

import httpx
import pytest

from tempoconf.request import MAX_STAGES

BOUND = 5.0
"""Seconds: generous; the refusal is immediate, the hole was minutes of CPU and gigabytes."""


@pytest.mark.parametrize("step", [1e-12, 1e-6, 0.5])
async def test_a_linear_strategy_of_too_many_stages_is_refused_without_expanding_it(
    client: httpx.AsyncClient, step: float
) -> None:
    # schemathesis drew a tiny step: the plan and start routes expanded it point by point (10^14
    # of them at 1e-12) before counting the stages, taking the API's memory and a thread with it.
    request = {"path": "fuzz/app", "value": 1, "strategy": {"linear": {"step": step}}}
    began = time.perf_counter()

    answer = await client.post("/v1/admin/plans", json=request)

    assert time.perf_counter() - began < BOUND
    assert answer.status_code == 400, answer.text
    (problem,) = answer.json()["problems"]
    assert problem["pointer"].startswith("/strategy")
    assert f"more than {MAX_STAGES} stages" in problem["message"]
