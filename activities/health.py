"""Health checks of a stage's cohort: client reports in the store, Prometheus, or an HTTP judge.

A source that cannot be reached is retried (the check's `attempts`); past that budget the check
counts as failed, with the reason. The activity itself never fails for a check's sake, so a
check never leaves the workflow stuck.

`watch_stage_health` runs the interval checks of a whole hold in one activity, so the workflow's
history does not grow with the hold's length or the checks' interval: it loops the checks on their
schedules, counts failures in a row, heartbeats its progress (a retried attempt resumes from it)
and returns on the first verdict that trips a check's `failure_limit`, or when the hold's time is
up. Both activities heartbeat while they run, so a lost worker is noticed within the
heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import httpx
from pydantic import ValidationError
from temporalio import activity
from temporalio.converter import value_to_type
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from tempoconf.gates.check_templates import placeholder_values, render_promql, render_url
from tempoconf.rollout.activity_io import (
    CHECK_HEALTH_ACTIVITY,
    WATCH_HEALTH_ACTIVITY,
    CheckHealthInput,
    WatchHealthInput,
    WatchHealthProgress,
    WatchHealthResult,
)
from tempoconf.rollout.health_specs import (
    HttpCheckSpec,
    PrometheusCheckSpec,
    PrometheusCountsSpec,
    ReportsCheckSpec,
)
from tempoconf.rollout.health_verdicts import (
    HEALTHY,
    UNHEALTHY,
    apply_no_data_policy,
    cohort_stages,
    evidence_since,
    evidence_window,
    gather_evidence,
    judge_reports,
    judge_samples,
    summarize,
)
from tempoconf.rollout.plan import CheckSpec
from tempoconf.rollout.progress import CheckResult, HealthReport, Verdict
from tempoconf.rollout.prometheus_counts import join_counts, judge_counts
from tempoconf.rollout.run_state import count_failures
from tempoconf.rollout.sequential_verdicts import settle_inconclusive
from tempoconf.store.store import Store

__all__ = [
    "HEARTBEAT_EVERY_SECONDS",
    "HealthCheckActivities",
    "SourceUnreachableError",
    "WatchClock",
]

HEARTBEAT_EVERY_SECONDS = 2.0
"""How often a running health activity heartbeats (the SDK sends at most one per 80% of the
heartbeat timeout; calling more often only keeps the details fresh)."""

T = TypeVar("T")


class WatchClock(Protocol):
    """The clock the watch schedules its checks by: the system's, unless a test runs a day's
    schedule in seconds (a Temporal server does not skip time while an activity runs)."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class SourceUnreachableError(Exception):
    """The check's source did not answer (connection refused, timeout, 5xx from Prometheus)."""


class _Verdict(Exception):
    """A definite answer that retrying cannot change (e.g. PromQL rejected by the server)."""


def _retrying(attempts: int) -> AsyncRetrying:
    return AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        retry=retry_if_exception_type(SourceUnreachableError),
        reraise=True,
    )


class HealthCheckActivities:
    def __init__(self, store: Store, *, clock: WatchClock | None = None) -> None:
        self._store = store
        self._clock: WatchClock = clock or SystemClock()

    def activities(self) -> list[Callable[..., Any]]:
        return [self.check_stage_health, self.watch_stage_health]

    @activity.defn(name=CHECK_HEALTH_ACTIVITY)
    async def check_stage_health(self, input: CheckHealthInput) -> HealthReport:
        indices = (
            input.check_indices
            if input.check_indices is not None
            else range(len(input.stage.health))
        )
        return await _heartbeating(self._report(input, indices), lambda: ())

    async def _report(self, input: CheckHealthInput, indices: Sequence[int]) -> HealthReport:
        results = await asyncio.gather(*(self._run_check(input, index) for index in indices))
        healthy, summary = summarize(results)
        return HealthReport(
            healthy=healthy,
            summary=summary,
            checked_at=datetime.now(UTC).isoformat(),
            stage=input.stage.name,
            checks=list(results),
            final=input.final,
        )

    @activity.defn(name=WATCH_HEALTH_ACTIVITY)
    async def watch_stage_health(self, input: WatchHealthInput) -> WatchHealthResult:
        """Run the stage's interval checks until one trips its `failure_limit` (returned) or the
        hold's time is up; the workflow cancels it sooner when the hold ends another way."""
        stage, clock = input.stage, self._clock
        progress = _resumed_progress()
        if progress is None:
            progress = WatchHealthProgress(
                started_at=clock.now(),
                failures={index: input.failures.get(index, 0) for index in _interval_checks(input)},
                next_due={
                    index: max(stage.health[index].initial_delay_seconds - input.offset_seconds, 0)
                    for index in _interval_checks(input)
                },
            )
        checks = CheckHealthInput(
            plan=input.plan, stage=stage, final=False, published_at=input.published_at
        )
        while True:
            activity.heartbeat(progress)
            elapsed = clock.now() - progress.started_at
            if elapsed >= input.hold_seconds:
                return _watch_result(progress, [])
            wake = min(min(progress.next_due.values(), default=math.inf), input.hold_seconds)
            if wake > elapsed:
                await self._sleep_heartbeating(wake - elapsed, progress)
                continue
            ready = sorted(index for index, due in progress.next_due.items() if due <= elapsed)
            report = await _heartbeating(self._report(checks, ready), _details_of(progress))
            progress.rounds += 1
            progress.last_report = report
            for index in ready:
                # From the round's start, as the checks ran in the workflow before: a slow round
                # is followed at once by the next, never by a gap longer than the interval.
                progress.next_due[index] = elapsed + (stage.health[index].interval_seconds or 0.0)
            tripped = count_failures(stage, report, progress.failures)
            if tripped:
                activity.heartbeat(progress)
                return _watch_result(progress, tripped)

    async def _sleep_heartbeating(self, seconds: float, progress: WatchHealthProgress) -> None:
        """Sleep on the watch's clock, heartbeating (a cancellation arrives with a heartbeat)."""
        clock = self._clock
        until = clock.now() + seconds
        while (left := until - clock.now()) > 0:
            await clock.sleep(min(left, HEARTBEAT_EVERY_SECONDS))
            activity.heartbeat(progress)

    async def _run_check(self, input: CheckHealthInput, index: int) -> CheckResult:
        check = input.stage.health[index]
        name, kind = check.name, check.kind
        try:
            spec = check.typed_spec()
        except ValidationError as error:
            return CheckResult(index, name, kind, UNHEALTHY, f"invalid check definition: {error}")
        try:
            async for attempt in _retrying(check.attempts):
                with attempt:
                    verdict, summary, figures = await self._evaluate(input, spec)
        except SourceUnreachableError as error:
            verdict, summary, figures = (
                UNHEALTHY,
                f"source unreachable after {check.attempts} attempt(s): {error}",
                {"attempts": check.attempts},
            )
        except _Verdict as verdict_error:
            verdict, summary, figures = UNHEALTHY, str(verdict_error), {}
        result = CheckResult(
            index=index, name=name, kind=kind, verdict=verdict, summary=summary, figures=figures
        )
        judge = getattr(spec, "judge", None)
        return settle_inconclusive(
            apply_no_data_policy(result, check.on_no_data, final=input.final),
            judge.sequential if judge is not None else None,
            final=input.final,
            extension_over=input.extension_over,
        )

    async def _evaluate(
        self, input: CheckHealthInput, spec: CheckSpec
    ) -> tuple[Verdict, str, dict[str, Any]]:
        if isinstance(spec, ReportsCheckSpec):
            return await self._reports(input, spec)
        if isinstance(spec, PrometheusCheckSpec):
            return await self._prometheus(input, spec)
        return await self._http(input, spec)

    async def _reports(
        self, input: CheckHealthInput, spec: ReportsCheckSpec
    ) -> tuple[Verdict, str, dict[str, Any]]:
        plan = input.plan
        now = datetime.now(UTC)
        since, reason = evidence_since(_published_at(input), now, evidence_window(spec))
        try:
            totals = [
                reports
                for namespace, path, _ in plan.configs()
                for reports in await asyncio.to_thread(
                    self._store.report_totals, namespace, path, since=since
                )
            ]
        except (
            Exception
        ) as error:  # the store is the source here: any failure to read it is "unreachable"
            raise SourceUnreachableError(f"cannot read reports from the store: {error}") from error
        evidence = gather_evidence(
            totals,
            # A changeset's cohorts are bucketed by its key (tempoconf.rollout.changesets); its evidence
            # is every config's reports on that config's new version.
            path=plan.bucket_key or plan.path,
            version={version for _, _, version in plan.configs()},
            stages=cohort_stages(plan, input.stage),
            since=since,
            since_reason=reason,
        )
        return judge_reports(spec, evidence, now=now)

    async def _prometheus(
        self, input: CheckHealthInput, spec: PrometheusCheckSpec
    ) -> tuple[Verdict, str, dict[str, Any]]:
        if spec.counts is not None:
            return await _prometheus_counts(input, spec, spec.counts)
        assert spec.query is not None  # a check without counts has a query (its validator)
        query = render_promql(spec.query, _placeholders(input))
        async with httpx.AsyncClient(timeout=spec.timeout.total_seconds()) as http:
            data = await _instant_query(http, spec.url, query)
        verdict, summary, figures = judge_samples(spec, _samples(data))
        figures["query"] = query
        return verdict, summary, figures

    async def _http(
        self, input: CheckHealthInput, spec: HttpCheckSpec
    ) -> tuple[Verdict, str, dict[str, Any]]:
        url = render_url(spec.url, _placeholders(input))
        try:
            async with httpx.AsyncClient(timeout=spec.timeout.total_seconds()) as http:
                response = await http.get(url)
        except httpx.TimeoutException as error:
            raise SourceUnreachableError(
                f"{url} did not answer within {spec.timeout.total_seconds():g}s ({type(error).__name__})"
            ) from error
        except httpx.HTTPError as error:
            raise SourceUnreachableError(f"{url}: {type(error).__name__}: {error}") from error
        figures = {"status": response.status_code}
        if 200 <= response.status_code < 300:
            return HEALTHY, f"{url} answered {response.status_code}", figures
        return UNHEALTHY, f"{url} answered {response.status_code}: {response.text[:200]}", figures


def _interval_checks(input: WatchHealthInput) -> list[int]:
    return [index for index, check in enumerate(input.stage.health) if check.interval_seconds]


def _resumed_progress() -> WatchHealthProgress | None:
    """The progress an earlier attempt of this activity heartbeated, if any."""
    details = activity.info().heartbeat_details
    if not details:
        return None
    progress: WatchHealthProgress = value_to_type(WatchHealthProgress, details[0])
    activity.logger.info(
        "resuming the health watch after %d round(s) (attempt %d)",
        progress.rounds,
        activity.info().attempt,
    )
    return progress


def _details_of(progress: WatchHealthProgress) -> Callable[[], tuple[Any, ...]]:
    return lambda: (progress,)


def _watch_result(progress: WatchHealthProgress, tripped: list[str]) -> WatchHealthResult:
    return WatchHealthResult(
        tripped=tripped,
        report=progress.last_report,
        rounds=progress.rounds,
        failures=dict(progress.failures),
    )


async def _heartbeating(work: Awaitable[T], details: Callable[[], tuple[Any, ...]]) -> T:
    """Await `work`, heartbeating `details()` meanwhile: a check can take a while (every attempt
    against a slow source), and the heartbeat timeout is shorter than that."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_SECONDS)
            if done:
                return task.result()
            activity.heartbeat(*details())
    finally:
        task.cancel()


def _published_at(input: CheckHealthInput) -> datetime | None:
    return datetime.fromisoformat(input.published_at) if input.published_at else None


def _placeholders(input: CheckHealthInput, now: datetime | None = None) -> dict[str, str]:
    plan = input.plan
    return placeholder_values(
        namespace=plan.namespace,
        path=plan.path,
        version=plan.version,
        stage=input.stage.name,
        published_at=_published_at(input),
        now=now or datetime.now(UTC),
    )


async def _instant_query(
    http: httpx.AsyncClient, base_url: str, query: str, at: datetime | None = None
) -> dict[str, Any]:
    """The `data` of Prometheus's answer to an instant query (evaluated `at` that time, else its
    own now): unreachable (a transport error, a 5xx, no JSON) is retried; a refused query is a
    verdict."""
    url = base_url.rstrip("/") + "/api/v1/query"
    params = {"query": query}
    if at is not None:
        params["time"] = f"{at.timestamp():.3f}"
    try:
        response = await http.get(url, params=params)
    except httpx.HTTPError as error:
        raise SourceUnreachableError(f"{url}: {type(error).__name__}: {error}") from error
    if response.status_code >= 500:
        raise SourceUnreachableError(f"{url} answered {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        raise SourceUnreachableError(
            f"{url} answered {response.status_code} with no JSON"
        ) from None
    if body.get("status") != "success":
        raise _Verdict(f"Prometheus rejected the query {query!r}: {body.get('error', body)}")
    data: dict[str, Any] = body.get("data", {})
    return data


async def _prometheus_counts(
    input: CheckHealthInput, spec: PrometheusCheckSpec, counts: PrometheusCountsSpec
) -> tuple[Verdict, str, dict[str, Any]]:
    """A judged check: its four counts queries at once, joined per client, the cohort judged
    against the baseline."""
    # One evaluation time for the four: queried a moment apart, the counters would have grown
    # in between, and a client's failed and total would not be of the same span.
    at = datetime.now(UTC)
    values = _placeholders(input, at)
    queries = {
        name: render_promql(getattr(counts, name), values)
        for name in ("cohort_failed", "cohort_total", "baseline_failed", "baseline_total")
    }
    async with httpx.AsyncClient(timeout=spec.timeout.total_seconds()) as http:
        # Every query ends before the client closes, whichever fails first.
        answers = await asyncio.gather(
            *(_instant_query(http, spec.url, query, at) for query in queries.values()),
            return_exceptions=True,
        )
    data: list[dict[str, Any]] = []
    for answer in answers:
        if isinstance(answer, BaseException):
            # A refused query is a verdict, whatever else happened; else the first failure.
            failures = [failed for failed in answers if isinstance(failed, BaseException)]
            raise next((failed for failed in failures if isinstance(failed, _Verdict)), answer)
        data.append(answer)
    series = dict(zip(queries, (_labelled_samples(answer) for answer in data), strict=True))
    verdict, summary, figures = judge_counts(
        spec,
        join_counts(series["cohort_failed"], series["cohort_total"]),
        join_counts(series["baseline_failed"], series["baseline_total"]),
    )
    figures["queries"] = queries
    return verdict, summary, figures


def _samples(data: dict[str, Any]) -> list[float]:
    """Values of an instant query's result: vector, scalar, or the last point of each matrix series."""
    return [value for _, value in _labelled_samples(data)]


def _labelled_samples(data: dict[str, Any]) -> list[tuple[dict[str, str], float]]:
    """_samples with each series' labels (a scalar's: none)."""
    result_type = data.get("resultType")
    result = data.get("result")
    if result_type == "scalar" and isinstance(result, list):
        return [({}, _number(result[1]))]
    if result_type == "vector" and isinstance(result, list):
        return [(dict(sample.get("metric", {})), _number(sample["value"][1])) for sample in result]
    if result_type == "matrix" and isinstance(result, list):
        return [
            (dict(series.get("metric", {})), _number(series["values"][-1][1]))
            for series in result
            if series.get("values")
        ]
    return []


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan
