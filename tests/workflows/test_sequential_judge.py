"""The sequential judge on a live stack (a Temporal server, the worker, the API receiving real
reports): a regression reverts during the hold with its interval as the reason; thin evidence is
inconclusive, and `on_inconclusive` decides, extending the hold first when it says so."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.temporal import RolloutHarness
from tests.workflows.test_current_details import current_details
from tests.workflows.test_health import (
    NEW_VERSION,
    assert_reverted_within_the_hold,
    holding_canary,
    outcome_of,
    send_reports,
)
from tests.workflows.test_rollout import NAMESPACE

INTERVAL = re.compile(
    r"error rate \+\d+\.\d+ pp \[\d+\.\d+, \d+\.\d+\] at 95%, [\d,]+ operations from \d+ cohort "
    r"clients vs [\d,]+ from \d+ baseline clients"
)


def judged(**sequential: Any) -> list[dict[str, Any]]:
    return [
        {
            "kind": "reports",
            "interval": "1s",
            "judge": {"sequential": {"max_increase": 0.01, **sequential}},
        }
    ]


async def _baseline(canary: Any, *, clients: int, ok: int, failed: int) -> None:
    """Reports from `clients` hosts outside the cohort (no channel), on the stable version."""
    await send_reports(
        canary.api,
        canary.path,
        canary.stable,
        clients=clients,
        ok=ok,
        failed=failed,
        prefix="stable",
        channel=None,
    )


async def test_a_five_fold_error_rate_reverts_during_the_hold(
    rollout_harness: RolloutHarness,
) -> None:
    async with holding_canary(rollout_harness, judged()) as canary:
        # The baseline: 20 hosts outside the cohort on the stable version, 2% errors.
        await _baseline(canary, clients=20, ok=980, failed=20)
        # The canaries: 10% errors, five times the baseline's.
        await send_reports(canary.api, canary.path, NEW_VERSION, clients=10, ok=900, failed=100)
        result = await outcome_of(canary.handle)
        details = await current_details(canary.handle)
    # Reverted by the interval check, within a one-hour hold.
    assert result["outcome"] == "reverted", result
    assert_reverted_within_the_hold(rollout_harness, canary.path)
    assert "regression: " in result["reason"] and INTERVAL.search(result["reason"]), result
    assert "the interval lies wholly above max_increase 1 pp" in result["reason"]
    progress = await canary.handle.query("status", result_type=dict)
    check = progress["last_health"]["checks"][0]
    assert check["verdict"] == "unhealthy"
    assert check["figures"]["error_rate"]["lower"] > 0.01
    assert INTERVAL.search(details), details
    audit = rollout_harness.store.history(NAMESPACE, canary.path)
    reverted = [row for row in audit if row.action == "rollout.reverted"]
    assert reverted and INTERVAL.search(reverted[-1].reason), reverted


async def _thin_evidence(canary: Any) -> None:
    """A good change with too little evidence to tell: 2 canaries and 3 baseline hosts, 20
    operations each, no error anywhere."""
    await _baseline(canary, clients=3, ok=20, failed=0)
    await send_reports(canary.api, canary.path, NEW_VERSION, clients=2, ok=20, failed=0)


@pytest.mark.parametrize(
    ("policy", "outcome", "said"),
    [
        ({"on_inconclusive": "pass"}, "promoted", "on_inconclusive=pass"),
        ({"on_inconclusive": "fail"}, "reverted", "on_inconclusive=fail"),
        (
            {"on_inconclusive": "extend", "max_extension": "3s", "after_extension": "fail"},
            "reverted",
            "still inconclusive after a 3s extension: after_extension=fail",
        ),
        (
            {"on_inconclusive": "extend", "max_extension": "3s", "after_extension": "pass"},
            "promoted",
            "still inconclusive after a 3s extension: after_extension=pass",
        ),
    ],
    ids=["pass", "fail", "extend-then-fail", "extend-then-pass"],
)
async def test_thin_evidence_is_inconclusive_and_the_policy_decides(
    rollout_harness: RolloutHarness, policy: dict[str, str], outcome: str, said: str
) -> None:
    async with holding_canary(rollout_harness, judged(**policy)) as canary:
        await _thin_evidence(canary)
        started = time.monotonic()
        result = await canary.end_hold()
        waited = time.monotonic() - started
    assert result["outcome"] == outcome, result
    progress = await canary.handle.query("status", result_type=dict)
    check = progress["last_health"]["checks"][0]
    assert "inconclusive: " in check["summary"] and said in check["summary"], check
    assert check["figures"]["error_rate"]["conclusion"] == "inconclusive"
    if outcome == "reverted":
        assert said in result["reason"]
    rows = rollout_harness.store.history(NAMESPACE, canary.path)
    verdicts = [row for row in rows if row.action == "rollout.verdict"]
    if policy["on_inconclusive"] == "extend":
        # The hold went on for the extension, re-checked, and the history says so.
        assert waited >= 3
        assert any("extended by up to 3s" in row.reason for row in verdicts), verdicts
        extended = [
            entry for entry in progress["history"] if "extended by up to 3s" in entry["reason"]
        ]
        assert extended and extended[0]["details"]["verdict"] == "inconclusive"
        assert progress["hold_extended_until"] is None  # over, once concluded
    if outcome == "promoted":
        # The evidence that let it pass is in the audit log.
        assert any(said in row.reason for row in verdicts), verdicts


async def test_a_slower_canary_reverts_on_its_mean_latency(rollout_harness: RolloutHarness) -> None:
    """Latency through the whole path: reports carrying latency_count and latency_sum_ms, the
    store's sums per client, the judge on the mean's increase."""
    checks = [
        {
            "kind": "reports",
            "interval": "1s",
            "judge": {"sequential": {"max_latency_increase_ms": 20}},
        }
    ]
    async with holding_canary(rollout_harness, checks) as canary:
        async with httpx.AsyncClient(base_url=canary.api) as http:
            # 20 baseline hosts near 100 ms an operation, 8 canaries near 250 ms.
            for number, (version, channel, mean) in enumerate(
                [(canary.stable, None, 100.0)] * 20 + [(NEW_VERSION, "canary", 250.0)] * 8
            ):
                mean += (number % 5 - 2) * 4.0  # clients differ a little
                response = await http.post(
                    "/v1/reports",
                    json={
                        "path": canary.path,
                        "namespace": NAMESPACE,
                        "client": f"{channel or 'host'}-{number}",
                        "version": version,
                        "ok": 500,
                        "failed": 0,
                        "latency_count": 500,
                        "latency_sum_ms": 500 * mean,
                        "channel": channel,
                        "labels": {},
                    },
                )
                assert response.status_code == 202, response.text
        result = await outcome_of(canary.handle)
    assert result["outcome"] == "reverted", result
    assert re.search(
        # An interval check may run while the canaries' reports arrive: some of them, or all 8.
        r"regression: mean latency \+1\d\d\.\d+ ms \[\d+\.\d+, \d+\.\d+\] at 95%, [\d,]+ timed "
        r"operations from [1-8] cohort clients? vs 10,000 from 20 baseline clients",
        result["reason"],
    ), result["reason"]
    assert "wholly above max_latency_increase_ms 20 ms" in result["reason"]
