"""Health-gated promotion and automatic revert, against a live API, a real Prometheus and a real
HTTP judge. Rollouts that run through short holds to their verdict skip time; those that hold
while the test sends reports (judged by when the API received them) or asks Prometheus (judged by
its clock) run on the real clock."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from tempoconf.canonical import version_id
from tests.fixtures.services import free_port, http_judge, live_api, prometheus_server
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import (
    NAMESPACE,
    NEW_VALUE,
    example_request,
    make_stable,
    unique_path,
    wait_for_state,
)

NEW_VERSION = version_id(NEW_VALUE)
# PromQL over the API's report counters; {path} and {version} are tempoconf's placeholders.
FAILED_RATIO_QUERY = (
    'sum(tempoconf_client_operations_total{path="{path}",version="{version}",result="failed"})'
    ' / sum(tempoconf_client_operations_total{path="{path}",version="{version}"})'
)


async def send_reports(
    api: str,
    path: str,
    version: str,
    *,
    clients: int,
    ok: int,
    failed: int,
    prefix: str = "canary",
    channel: str | None = "canary",
    named: bool = True,
) -> None:
    """Reports from `clients` clients `{prefix}-0`, ...; with `named`, each names its identity
    (`channel`, no labels), else none (the API's record of its polls stands in)."""
    identity = {"channel": channel, "labels": {}} if named else {}
    async with httpx.AsyncClient(base_url=api) as http:
        for number in range(clients):
            response = await http.post(
                "/v1/reports",
                json={
                    "path": path,
                    "namespace": NAMESPACE,
                    "client": f"{prefix}-{number}",
                    "version": version,
                    "ok": ok,
                    "failed": failed,
                    **({"error": "timeouts to the db"} if failed else {}),
                    **identity,
                },
            )
            assert response.status_code == 202, response.text


def canary_request(
    path: str, checks: list[dict[str, Any]], *, cooldown: str = "2s"
) -> dict[str, Any]:
    return example_request(
        path, stages=[{"channel": "canary", "cooldown": cooldown}], health=checks
    )


async def watch_progress(handle: Any) -> dict[str, Any] | None:
    """The heartbeat details of the hold's running `watch_stage_health` (None: none running)."""
    description = await handle.describe()
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name == "watch_stage_health":
            payloads = pending.heartbeat_details.payloads
            return json.loads(payloads[0].data) if payloads else None
    return None


async def outcome_of(handle: Any) -> dict[str, Any]:
    return await rollout_result(handle)


@dataclass
class HoldingCanary:
    path: str
    stable: str
    api: str
    handle: Any

    async def end_hold(self) -> dict[str, Any]:
        """End the hold (the reports are in), so the checks judge; the rollout's outcome."""
        await self.handle.execute_update("advance")
        return await outcome_of(self.handle)


@asynccontextmanager
async def holding_canary(
    harness: RolloutHarness, checks: list[dict[str, Any]]
) -> AsyncIterator[HoldingCanary]:
    """A config with a stable version, a live API, and a canary rollout holding for an hour."""
    path = unique_path()
    stable = await make_stable(harness, path)
    async with live_api(harness.store) as api:
        handle = await harness.start(canary_request(path, checks, cooldown="1h"), real_clock=True)
        await wait_for_state(handle, "holding", stage_index=0)
        yield HoldingCanary(path, stable, api, handle)


def assert_reverted_within_the_hold(harness: RolloutHarness, path: str) -> None:
    """The revert came from a check during the canary's one-hour hold, not at its end: told by
    the audit trail's own times (the stage published, the rollout reverted), not the test's."""
    history = harness.store.history(NAMESPACE, path)
    published = min(entry.at for entry in history if entry.action == "stage.published")
    reverted = max(entry.at for entry in history if entry.action == "rollout.reverted")
    assert reverted - published < timedelta(hours=1), (published, reverted)


# -- http ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "timeout", "outcome", "fragment"),
    [
        ("/ok", "2s", "promoted", None),
        ("/fail", "2s", "reverted", "answered 503: the judge says no"),
        ("/slow", "500ms", "reverted", "did not answer within 0.5s"),
    ],
    ids=["2xx", "5xx", "timeout"],
)
async def test_http_check(
    rollout_harness: RolloutHarness, route: str, timeout: str, outcome: str, fragment: str | None
) -> None:
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    with http_judge() as judge:
        handle = await rollout_harness.start(
            canary_request(
                path,
                [{"kind": "http", "url": judge + route, "timeout": timeout, "attempts": 2}],
                cooldown="1s",
            )
        )
        result = await outcome_of(handle)
    assert result["outcome"] == outcome, result
    if fragment:
        assert fragment in result["reason"]
        assert "stage channel:canary is unhealthy" in result["reason"]
        assert rollout_harness.store.get_stable(NAMESPACE, path).version == stable
        progress = await handle.query("status", result_type=dict)
        assert progress["last_health"]["healthy"] is False
        assert fragment in progress["last_health"]["summary"]
        reverted = [
            e
            for e in rollout_harness.store.history(NAMESPACE, path)
            if e.action == "rollout.reverted"
        ]
        assert reverted and fragment in reverted[-1].reason
    if route == "/slow":
        assert "2 attempt(s)" in result["reason"]


# -- reports ------------------------------------------------------------------------------------


async def test_failing_canary_is_reverted_during_the_hold(rollout_harness: RolloutHarness) -> None:
    checks = [{"kind": "reports", "max_error_ratio": 0.1, "min_clients": 2, "interval": "1s"}]
    async with holding_canary(rollout_harness, checks) as canary:
        await send_reports(canary.api, canary.path, NEW_VERSION, clients=3, ok=5, failed=5)
        result = await outcome_of(canary.handle)
    # Reverted by an interval check, not at the end of the one-hour hold.
    assert result["outcome"] == "reverted"
    assert_reverted_within_the_hold(rollout_harness, canary.path)
    # An interval check may run while the reports arrive: 2 or 3 clients, the same ratio.
    assert re.search(
        r"error ratio 0\.5 \(\d+ failed of \d+ operations, [23] client\(s\)\) exceeds max_error_ratio 0\.1",
        result["reason"],
    ), result["reason"]
    assert rollout_harness.store.get_lock(NAMESPACE, canary.path) is None


async def test_failing_canary_is_reverted_at_the_end_of_the_hold(
    rollout_harness: RolloutHarness,
) -> None:
    async with holding_canary(
        rollout_harness, [{"kind": "reports", "max_error_ratio": 0.05}]
    ) as canary:
        await send_reports(canary.api, canary.path, NEW_VERSION, clients=2, ok=90, failed=10)
        result = await canary.end_hold()
        async with httpx.AsyncClient(base_url=canary.api) as http:

            async def canary_back_on_stable() -> bool:
                # The API follows the store within its refresh interval (50 ms on SQLite).
                params = {"client": "c", "channel": "canary"}
                served = (await http.get(f"/v1/configs/{canary.path}", params=params)).json()
                return bool(served["version"] == canary.stable and served["stage"] == "stable")

            await eventually(
                canary_back_on_stable, what="the API to serve stable to the canary again"
            )
    assert result["outcome"] == "reverted"
    assert "exceeds max_error_ratio 0.05" in result["reason"]


async def test_healthy_reports_promote(rollout_harness: RolloutHarness) -> None:
    checks = [{"kind": "reports", "max_error_ratio": 0.05, "min_clients": 2}]
    async with holding_canary(rollout_harness, checks) as canary:
        await send_reports(canary.api, canary.path, NEW_VERSION, clients=3, ok=100, failed=1)
        result = await canary.end_hold()
    assert result["outcome"] == "promoted"
    progress = await canary.handle.query("status", result_type=dict)
    check = progress["last_health"]["checks"][0]
    assert check["verdict"] == "healthy"
    assert check["figures"]["clients"] == 3


async def test_no_data_during_the_hold_is_not_a_failure(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    async with live_api(rollout_harness.store) as api:
        handle = await rollout_harness.start(
            canary_request(
                path,
                [
                    {
                        "kind": "reports",
                        "max_error_ratio": 0.05,
                        "interval": "500ms",
                        "on_no_data": "fail",
                    }
                ],
                cooldown="1h",
            ),
            real_clock=True,  # the hold must still run when the reports arrive
        )
        await wait_for_state(handle, "holding", stage_index=0)

        async def interval_checks_saw_no_data() -> bool:
            progress = await handle.query("status", result_type=dict)
            # no data does not end the hold
            assert progress["state"] == "holding", progress["phase"]
            watch = await watch_progress(handle)
            assert watch is not None and watch["last_report"] is not None, watch
            assert watch["last_report"]["checks"][0]["verdict"] == "no_data", watch
            assert watch["failures"] == {"0": 0}, watch
            return watch["rounds"] >= 3

        # Interval checks see no data, 500 ms apart, and the hold goes on; only its end applies
        # the policy. Three of them in a row: the hold survived more than one. Their verdicts are
        # in the watch's heartbeat details (sent at most every 8 s), not in the workflow's status.
        await eventually(
            interval_checks_saw_no_data, what="three interval checks that saw no data", timeout=30
        )
        progress = await handle.query("status", result_type=dict)
        assert progress["state"] == "holding" and progress["last_health"] is None
        await send_reports(api, path, NEW_VERSION, clients=1, ok=50, failed=0)
        await handle.execute_update("advance")
        result = await outcome_of(handle)
    assert result["outcome"] == "promoted", result


@pytest.mark.parametrize(("policy", "outcome"), [("fail", "reverted"), ("pass", "promoted")])
async def test_too_few_reporters_is_no_data_judged_by_policy(
    rollout_harness: RolloutHarness, policy: str, outcome: str
) -> None:
    checks = [{"kind": "reports", "max_error_ratio": 0.05, "min_clients": 3, "on_no_data": policy}]
    async with holding_canary(rollout_harness, checks) as canary:
        await send_reports(canary.api, canary.path, NEW_VERSION, clients=1, ok=10, failed=0)
        result = await canary.end_hold()
    assert result["outcome"] == outcome
    if outcome == "reverted":
        assert "min_clients is 3" in result["reason"] and "on_no_data=fail" in result["reason"]


@pytest.mark.parametrize(("cohort_failed", "outcome"), [(15, "promoted"), (50, "reverted")])
async def test_baseline_comparison(
    rollout_harness: RolloutHarness, cohort_failed: int, outcome: str
) -> None:
    async with holding_canary(
        rollout_harness, [{"kind": "reports", "max_baseline_factor": 2}]
    ) as canary:
        api, path = canary.api, canary.path
        await send_reports(
            api, path, canary.stable, clients=4, ok=90, failed=10, prefix="stable", channel=None
        )  # baseline 0.1
        await send_reports(
            api, path, NEW_VERSION, clients=2, ok=100 - cohort_failed, failed=cohort_failed
        )
        result = await canary.end_hold()
    assert result["outcome"] == outcome, result
    if outcome == "reverted":
        assert (
            "more than 2x the baseline's 0.1 (4 client(s) outside the cohort, on other versions)"
            in result["reason"]
        )


# -- evidence: the stage's cohort, since the stage was published -----------------------------------


@dataclass
class Reroll:
    path: str
    version: str
    api: str
    handle: Any


@asynccontextmanager
async def rerolling(
    harness: RolloutHarness, checks: list[dict[str, Any]], *, earlier_failed: int
) -> AsyncIterator[Reroll]:
    """A version stable a moment ago, with plenty of fleet reports on it (canaries' included, each
    with `earlier_failed` failures in 100 operations), now replaced by another and rolled out again
    to the canaries: holding its canary stage for an hour."""
    path = unique_path()
    previous = await make_stable(harness, path)
    async with live_api(harness.store) as api:
        ok = 100 - earlier_failed
        await send_reports(api, path, previous, clients=5, ok=ok, failed=earlier_failed)
        await send_reports(
            api,
            path,
            previous,
            clients=20,
            ok=ok,
            failed=earlier_failed,
            prefix="host",
            channel=None,
        )
        replaced = await harness.start({"path": path, "value": NEW_VALUE, "author": "setup"})
        assert (await rollout_result(replaced))["outcome"] == "promoted"
        handle = await harness.start(
            {
                "path": path,
                "namespace": NAMESPACE,
                "version": previous,
                "author": "oncall",
                "stages": [{"channel": "canary", "cooldown": "1h"}],
                "health": checks,
            },
            real_clock=True,
        )
        await wait_for_state(handle, "holding", stage_index=0)
        yield Reroll(path, previous, api, handle)


async def test_a_reroll_of_a_recently_stable_version_without_canary_reports_is_no_data(
    rollout_harness: RolloutHarness,
) -> None:
    """The fleet's reports on the version from before the stage was published say nothing of it."""
    checks = [{"kind": "reports", "max_error_ratio": 0.1, "on_no_data": "fail"}]
    async with rerolling(rollout_harness, checks, earlier_failed=0) as reroll:
        await reroll.handle.execute_update("advance")
        result = await outcome_of(reroll.handle)
    assert result["outcome"] == "reverted", result
    assert result["version"] == reroll.version
    assert "0 client(s) of the cohort reported operations on this version" in result["reason"]
    assert "(stage published)" in result["reason"] and "on_no_data=fail" in result["reason"]
    check = (await reroll.handle.query("status", result_type=dict))["last_health"]["checks"][0]
    assert (
        check["verdict"],
        check["figures"]["clients"],
        check["figures"]["left_out_reports"],
    ) == ("unhealthy", 0, 0)
    assert rollout_harness.store.get_stable(NAMESPACE, reroll.path).version == NEW_VERSION


async def test_reports_from_before_the_publish_do_not_count(
    rollout_harness: RolloutHarness,
) -> None:
    """The fleet's errors on the version in its earlier life do not fail its re-roll."""
    checks = [{"kind": "reports", "max_error_ratio": 0.1, "min_clients": 2}]
    async with rerolling(rollout_harness, checks, earlier_failed=50) as reroll:
        await send_reports(reroll.api, reroll.path, reroll.version, clients=2, ok=99, failed=1)
        await reroll.handle.execute_update("advance")
        result = await outcome_of(reroll.handle)
    assert result["outcome"] == "promoted", result
    check = (await reroll.handle.query("status", result_type=dict))["last_health"]["checks"][0]
    assert (check["figures"]["clients"], check["figures"]["failed"]) == (2, 2)


async def test_reports_from_outside_the_cohort_do_not_count(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    checks = [{"kind": "reports", "max_error_ratio": 0.1, "min_clients": 3}]
    async with holding_canary(rollout_harness, checks) as canary:
        # Hosts outside the cohort on the rollout's version (pinned, or lying) report errors...
        await send_reports(
            canary.api,
            canary.path,
            NEW_VERSION,
            clients=5,
            ok=10,
            failed=90,
            prefix="host",
            channel=None,
        )
        await send_reports(
            canary.api,
            canary.path,
            NEW_VERSION,
            clients=1,
            ok=10,
            failed=90,
            prefix="beta",
            channel="beta",
        )
        # ...a host that names no identity in its report but polls as a canary counts as one...
        async with httpx.AsyncClient(base_url=canary.api) as http:
            polled = await http.get(
                f"/v1/configs/{canary.path}", params={"client": "polled-0", "channel": "canary"}
            )
            assert polled.json()["version"] == NEW_VERSION

        def polled_as_canary() -> bool:
            since = datetime.now(UTC) - timedelta(minutes=5)
            return any(
                seen.client == "polled-0" and seen.channel == "canary"
                for seen in store.recent_clients(NAMESPACE, canary.path, since=since)
            )

        await eventually(
            polled_as_canary, what="the API to record polled-0 as a canary", timeout=20
        )
        await send_reports(
            canary.api,
            canary.path,
            NEW_VERSION,
            clients=1,
            ok=100,
            failed=0,
            prefix="polled",
            named=False,
        )
        # ...and the canaries are healthy.
        await send_reports(canary.api, canary.path, NEW_VERSION, clients=2, ok=99, failed=1)
        result = await canary.end_hold()
    assert result["outcome"] == "promoted", result
    check = (await canary.handle.query("status", result_type=dict))["last_health"]["checks"][0]
    figures = check["figures"]
    assert (figures["clients"], figures["ok"], figures["failed"]) == (3, 298, 2)
    assert (figures["left_out_clients"], figures["left_out_reports"]) == (6, 6)
    assert "evidence: 3 cohort client(s) since " in check["summary"]
    assert (
        "(stage published); 6 report(s) from 6 client(s) outside the cohort left out"
        in check["summary"]
    )


async def test_the_baseline_is_the_clients_outside_the_cohort_since_the_publish(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    async with live_api(rollout_harness.store) as api:
        # Before the publish, the fleet had a bad spell (0.5): it must not excuse the canary.
        await send_reports(
            api, path, stable, clients=4, ok=50, failed=50, prefix="host", channel=None
        )
        handle = await rollout_harness.start(
            canary_request(path, [{"kind": "reports", "max_baseline_factor": 2}], cooldown="1h"),
            real_clock=True,
        )
        await wait_for_state(handle, "holding", stage_index=0)
        await send_reports(
            api, path, stable, clients=4, ok=90, failed=10, prefix="host", channel=None
        )  # 0.1
        # Canaries still on stable (not polled since the publish) are the cohort, not the baseline.
        await send_reports(api, path, stable, clients=2, ok=10, failed=90, prefix="canary-late")
        await send_reports(api, path, NEW_VERSION, clients=2, ok=70, failed=30)  # 0.3 > 2 x 0.1
        await handle.execute_update("advance")
        result = await outcome_of(handle)
    assert result["outcome"] == "reverted", result
    assert (
        "more than 2x the baseline's 0.1 (4 client(s) outside the cohort, on other versions)"
        in result["reason"]
    )


# -- prometheus ---------------------------------------------------------------------------------


async def _wait_for_scrape(prometheus: str, path: str) -> None:
    """Until Prometheus holds the API's report counters for this config."""
    async with httpx.AsyncClient() as http:

        async def scraped() -> list[Any]:
            answer = await http.get(
                f"{prometheus}/api/v1/query",
                params={"query": f'tempoconf_client_operations_total{{path="{path}"}}'},
            )
            return answer.json()["data"]["result"]

        await eventually(
            scraped, what="Prometheus to scrape the API's report counters", timeout=20, interval=0.2
        )


@pytest.mark.parametrize(
    ("failed", "outcome"), [(40, "reverted"), (1, "promoted")], ids=["trips", "holds"]
)
async def test_prometheus_query_over_reports(
    rollout_harness: RolloutHarness, tmp_path: Any, failed: int, outcome: str
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    async with live_api(rollout_harness.store) as api:
        with prometheus_server(tmp_path, api.removeprefix("http://")) as prometheus:
            handle = await rollout_harness.start(
                canary_request(
                    path,
                    [
                        {
                            "kind": "prometheus",
                            "url": prometheus.url,
                            "query": FAILED_RATIO_QUERY,
                            "max": 0.1,
                        }
                    ],
                    cooldown="1h",
                ),
                real_clock=True,  # the hold must still run when Prometheus has scraped the reports
            )
            await wait_for_state(handle, "holding", stage_index=0)
            await send_reports(api, path, NEW_VERSION, clients=2, ok=100 - failed, failed=failed)
            await _wait_for_scrape(prometheus.url, path)
            await handle.execute_update("advance")
            result = await outcome_of(handle)
    assert result["outcome"] == outcome, result
    if outcome == "reverted":
        assert "query value 0.4 is above max 0.1" in result["reason"]


async def test_prometheus_and_http_checks_are_bounded_by_the_stage(
    rollout_harness: RolloutHarness, tmp_path: Any
) -> None:
    """`{since}` and `{elapsed}` reach Prometheus as a time and a range it takes; the judge's URL gets
    the placeholders URL-encoded."""
    path = unique_path()
    await make_stable(rollout_harness, path)
    async with live_api(rollout_harness.store) as api:
        with (
            prometheus_server(tmp_path, api.removeprefix("http://")) as prometheus,
            http_judge() as judge,
        ):
            async with httpx.AsyncClient() as http:

                async def scraped() -> bool:
                    answer = await http.get(
                        f"{prometheus.url}/api/v1/query", params={"query": "up"}
                    )
                    return bool(answer.json()["data"]["result"])

                await eventually(scraped, what="Prometheus's first scrape of the API", timeout=20)
            checks = [
                {
                    "kind": "prometheus",
                    "name": "since",
                    "url": prometheus.url,
                    "query": "time() - {since}",
                    "min": 0,
                    "max": 3600,
                },
                {
                    "kind": "prometheus",
                    "name": "elapsed",
                    "url": prometheus.url,
                    "query": 'count_over_time(up{job="tempoconf-api"}[{elapsed}])',
                    "min": 1,
                },
                {"kind": "http", "url": judge + "/ok?config={path}&stage={stage}&since={since}"},
            ]
            handle = await rollout_harness.start(
                canary_request(path, checks, cooldown="2s"), real_clock=True
            )
            result = await outcome_of(handle)
    assert result["outcome"] == "promoted", result
    progress = await handle.query("status", result_type=dict)
    published = datetime.fromisoformat(progress["stages"][0]["published_at"]).timestamp()
    since_check, elapsed_check, http_check = progress["last_health"]["checks"]
    assert re.fullmatch(r"time\(\) - \d+(\.\d+)?", since_check["figures"]["query"]), since_check
    assert float(since_check["figures"]["query"].removeprefix("time() - ")) == pytest.approx(
        published, abs=0.001
    )
    assert re.fullmatch(
        r'count_over_time\(up\{job="tempoconf-api"\}\[\d+s\]\)', elapsed_check["figures"]["query"]
    )
    judged = re.search(
        r"/ok\?config=(\S+)&stage=(\S+)&since=(\S+) answered 200", http_check["summary"]
    )
    assert judged, http_check["summary"]
    assert judged.group(1, 2) == (path, "channel%3Acanary")
    assert float(judged.group(3)) == pytest.approx(published, abs=0.001)


@pytest.mark.parametrize(("policy", "outcome"), [("pass", "promoted"), ("fail", "reverted")])
async def test_prometheus_no_data_follows_policy(
    rollout_harness: RolloutHarness, tmp_path: Any, policy: str, outcome: str
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    async with live_api(rollout_harness.store) as api:
        with prometheus_server(tmp_path, api.removeprefix("http://")) as prometheus:
            handle = await rollout_harness.start(
                canary_request(
                    path,
                    [
                        {
                            "kind": "prometheus",
                            "url": prometheus.url,
                            "query": FAILED_RATIO_QUERY,
                            "max": 0.1,
                            "on_no_data": policy,
                        }
                    ],
                    cooldown="1s",
                )
            )
            result = await outcome_of(handle)
    assert result["outcome"] == outcome, result
    if outcome == "reverted":
        assert "the query returned no data (no data: on_no_data=fail)" in result["reason"]


async def test_prometheus_unreachable_is_retried_then_failed(
    rollout_harness: RolloutHarness, tmp_path: Any
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    async with live_api(rollout_harness.store) as api:
        with prometheus_server(tmp_path, api.removeprefix("http://")) as prometheus:
            url = prometheus.url
        # Prometheus has stopped: nothing listens on its port any more.
        handle = await rollout_harness.start(
            canary_request(
                path,
                [
                    {
                        "kind": "prometheus",
                        "url": url,
                        "query": FAILED_RATIO_QUERY,
                        "max": 0.1,
                        "attempts": 3,
                        "timeout": "1s",
                    }
                ],
                cooldown="1s",
            )
        )
        result = await outcome_of(handle)
    assert result["outcome"] == "reverted"
    assert "source unreachable after 3 attempt(s)" in result["reason"]
    assert "ConnectError" in result["reason"]


async def test_invalid_check_definitions_fail_before_anything_is_published(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    checks = [
        {"kind": "canary-vibes"},
        {"kind": "prometheus", "url": f"http://127.0.0.1:{free_port()}", "query": "up"},
        {"kind": "prometheus", "url": "http://127.0.0.1:9", "query": 'up{job="{job}"}', "max": 1},
        {"kind": "reports", "max_error_ratio": 0.1, "interval": "-5s"},
    ]
    handle = await rollout_harness.start(canary_request(path, checks))
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidRolloutRequest"
    for pointer, fragment in [
        ("/health/0", "unknown check kind 'canary-vibes'"),
        ("/health/1", "a prometheus check needs a bound"),
        ("/health/2/query", "query uses unknown placeholder(s) ['job']"),
        ("/health/3/interval", "a duration must not be negative"),
    ]:
        assert f"{pointer}: {fragment}" in cause.message, cause.message
    assert rollout_harness.store.get_rollout(NAMESPACE, path) is None
    assert all(
        e.action != "stage.published"
        for e in rollout_harness.store.history(NAMESPACE, path)
        if e.version == NEW_VERSION
    )


@pytest.mark.parametrize("state", ["holding", "paused", "checking_health", "awaiting_approval"])
async def test_halt_wins_from_every_waiting_state(
    rollout_harness: RolloutHarness, state: str
) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    with http_judge() as judge:
        stage: dict[str, Any] = {
            "channel": "canary",
            "cooldown": "1h" if state in ("holding", "paused") else "0s",
        }
        if state == "awaiting_approval":
            stage["manual"] = True
        checks = (
            [{"kind": "http", "url": judge + "/slow", "timeout": "10s"}]
            if state == "checking_health"
            else []
        )
        # The real clock for the hour-long holds: the halt must find them running.
        handle = await rollout_harness.start(
            example_request(path, stages=[stage], health=checks),
            real_clock=state in ("holding", "paused"),
        )
        if state == "paused":
            await wait_for_state(handle, "holding", stage_index=0)
            await handle.execute_update("pause", {"reason": "look closer"})
        else:
            await wait_for_state(handle, state, stage_index=0)
        progress = await handle.execute_update(
            "halt", {"reason": f"halt from {state}", "by": "oncall"}
        )
        assert progress["state"] in ("reverting", "halted")
        result = await outcome_of(handle)
    assert result["outcome"] == "halted" and result["reason"] == f"halt from {state}"
    assert store.get_stable(NAMESPACE, path).version == stable
    assert store.get_rollout(NAMESPACE, path) is None and store.get_lock(NAMESPACE, path) is None


async def test_bypass_skips_the_remaining_checks(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    with http_judge() as judge:
        handle = await rollout_harness.start(
            canary_request(path, [{"kind": "http", "url": judge + "/fail"}], cooldown="1h"),
            real_clock=True,
        )
        await wait_for_state(handle, "holding", stage_index=0)
        await handle.execute_update("bypass", {"reason": "the judge is down, ship it", "by": "cto"})
        result = await outcome_of(handle)
    assert result["outcome"] == "bypassed"
    progress = await handle.query("status", result_type=dict)
    assert progress["last_health"] is None  # no check ran
    assert rollout_harness.store.get_stable(NAMESPACE, path).version == NEW_VERSION


async def test_cancellation_during_a_health_check_reverts_and_ends_cancelled(
    rollout_harness: RolloutHarness,
) -> None:
    from temporalio.exceptions import CancelledError

    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    with http_judge() as judge:
        handle = await rollout_harness.start(
            canary_request(
                path, [{"kind": "http", "url": judge + "/slow", "timeout": "10s"}], cooldown="0s"
            )
        )
        await wait_for_state(handle, "checking_health", stage_index=0)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    assert store.get_stable(NAMESPACE, path).version == stable
    assert store.get_rollout(NAMESPACE, path) is None
    assert any(entry.action == "rollout.cancelled" for entry in store.history(NAMESPACE, path))
