"""Gates on applied versions against a live stack: real SDK clients report what they applied
through the real API into the store, and the rollout's stage holds past its cooldown until 95%
of its cohort applied; an apply timeout reverts, or holds for an operator (halt, advance).

Rollouts that wait for clients run on the real clock (the gate rechecks every 10 s); those that
only wait for a timeout skip time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tempoconf.canonical import version_id
from tempoconf.client import AsyncConfigClient, ConfigValue
from tempoconf.gates.applied_gate import APPLY_RECHECK_SECONDS
from tempoconf.store import AppliedReport
from tests.cli.conftest import cli_env, run_cli
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import (
    NAMESPACE,
    NEW_VALUE,
    example_request,
    make_stable,
    served,
    status,
    unique_path,
    wait_for_state,
)

NEW_VERSION = version_id(NEW_VALUE)
# The API writes apply reports every 5 s; the gate looks again every 10 s.
GATE_TIMEOUT = 5.0 + 2 * APPLY_RECHECK_SECONDS + 15.0


def gated(path: str, **gate: Any) -> dict[str, Any]:
    return example_request(
        path, stages=[{"channel": "canary", "cooldown": "1s", "min_applied": 0.95, **gate}]
    )


async def test_a_stage_waits_past_its_cooldown_until_95_percent_applied_then_advances(
    rollout_harness: RolloutHarness, tmp_path: Any
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(gated(path), real_clock=True)
    await eventually(
        lambda: served(store, path, "canary-00", channel="canary")[0] == NEW_VERSION,
        what="the canary stage to be live",
    )

    def reload(value: ConfigValue, *, broken: bool) -> None:
        if broken and value.version == NEW_VERSION:
            raise RuntimeError("reload failed: max_connections above the ulimit")

    async with live_api(store) as api:
        clients = []
        for number in range(20):
            client = AsyncConfigClient(
                api, path, client_id=f"canary-{number:02d}", channel="canary", long_poll_seconds=0
            )
            broken = number >= 18
            client.subscribe(lambda value, broken=broken: reload(value, broken=broken))
            clients.append(client)
        try:
            # Each reads the new version; its subscriber applies it (two fail), and the SDK
            # reports what it applied once the subscriber returned.
            values = await asyncio.gather(*(client.get() for client in clients))
            assert {value.version for value in values} == {NEW_VERSION}

            async def stragglers_listed() -> dict[str, Any]:
                progress = await status(handle)
                gate = progress.get("applied") or {}
                assert (gate.get("cohort"), gate.get("applied")) == (20, 18), gate
                return progress

            progress = await eventually(
                stragglers_listed, what="the gate to count 18/20", timeout=GATE_TIMEOUT
            )
            # The cooldown (1 s) is long over: the ratio holds the stage.
            assert progress["state"] == "waiting_for_apply"
            assert "Waiting for clients of stage channel:canary to apply" in progress["phase"]
            gate = progress["applied"]
            assert gate["met"] is False and gate["straggler_count"] == 2
            assert [s["client"] for s in gate["stragglers"]] == ["canary-18", "canary-19"]
            assert {s["error"] for s in gate["stragglers"]} == {
                "RuntimeError: reload failed: max_connections above the ulimit"
            }
            assert {s["error_version"] for s in gate["stragglers"]} == {NEW_VERSION}

            # `tempoconf clients --not-applied` lists exactly the stragglers.
            env = {**cli_env(), "TEMPOCONF_DATABASE_URL": store.url}
            env.pop("TEMPOCONF_API_URL", None)
            listed = run_cli(
                "clients", path, "--version", NEW_VERSION, "--not-applied", "--json",
                env=env, cwd=tmp_path,
            )  # fmt: skip
            assert listed.returncode == 0, listed.stderr
            rows = json.loads(listed.stdout)
            assert [row["client"] for row in rows] == ["canary-18", "canary-19"]
            assert all(row["apply_error_version"] == NEW_VERSION for row in rows)

            # One straggler fixes its reload: 19 of 20 is 95%, and the stage moves on.
            await clients[18].report_applied(NEW_VERSION)
            result = await asyncio.wait_for(rollout_result(handle), timeout=GATE_TIMEOUT)
        finally:
            for client in clients:
                await client.aclose()
    assert result["outcome"] == "promoted"
    final = await status(handle)
    notes = [row["reason"] for row in final["history"]]
    assert any(
        reason.startswith("apply gate of channel:canary met: applied 19/20") for reason in notes
    )


async def test_apply_timeout_reverts_naming_the_ratio_and_the_stragglers(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    # Three canaries that still run stable (seen by their apply reports).
    store.record_applied(
        NAMESPACE,
        path,
        [AppliedReport(f"canary-{n}", stable, store.now(), channel="canary") for n in range(3)],
    )
    handle = await rollout_harness.start(gated(path, apply_timeout="5m", min_applied=1))
    result = await rollout_result(handle)
    assert result["outcome"] == "reverted"
    assert result["reason"].startswith("apply timeout of stage channel:canary (300s) passed: ")
    assert "applied 0/3 (0%)" in result["reason"] and "3 straggler(s)" in result["reason"]
    assert served(store, path, "canary-0", channel="canary")[0] == stable


async def test_apply_timeout_with_hold_stays_and_says_so_then_halt_and_advance_work(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    request = gated(path, apply_timeout="2m", on_apply_timeout="hold")

    handle = await rollout_harness.start(request)
    progress = await wait_for_state(handle, "apply_timed_out", timeout=30)
    assert progress["phase"].startswith(
        "Apply timeout of stage channel:canary passed, held for an operator (advance or halt)"
    )
    assert progress["applied"]["timed_out"] is True
    assert served(store, path, "canary-0", channel="canary")[0] == NEW_VERSION  # still live
    answer = await handle.execute_update("halt", {"reason": "fleet cannot reload"})
    assert answer["accepted"] is True
    result = await rollout_result(handle)
    assert (result["outcome"], result["reason"]) == ("halted", "fleet cannot reload")
    assert served(store, path, "canary-0", channel="canary")[0] == stable

    # The same, passed by an operator instead: advance goes on as is (and is promoted).
    handle = await rollout_harness.start(request)
    await wait_for_state(handle, "apply_timed_out", timeout=30)
    answer = await handle.execute_update("advance", {"reason": "the stragglers are retired"})
    assert answer["accepted"] is True and answer["message"].startswith(
        "the apply gate of stage 1/1 channel:canary was passed"
    )
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"


async def test_advance_and_bypass_pass_a_waiting_gate(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(gated(path), real_clock=True)
    await wait_for_state(handle, "waiting_for_apply", timeout=30)
    await handle.execute_update("advance", {"reason": "ok"})
    assert (await rollout_result(handle))["outcome"] == "promoted"

    handle = await rollout_harness.start(gated(path, min_applied=1), real_clock=True)
    await wait_for_state(handle, "waiting_for_apply", timeout=30)
    await handle.execute_update("bypass", {"reason": "hotfix"})
    assert (await rollout_result(handle))["outcome"] == "bypassed"
