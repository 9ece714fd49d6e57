"""A prometheus check with a sequential judge against a real Prometheus, scraping a target this
test serves: counters of calls and errors per client, growing with time, on the rollout's version
(the cohort) and on an older one (the baseline). The check's four counts queries reach Prometheus
with their placeholders filled in, and the verdict follows the evidence: a cohort failing five
times as often is a regression, equal rates over many calls are no regression, a few calls are
inconclusive (settled at the end of the hold by `on_inconclusive`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from tempoconf.activities.health import HealthCheckActivities
from tempoconf.rollout.activity_io import CheckHealthInput
from tempoconf.rollout.plan import PlannedStage, RolloutPlan, plan_check
from tempoconf.rollout.progress import CheckResult
from tempoconf.store.store import Store
from tests.fixtures.services import free_port, prometheus_server
from tests.fixtures.waiting import eventually

NEW = "aaaaaaaaaaaaaaaa"
OLD = "bbbbbbbbbbbbbbbb"


@dataclass(frozen=True)
class Clients:
    """Clients of one scenario on one version: each makes `calls` a second, `error_rate` failing."""

    scenario: str
    version: str
    count: int
    calls: float
    error_rate: float


SCENARIOS = [
    # Five times the baseline's error rate.
    Clients("regression", NEW, 6, 500, 0.05),
    Clients("regression", OLD, 20, 500, 0.01),
    # The same rate, over many calls.
    Clients("equal", NEW, 6, 5000, 0.01),
    Clients("equal", OLD, 20, 5000, 0.01),
    # The same rate, over a handful of calls.
    Clients("thin", NEW, 3, 2, 0.01),
    Clients("thin", OLD, 20, 2, 0.01),
]
GHOST = f'errors_total{{scenario="regression",version="{NEW}",client="ghost"}} 3'
"""Errors of a client with no calls series: not a rate, left out (and said so)."""


class _Metrics(BaseHTTPRequestHandler):
    started: float

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        seconds = time.time() - self.started
        lines = ["# TYPE calls_total counter", "# TYPE errors_total counter", GHOST]
        for group in SCENARIOS:
            for index in range(group.count):
                labels = (
                    f'scenario="{group.scenario}",version="{group.version}",'
                    f'client="{group.version[:3]}-{index}"'
                )
                calls = group.calls * seconds
                lines.append(f"calls_total{{{labels}}} {calls}")
                lines.append(f"errors_total{{{labels}}} {calls * group.error_rate}")
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass(frozen=True)
class Source:
    prometheus: str
    started: datetime
    """When the counters were 0: the stage's publish."""


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    started = time.time()
    handler = type("Metrics", (_Metrics,), {"started": started})
    target = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    target.daemon_threads = True
    thread = threading.Thread(target=target.serve_forever, daemon=True)
    thread.start()
    address = f"127.0.0.1:{target.server_address[1]}"
    try:
        with prometheus_server(Path(tmp_path_factory.mktemp("prometheus")), address) as server:
            yield Source(server.url, datetime.fromtimestamp(started, UTC))
    finally:
        target.shutdown()
        target.server_close()


async def _scraped(source: Source) -> None:
    """Until Prometheus holds three scrapes of the target: enough for an `increase`."""

    async def three() -> bool:
        async with httpx.AsyncClient() as http:
            answer = await http.get(
                f"{source.prometheus}/api/v1/query",
                params={"query": "min(count_over_time(calls_total[1m]))"},
            )
        result = answer.json()["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) >= 3

    await eventually(three, what="Prometheus to scrape the target three times", timeout=30)


def _counts(scenario: str) -> dict[str, str]:
    def query(metric: str, version: str) -> str:
        selector = f'{metric}{{scenario="{scenario}",version{version}"{{version}}"}}'
        return f"sum by (client) (increase({selector}[{{elapsed}}]))"

    return {
        "cohort_failed": query("errors_total", "="),
        "cohort_total": query("calls_total", "="),
        "baseline_failed": query("errors_total", "!="),
        "baseline_total": query("calls_total", "!="),
    }


async def _run(
    store: Store, check: dict[str, Any], *, published_at: datetime | None, final: bool = False
) -> CheckResult:
    """One check of a 10% stage of a rollout to NEW, as the workflow asks the activity."""
    plan = RolloutPlan(
        namespace="default",
        path="a/config",
        version=NEW,
        stages=[PlannedStage(index=0, name="10%", percentile=10, health=[plan_check(check, 0)])],
    )
    report = await ActivityEnvironment().run(
        HealthCheckActivities(store).check_stage_health,
        CheckHealthInput(
            plan=plan,
            stage=plan.stages[0],
            final=final,
            published_at=published_at.isoformat() if published_at else None,
        ),
    )
    [result] = report.checks
    return result


def _check(url: str, counts: dict[str, str], **sequential: Any) -> dict[str, Any]:
    return {
        "kind": "prometheus",
        "url": url,
        "judge": {"sequential": {"max_increase": 0.005, **sequential}},
        "counts": counts,
    }


async def _judge(
    store: Store, source: Source, scenario: str, *, final: bool = False, **sequential: Any
) -> dict[str, Any]:
    await _scraped(source)
    result = await _run(
        store,
        _check(source.prometheus, _counts(scenario), **sequential),
        published_at=source.started,
        final=final,
    )
    assert result.name == "prometheus #1 (sequential, max_increase 0.5 pp)"
    return {"verdict": result.verdict, "summary": result.summary, **result.figures}


async def test_five_times_the_error_rate_is_a_regression(
    sqlite_store: Store, source: Source
) -> None:
    judged = await _judge(sqlite_store, source, "regression")

    assert judged["verdict"] == "unhealthy", judged["summary"]
    summary = str(judged["summary"])
    # +4 pp (5% against 1%), its interval wholly above the tolerance, from 6 clients against 20.
    assert summary.startswith("regression: error rate +4."), summary
    assert " at 95%, " in summary and " operations from 6 cohort clients vs " in summary
    assert "from 20 baseline clients" in summary
    assert "the interval lies wholly above max_increase 0.5 pp" in summary
    rate = judged["error_rate"]
    assert 0.005 < rate["lower"] < rate["increase"] < rate["upper"]
    # Exactly: the four queries are evaluated at one time, a client's failed and total over one span.
    assert abs(rate["increase"] - 0.04) < 1e-9
    # The ghost's errors have no calls series: left out, and said so.
    assert '1 cohort failed series without a total series left out ({client="ghost"})' in summary
    assert judged["left_out"] == {
        "cohort_without_total": {"series": 1, "labels": ['{client="ghost"}']}
    }
    # The placeholders reached Prometheus filled in.
    cohort_total = judged["queries"]["cohort_total"]
    assert f'version="{NEW}"' in cohort_total and "{elapsed}" not in cohort_total


async def test_equal_rates_over_many_calls_are_no_regression(
    sqlite_store: Store, source: Source
) -> None:
    judged = await _judge(sqlite_store, source, "equal")

    assert judged["verdict"] == "healthy", judged["summary"]
    assert str(judged["summary"]).startswith("no_regression: error rate "), judged["summary"]
    assert abs(judged["error_rate"]["increase"]) < 1e-9
    assert "wholly below max_increase 0.5 pp" in str(judged["summary"])
    assert judged["error_rate"]["upper"] < 0.005
    assert "left_out" not in judged


async def test_a_few_calls_are_inconclusive_and_settled_at_the_end_of_the_hold(
    sqlite_store: Store, source: Source
) -> None:
    during = await _judge(sqlite_store, source, "thin", on_inconclusive="fail")
    assert during["verdict"] == "inconclusive", during["summary"]
    rate = during["error_rate"]
    assert rate["lower"] < 0.005 < rate["upper"]
    assert "across max_increase 0.5 pp" in str(during["summary"])

    at_the_end = await _judge(sqlite_store, source, "thin", final=True, on_inconclusive="fail")
    assert at_the_end["verdict"] == "unhealthy"
    assert str(at_the_end["summary"]).endswith(
        "(inconclusive at the end of the hold: on_inconclusive=fail)"
    )
    assert at_the_end["inconclusive"] is True


async def test_a_query_prometheus_refuses_fails_the_check(
    sqlite_store: Store, source: Source
) -> None:
    counts = {**_counts("equal"), "baseline_total": "sum by (client) (rate(calls_total))"}
    result = await _run(
        sqlite_store, _check(source.prometheus, counts), published_at=source.started
    )
    assert result.verdict == "unhealthy"
    assert result.summary.startswith(
        "Prometheus rejected the query 'sum by (client) (rate(calls_total))': "
    ), result.summary


async def test_an_unreachable_prometheus_fails_the_check_after_its_attempts(
    sqlite_store: Store,
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    check = {**_check(url, _counts("equal")), "attempts": 2}
    result = await _run(sqlite_store, check, published_at=None)
    assert result.verdict == "unhealthy"
    assert result.summary.startswith(
        f"source unreachable after 2 attempt(s): {url}/api/v1/query: ConnectError"
    ), result.summary
    assert result.figures == {"attempts": 2}
