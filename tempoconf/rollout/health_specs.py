"""The health checks of a rollout request (docs/contract.md, Health checks): one model per kind.

A check is `reports` (the cohort's health reports), `prometheus` (a PromQL query) or `http` (an
outside judge); `HealthCheckSpec` is the three, told apart by `kind`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

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
    "HealthCheckSpec",
    "HttpCheckSpec",
    "PrometheusCheckSpec",
    "ReportsCheckSpec",
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


class ReportsCheckSpec(_CheckBase):
    """Error ratio of the cohort's health reports on the rollout's version."""

    model_config = ConfigDict(json_schema_extra=one_of("max_error_ratio", "max_baseline_factor"))
    _BOUND = ("max_error_ratio", "max_baseline_factor")
    _NO_BOUND = "a reports check needs max_error_ratio or max_baseline_factor"

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
    shorter."""


class PrometheusCheckSpec(_CheckBase):
    """A PromQL query against a Prometheus HTTP API, judged against `max` and/or `min`."""

    model_config = ConfigDict(json_schema_extra=one_of("max", "min"))
    _BOUND = ("max", "min")
    _NO_BOUND = "a prometheus check needs a bound: max or min"

    kind: Literal["prometheus"]
    """A PromQL query against a Prometheus server."""
    url: HttpUrl
    """The Prometheus server's base URL."""
    query: str = Field(min_length=1)
    """PromQL, with the placeholders `{path}`, `{namespace}`, `{version}`, `{stage}` (escaped for a
    double-quoted PromQL string), `{since}` (the stage's publish, Unix seconds) and `{elapsed}`
    (the time since, as a PromQL duration); any other `{name}` is refused. No sample: no data."""
    max: float | None = None
    """Fail when the query's value is above this."""
    min: float | None = None
    """Fail when the query's value is below this."""
    timeout: Duration = timedelta(seconds=10)
    """How long the server has to answer."""

    @field_validator("query")
    @classmethod
    def _known_placeholders(cls, value: str) -> str:
        problems = template_problems(value)
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
