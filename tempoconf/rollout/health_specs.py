"""The health checks of a rollout request (docs/contract.md, Health checks): one model per kind.

A check is `reports` (the cohort's health reports), `prometheus` (a PromQL query) or `http` (an
outside judge); `HealthCheckSpec` is the three, told apart by `kind`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tempoconf.gates.check_templates import template_problems
from tempoconf.rollout.spec_fields import (
    Duration,
    HttpUrl,
    StrictSpec,
    one_of,
    positive_duration,
)

__all__ = [
    "CHECK_KINDS",
    "CountsJudgeSpec",
    "CountsSequentialJudgeSpec",
    "HealthCheckSpec",
    "HttpCheckSpec",
    "JudgeSpec",
    "PrometheusCheckSpec",
    "PrometheusCountsSpec",
    "ReportsCheckSpec",
    "SequentialJudgeSpec",
]


class _CheckBase(StrictSpec):
    # A kind's bound: at least one of these fields must be given, else _NO_BOUND is the problem
    # (its model_config says the same in the JSON Schema, with one_of).
    _BOUND: ClassVar[tuple[str, ...]] = ()
    _NO_BOUND: ClassVar[str] = ""

    interval: Duration | None = None
    """Also run the check every `interval` during the hold (fail fast); unset: only at its end."""
    initial_delay: Duration = timedelta(0)
    """No check runs before this much of the hold has passed."""
    failure_limit: int = Field(default=1, ge=1)
    """Consecutive failed checks that make the stage unhealthy."""
    on_no_data: Literal["pass", "fail"] = "fail"
    """What the check concludes at the end of the hold when its source has no data."""
    name: str | None = Field(default=None, max_length=200)
    """Shown in the status and the audit log; default: the kind."""
    attempts: int = Field(default=3, ge=1, le=20)
    """Tries against an unreachable source before the check counts as failed."""

    _positive_interval = field_validator("interval")(positive_duration)

    @model_validator(mode="after")
    def _needs_a_bound(self) -> _CheckBase:
        if self._BOUND and all(getattr(self, field) is None for field in self._BOUND):
            raise ValueError(self._NO_BOUND)
        return self


class SequentialJudgeSpec(StrictSpec):
    """The cohort against the baseline with an always-valid confidence interval of the increase
    (tempoconf.rollout.sequential): a regression once the whole interval lies above the
    tolerance, no regression once it lies below, inconclusive in between."""

    model_config = ConfigDict(json_schema_extra=one_of("max_increase", "max_latency_increase_ms"))

    max_increase: float | None = Field(default=None, gt=0, le=1)
    """The error-rate increase tolerated, as a fraction: 0.005 is half a percentage point."""
    max_latency_increase_ms: float | None = Field(default=None, gt=0)
    """The increase of the mean latency tolerated, in milliseconds (reports' `latency_sum_ms`
    over `latency_count`)."""
    confidence: float = Field(default=0.95, ge=0.8, le=0.999)
    """The interval's confidence, valid however often the check looks."""
    on_inconclusive: Literal["extend", "fail", "pass"] = "extend"
    """What the end of the hold does when the interval still holds the tolerance: `extend` the
    hold (re-checking every `interval`, else every 30s) up to `max_extension`, or fail, or pass."""
    max_extension: Duration = timedelta(minutes=10)
    """How long `extend` holds on past the hold's end."""
    after_extension: Literal["fail", "pass"] = "fail"
    """What an extension that ends inconclusive concludes."""

    _positive_extension = field_validator("max_extension")(positive_duration)

    @model_validator(mode="after")
    def _needs_a_tolerance(self) -> SequentialJudgeSpec:
        if self.max_increase is None and self.max_latency_increase_ms is None:
            raise ValueError("a sequential judge needs max_increase or max_latency_increase_ms")
        return self


class JudgeSpec(StrictSpec):
    """How a check turns its figures into a verdict, instead of a threshold."""

    sequential: SequentialJudgeSpec
    """An always-valid confidence interval of the cohort's increase over the baseline."""


class ReportsCheckSpec(_CheckBase):
    """Error ratio of the cohort's health reports on the rollout's version."""

    model_config = ConfigDict(
        json_schema_extra=one_of("max_error_ratio", "max_baseline_factor", "judge")
    )
    _BOUND = ("max_error_ratio", "max_baseline_factor", "judge")
    _NO_BOUND = "a reports check needs max_error_ratio, max_baseline_factor or judge"

    kind: Literal["reports"]
    """The cohort's health reports (`POST /v1/reports`) on the rollout's version."""
    max_error_ratio: float | None = Field(default=None, ge=0, le=1)
    """Fail when the cohort's error ratio, failed / (ok + failed), is above this."""
    min_clients: int = Field(default=1, ge=0)
    """Reporting cohort clients needed for a verdict; fewer is no data."""
    max_baseline_factor: float | None = Field(default=None, gt=0)
    """Fail when the cohort's error ratio is above this factor times the baseline's (the
    config's clients outside the cohort, on other versions, over the same span)."""
    window: Duration = timedelta(minutes=5)
    """How far back the check looks: reports since the stage's publish, or within this, when
    shorter. A `judge` looks at every report since the stage's publish (its interval is over
    all the evidence)."""
    judge: JudgeSpec | None = None
    """Judge the cohort against the baseline with confidence (`sequential`), beside or instead
    of the thresholds."""


class CountsSequentialJudgeSpec(SequentialJudgeSpec):
    """A sequential judge of error counts: the increase of the cohort's error rate over the
    baseline's (a prometheus check's counts hold no latency)."""

    model_config = ConfigDict(json_schema_extra={})

    max_increase: float = Field(gt=0, le=1)
    """The error-rate increase tolerated, as a fraction: 0.005 is half a percentage point."""
    max_latency_increase_ms: Annotated[
        float | None, WithJsonSchema({"type": "null", "description": "Not for a prometheus check."})
    ] = None

    @field_validator("max_latency_increase_ms")
    @classmethod
    def _no_latency(cls, value: float | None) -> float | None:
        if value is not None:
            raise ValueError(
                "max_latency_increase_ms is for a reports check: a prometheus check's counts are "
                "failed and total operations, so its judge takes max_increase only"
            )
        return value


class CountsJudgeSpec(JudgeSpec):
    """How a prometheus check judges its counts: the cohort's error rate against the baseline's."""

    sequential: CountsSequentialJudgeSpec
    """An always-valid confidence interval of the cohort's error-rate increase over the
    baseline's."""


class PrometheusCountsSpec(StrictSpec):
    """Four PromQL queries for a judge, each an instant vector with one series per client (its
    labels, the metric name aside, join a client's failed and total series): e.g.
    `sum by (instance) (increase(errors_total{version="{version}"}[{elapsed}]))`. The
    placeholders are the `query`'s."""

    cohort_failed: str = Field(min_length=1)
    """Failed operations of each cohort client: a client with none may be left out (0)."""
    cohort_total: str = Field(min_length=1)
    """All operations of each cohort client."""
    baseline_failed: str = Field(min_length=1)
    """Failed operations of each baseline client (on other versions, outside the cohort)."""
    baseline_total: str = Field(min_length=1)
    """All operations of each baseline client."""

    @field_validator("cohort_failed", "cohort_total", "baseline_failed", "baseline_total")
    @classmethod
    def _known_placeholders(cls, value: str, info: ValidationInfo) -> str:
        problems = template_problems(value, str(info.field_name))
        if problems:
            raise ValueError("; ".join(problems))
        return value


_UNVALIDATED = object()
"""A field that failed validation: not in a later field validator's `info.data`."""


def _query_or_judge() -> dict[str, Any]:
    """The JSON Schema of PrometheusCheckSpec's validators: without a judge, `query` and a bound
    (max or min); with one, `counts`, and no query or bound."""
    given = {"not": {"type": "null"}}
    absent = {"type": "null"}
    with_query = [
        {
            "required": ["query", bound],
            "properties": {
                "query": given,
                bound: given,
                "judge": absent,
                "counts": absent,
            },
        }
        for bound in ("max", "min")
    ]
    with_judge = {
        "required": ["judge", "counts"],
        "properties": {
            "judge": given,
            "counts": given,
            "query": absent,
            "max": absent,
            "min": absent,
        },
    }
    return {"anyOf": [*with_query, with_judge]}


class PrometheusCheckSpec(_CheckBase):
    """A PromQL query against a Prometheus HTTP API, judged against `max` and/or `min`; or, with
    a `judge`, four queries of the cohort's and the baseline's counts, judged against each other."""

    model_config = ConfigDict(json_schema_extra=_query_or_judge())
    _BOUND = ("max", "min", "judge")
    _NO_BOUND = "a prometheus check needs a bound: max or min"

    kind: Literal["prometheus"]
    """A PromQL query against a Prometheus server."""
    url: HttpUrl
    """The Prometheus server's base URL."""
    judge: CountsJudgeSpec | None = None
    """Judge the cohort's error rate against the baseline's with confidence (`sequential`), from
    `counts`, instead of a `query` and its bounds."""
    counts: PrometheusCountsSpec | None = Field(default=None, validate_default=True)
    """With a `judge` (and only then): the queries of the cohort's and the baseline's failed and
    total operations, per client."""
    query: str | None = Field(default=None, min_length=1, validate_default=True)
    """PromQL, with the placeholders `{path}`, `{namespace}`, `{version}`, `{stage}` (escaped for a
    double-quoted PromQL string), `{since}` (the stage's publish, Unix seconds) and `{elapsed}`
    (the time since, as a PromQL duration); any other `{name}` is refused. No sample: no data.
    Required, unless the check has a `judge`."""
    max: float | None = None
    """Fail when the query's value is above this."""
    min: float | None = None
    """Fail when the query's value is below this."""
    timeout: Duration = timedelta(seconds=10)
    """How long the server has to answer (each query, with a judge)."""

    @field_validator("counts", mode="after")
    @classmethod
    def _counts_need_a_judge(
        cls, value: PrometheusCountsSpec | None, info: ValidationInfo
    ) -> PrometheusCountsSpec | None:
        judge = info.data.get("judge", _UNVALIDATED)
        if value is not None and judge is None:
            raise ValueError("counts is read by a judge only: add judge, or leave counts out")
        if value is None and judge is not None and judge is not _UNVALIDATED:
            raise ValueError(
                "counts is required with a judge: the PromQL of cohort_failed, cohort_total, "
                "baseline_failed and baseline_total"
            )
        return value

    @field_validator("query", "max", "min", mode="after")
    @classmethod
    def _query_or_judge(cls, value: str | float | None, info: ValidationInfo) -> str | float | None:
        judge = info.data.get("judge", _UNVALIDATED)
        if judge is _UNVALIDATED:
            return value
        if judge is None and value is None and info.field_name == "query":
            raise PydanticCustomError("missing", "Field required")
        if judge is not None and value is not None:
            raise ValueError(
                f"{info.field_name} is for a check without a judge: a judged prometheus check "
                "reads its counts (a query with max or min is a check of its own)"
            )
        return value

    @field_validator("query")
    @classmethod
    def _known_placeholders(cls, value: str | None) -> str | None:
        problems = template_problems(value) if value is not None else []
        if problems:
            raise ValueError("; ".join(problems))
        return value


class HttpCheckSpec(_CheckBase):
    """An external judge: the URL must answer 2xx within `timeout`."""

    kind: Literal["http"]
    """An outside judge over HTTP."""
    url: HttpUrl
    """Must answer 2xx; the query's placeholders may be used, URL-encoded."""
    timeout: Duration = timedelta(seconds=10)
    """How long the URL has to answer."""


HealthCheckSpec = Annotated[
    ReportsCheckSpec | PrometheusCheckSpec | HttpCheckSpec, Field(discriminator="kind")
]
CHECK_KINDS = {"reports", "prometheus", "http"}
"""The `kind`s of HealthCheckSpec."""
