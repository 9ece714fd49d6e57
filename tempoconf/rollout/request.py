"""The rollout request: the JSON object a rollout starts from (docs/contract.md, The rollout request).

`parse_rollout_request` turns raw JSON into a `RolloutRequest` or raises `InvalidRequestError`
that lists every problem with its JSON pointer, so a user fixes them all in one pass.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from tempoconf.canonical import canonical_json
from tempoconf.durations import DURATION_JSON_SCHEMA, parse_duration
from tempoconf.gates.check_templates import template_problems
from tempoconf.gates.freezes import FreezeOverride
from tempoconf.gates.windows import WindowSpec
from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem, path_problem
from tempoconf.problems import InvalidRequestError, Problem, json_pointer
from tempoconf.storable import json_depth_problem, json_text_problems

__all__ = [
    "MAX_APPROVALS",
    "ApprovalsSpec",
    "ConfigPath",
    "HttpUrl",
    "Namespace",
    "DEFAULT_COOLDOWN",
    "DEFAULT_EXPIRATION",
    "Duration",
    "HealthCheckSpec",
    "HttpCheckSpec",
    "PrometheusCheckSpec",
    "ReportsCheckSpec",
    "RolloutRequest",
    "StageSpec",
    "StrategySpec",
    "ChangeSpec",
    "MAX_CHANGES",
    "MIN_CHANGES",
    "parse_rollout_request",
    "stage_display_name",
]

DEFAULT_COOLDOWN = timedelta(seconds=300)
DEFAULT_EXPIRATION = timedelta(seconds=3600)

# In JSON a duration is written as seconds (pydantic's default, ISO 8601 "PT5M", is a form that
# parse_duration does not read), so a dumped check or stage validates again as it was. Its JSON
# Schema as an input is every form parse_duration reads (as an output: a number, from the serializer).
Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(lambda value: value.total_seconds(), return_type=float, when_used="json"),
    WithJsonSchema(DURATION_JSON_SCHEMA, mode="validation"),
]


def _refuse(problem_of: Callable[[Any], str | None]) -> Callable[[Any], Any]:
    """A pydantic validator from a `..._problem` function (None: fine, else the message)."""

    def check(value: Any) -> Any:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value

    return check


def _url_problem(value: str) -> str | None:
    return (
        None
        if value.startswith(("http://", "https://"))
        else "url must start with http:// or https://"
    )


# The JSON Schemas say what path_problem and namespace_problem check (they keep their messages).
_SEGMENT = r"(?!\.\.?(/|$))[a-z0-9._-]+"
ConfigPath = Annotated[
    str,
    AfterValidator(_refuse(path_problem)),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": f"^{_SEGMENT}(/{_SEGMENT})*$",
        }
    ),
]
"""A config path (docs/contract.md: 1-255 chars of [a-z0-9._-] segments joined by /)."""
Namespace = Annotated[
    str,
    AfterValidator(_refuse(namespace_problem)),
    WithJsonSchema({"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,62}$"}),
]
HttpUrl = Annotated[
    str,
    Field(min_length=1),
    AfterValidator(_refuse(_url_problem)),
    WithJsonSchema({"type": "string", "pattern": "^https?://"}),
]


def _one_of(*fields: str, exactly: bool = False) -> dict[str, Any]:
    """JSON Schema for a rule the model checks in a validator: at least (or exactly) one of
    `fields` is given and not null, so that the published schema refuses what the model refuses."""
    given = [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}} for name in fields
    ]
    return {"oneOf" if exactly else "anyOf": given}


class _Strict(BaseModel):
    # Unknown fields are refused: a typo such as "cooldwon" must not silently fall back to a default.
    # Field docstrings become the descriptions of the JSON Schema editors show.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class _CheckBase(_Strict):
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

    @field_validator("interval")
    @classmethod
    def _positive_interval(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("interval must be greater than zero")
        return value


class ReportsCheckSpec(_CheckBase):
    """Error ratio of the cohort's health reports on the rollout's version."""

    model_config = ConfigDict(json_schema_extra=_one_of("max_error_ratio", "max_baseline_factor"))

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

    @model_validator(mode="after")
    def _needs_a_bound(self) -> ReportsCheckSpec:
        if self.max_error_ratio is None and self.max_baseline_factor is None:
            raise ValueError("a reports check needs max_error_ratio or max_baseline_factor")
        return self


class PrometheusCheckSpec(_CheckBase):
    """A PromQL query against a Prometheus HTTP API, judged against `max` and/or `min`."""

    model_config = ConfigDict(json_schema_extra=_one_of("max", "min"))

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

    @model_validator(mode="after")
    def _needs_a_bound(self) -> PrometheusCheckSpec:
        if self.max is None and self.min is None:
            raise ValueError("a prometheus check needs a bound: max or min")
        return self


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
_CHECK_KINDS = {"reports", "prometheus", "http"}


MAX_APPROVALS = 10
"""The most approvals a stage may require."""


class ApprovalsSpec(_Strict):
    """Four eyes on a manual stage: how many distinct identities must approve, and whether the
    request's author may be one of them."""

    required: int = Field(ge=1, le=MAX_APPROVALS, strict=True)
    """Approvals from distinct identities the stage needs before it advances."""
    forbid_author: bool = Field(default=True, strict=True)
    """The request's `author` may not approve (the request must then name its author)."""


_APPLIED_GATE_OPTIONS = ("applied_window", "apply_timeout", "on_apply_timeout")
"""Stage fields that only mean something with `min_applied`."""


class StageSpec(_Strict):
    """One stage: the clients it reaches (channel, percentile, labels: all must match) and its hold."""

    model_config = ConfigDict(
        json_schema_extra={
            **_one_of("channel", "percentile", "labels"),
            "dependentRequired": {name: ["min_applied"] for name in _APPLIED_GATE_OPTIONS},
        }
    )

    channel: str | None = Field(default=None, min_length=1, max_length=100)
    """Matches clients whose channel is exactly this."""
    # strict: a boolean or a string is not a percentile (lax mode would read true as 1)
    percentile: float | None = Field(default=None, ge=0, le=100, strict=True)
    """Matches clients whose bucket is below round(percentile × 100); at most two decimals."""
    labels: dict[str, str] | None = None
    """Matches clients that carry every one of these labels."""
    cooldown: Duration | None = None
    """The hold before the stage may move on (default: the request's `default_cooldown_time`)."""
    expiration: Duration | None = None
    """The stage's lease (default: the request's `default_expiration_time`); greater than zero."""
    manual: bool = False
    """Once the hold and checks pass, wait for `approve`."""
    name: str | None = Field(default=None, min_length=1, max_length=100)
    """Default: from the target (`channel:canary`, `10%`, `labels:region=eu`, joined by spaces when
    a stage names several); unique in a request."""
    health: list[HealthCheckSpec] | None = None
    """Checks of this stage only, run after the request's."""
    approvals: ApprovalsSpec | None = None
    """Four eyes: the approvals a `manual` stage needs, each naming the plan's digest."""

    @model_validator(mode="after")
    def _approvals_are_manual(self) -> StageSpec:
        if self.approvals is not None and not self.manual:
            raise ValueError('approvals are given on a manual stage only: add "manual": true')
        return self

    # Gates on applied versions (tempoconf.gates.applied_gate): strict, as percentile (true is no ratio).
    min_applied: float | None = Field(default=None, gt=0, le=1, strict=True)
    """After the cooldown, hold until this share (0 < r <= 1) of the stage's cohort seen in the
    last `applied_window` reports the version applied."""
    applied_window: Duration | None = None
    """Clients seen (polling or reporting) this recently count for `min_applied`; default 10m."""
    apply_timeout: Duration | None = None
    """Counted from the stage's publish: once it passes with `min_applied` unmet,
    `on_apply_timeout` decides; default none (wait until met, advanced or halted)."""
    on_apply_timeout: Literal["revert", "hold"] | None = None
    """`revert` (the default): the rollout reverts, its reason the ratio and the stragglers count;
    `hold`: it stays in `apply_timed_out` until an operator sends `advance` (go on as is),
    `bypass` or `halt`."""

    @field_validator("applied_window", "apply_timeout")
    @classmethod
    def _positive_gate_duration(
        cls, value: timedelta | None, info: ValidationInfo
    ) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError(f"{info.field_name} must be greater than zero")
        return value

    @model_validator(mode="after")
    def _gate_options_need_min_applied(self) -> StageSpec:
        if self.min_applied is None:
            given = [name for name in _APPLIED_GATE_OPTIONS if name in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{', '.join(given)} only with min_applied (the share of the stage's cohort "
                    "that must report the version applied)"
                )
        return self

    @field_validator("percentile")
    @classmethod
    def _two_decimals(cls, value: float | None) -> float | None:
        if value is not None and Decimal(str(value)).as_tuple().exponent < -2:  # type: ignore[operator]
            raise ValueError(f"percentile has at most two decimals (got {value})")
        return value

    @field_validator("expiration")
    @classmethod
    def _positive_expiration(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("expiration must be greater than zero")
        return value

    @model_validator(mode="after")
    def _names_a_target(self) -> StageSpec:
        if self.channel is None and self.percentile is None and not self.labels:
            raise ValueError("a stage must name at least one of channel, percentile, labels")
        return self

    @property
    def display_name(self) -> str:
        return self.name or stage_display_name(self.channel, self.percentile, self.labels or {})


def stage_display_name(
    channel: str | None, percentile: float | None, labels: dict[str, str]
) -> str:
    """The default stage name: `channel:canary`, `10%`, `labels:region=eu`, joined by spaces."""
    parts = []
    if channel is not None:
        parts.append(f"channel:{channel}")
    if percentile is not None:
        parts.append(f"{percentile:g}%")
    if labels:
        parts.append(
            "labels:" + ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
        )
    return " ".join(parts)


MAX_STAGES = 100
_VERSION_ID = r"^[0-9a-f]{16}$"


class LinearStrategy(_Strict):
    """Percentile stages `step`, 2×`step`, ... up to 100, each held for `every`."""

    step: float = Field(gt=0, le=100)
    """The first percentile and the increment between two stages."""
    every: Duration | None = None
    """The cooldown of each generated stage; default: the request's `default_cooldown_time`."""

    @model_validator(mode="after")
    def _not_too_many_stages(self) -> LinearStrategy:
        # Refused before it is expanded: a step of 1e-12 would be 10^14 points to build and count.
        # Below 100/(MAX_STAGES+1) the points, even rounded to two decimals, are more than
        # MAX_STAGES distinct ones, so this refuses nothing the count after expansion would keep.
        if self.step * (MAX_STAGES + 1) < 100:
            raise ValueError(
                f"a linear step of {self.step:g} expands to more than {MAX_STAGES} stages"
            )
        return self


class ExponentialStrategy(_Strict):
    """Percentile stages `start`, `start`×`factor`, ... up to 100, each held for `every`."""

    start: float = Field(gt=0, le=100)
    """The first percentile."""
    factor: float = Field(gt=1, le=100)
    """Each next percentile is the last one times this, while below 100; then 100."""
    every: Duration | None = None
    """The cooldown of each generated stage; default: the request's `default_cooldown_time`."""


class StrategySpec(_Strict):
    """A shorthand that expands to percentile stages (after any explicit `stages`)."""

    model_config = ConfigDict(json_schema_extra=_one_of("linear", "exponential", exactly=True))

    linear: LinearStrategy | None = None
    """Percentiles `step`, 2×`step`, 3×`step`, ... up to 100."""
    exponential: ExponentialStrategy | None = None
    """Percentiles `start`, `start`×`factor`, `start`×`factor`², ... while below 100, then 100."""

    @model_validator(mode="after")
    def _exactly_one(self) -> StrategySpec:
        if (self.linear is None) == (self.exponential is None):
            raise ValueError("a strategy is exactly one of 'linear' or 'exponential'")
        return self

    def percentiles(self) -> list[float]:
        points: list[float] = []
        if self.linear is not None:
            step = self.linear.step
            points = [min(100.0, round(step * n, 2)) for n in range(1, int(100 // step) + 2)]
        elif self.exponential is not None:
            current = self.exponential.start
            while current < 100 and len(points) < MAX_STAGES:
                points.append(round(current, 2))
                current *= self.exponential.factor
            points.append(100.0)
        # rounding and capping may repeat a point; cohorts must strictly grow
        return sorted({point for point in points if point > 0})

    def expand(self) -> list[StageSpec]:
        every = self.linear.every if self.linear is not None else self.exponential.every  # type: ignore[union-attr]
        return [StageSpec(percentile=point, cooldown=every) for point in self.percentiles()]


MIN_CHANGES = 2
MAX_CHANGES = 20


class ChangeSpec(_Strict):
    """One config of a changeset: its path, namespace (default: the request's) and exactly one
    of `value` and `version`."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["value"]}, {"required": ["version"]}]}
    )

    path: ConfigPath
    """The config's path."""
    namespace: Namespace | None = None
    """The config's namespace; default: the request's `namespace`."""
    value: Any = None
    """The config's new value (any JSON); exactly one of `value` and `version`."""
    version: str | None = Field(default=None, pattern=_VERSION_ID)
    """A version the config already has (a rollback of this config) instead of a new value."""

    @model_validator(mode="after")
    def _value_or_version(self) -> ChangeSpec:
        # Presence, not null: {"value": null} changes the config to the value null.
        if ("value" in self.model_fields_set) == ("version" in self.model_fields_set):
            raise ValueError("a change needs exactly one of 'value' and 'version'")
        return self


# The changeset form: `changes`, and none of path, value, version at the top level.
_CHANGESET_FORM: dict[str, Any] = {
    "required": ["changes"],
    "not": {"anyOf": [{"required": ["path"]}, {"required": ["value"]}, {"required": ["version"]}]},
}


class RolloutRequest(_Strict):
    """The input of `ConfigRollout`, exactly as docs/contract.md describes it.

    Exactly one of `value` (a new value) and `version` (an existing version: a rollback), with
    `path`; or `changes` (a changeset: several configs in one rollout), without them. A parsed
    changeset's `path` and `namespace` are its first change's (parse_rollout_request).
    """

    # Presence, not null, is what counts here: {"value": null} rolls out the value null.
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["path", "value"]},
                {"required": ["path", "version"]},
                _CHANGESET_FORM,
            ]
        }
    )

    path: ConfigPath = ""
    """The config's path: 1-255 characters of [a-z0-9._-] segments joined by '/'."""
    changes: list[ChangeSpec] | None = Field(
        default=None, min_length=MIN_CHANGES, max_length=MAX_CHANGES
    )
    """A changeset: 2-20 configs rolled out together (one stage ladder, hold, verdict, revert),
    instead of `path` and `value`/`version`; each config at most once."""
    namespace: Namespace = DEFAULT_NAMESPACE
    """The config's namespace."""
    value: Any = None
    """The new value (any JSON); exactly one of `value` and `version`."""
    version: str | None = Field(default=None, pattern=_VERSION_ID)
    """Roll out a version the config already has (rollback) instead of a new value."""
    strategy: StrategySpec | None = None
    """Percentile stages generated by a rule, appended after `stages`; each point rounded to two
    decimals, and no generated stage may repeat the name of an explicit one."""
    webhooks: list[HttpUrl] = Field(default_factory=list, max_length=10)
    """URLs called (POST, JSON) once per state change; a failing webhook never affects the rollout."""
    default_cooldown_time: Duration = DEFAULT_COOLDOWN
    """The hold of a stage that has no `cooldown`."""
    default_expiration_time: Duration = DEFAULT_EXPIRATION
    """The lease of a stage that has no `expiration`; greater than zero."""
    stages: list[StageSpec] = Field(default_factory=list)
    """In order; none: validate, then promote at once."""
    health: list[HealthCheckSpec] = Field(default_factory=list)
    """Checks run for every stage, before the stage's own."""
    author: str = Field(default="", max_length=200)
    """Who."""
    commit: str = Field(default="", max_length=200)
    """The change's commit."""
    message: str = Field(default="", max_length=2000)
    """Why."""
    # Change windows and freezes (tempoconf.gates.windows, tempoconf.gates.freezes).
    windows: list[WindowSpec] = Field(default_factory=list, max_length=20)
    """A stage is published (and the version promoted) only inside one of these; none: any time."""
    override_freeze: FreezeOverride | None = None
    """Pass a freeze of the namespace; each freeze passed is in the audit log with this reason."""

    @field_validator("default_expiration_time")
    @classmethod
    def _positive_expiration(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("default_expiration_time must be greater than zero")
        return value

    @property
    def is_changeset(self) -> bool:
        return self.changes is not None

    def change_namespace(self, change: ChangeSpec) -> str:
        """The namespace of one change: its own, else the request's."""
        return change.namespace or self.namespace

    @property
    def all_stages(self) -> list[StageSpec]:
        """The explicit stages, then the strategy's expansion."""
        return [*self.stages, *(self.strategy.expand() if self.strategy else [])]


def parse_rollout_request(raw: Any) -> RolloutRequest:
    """Validate raw JSON into a request, or raise InvalidRequestError listing every problem."""
    if not isinstance(raw, dict):
        raise InvalidRequestError(
            [Problem("", f"a rollout request is a JSON object, not {type(raw).__name__}")]
        )
    # Every string of the request (the value's included) is checked here, the one door of every
    # rollout, so no backend is handed one it cannot store: a NUL would pass every check below.
    problems: list[Problem] = json_text_problems(raw)
    too_deep = json_depth_problem(raw.get("value"), "/value")
    if too_deep is not None:
        problems.append(too_deep)
    elif "value" in raw:
        try:
            canonical_json(raw["value"])
        except (TypeError, ValueError, RecursionError) as error:
            problems.append(Problem("/value", f"value is not plain JSON: {error}"))
    request: RolloutRequest | None = None
    try:
        request = RolloutRequest.model_validate(raw)
    except ValidationError as error:
        # pydantic refuses a lone surrogate in some fields too: said once, by the text check
        unstorable = {problem.pointer for problem in problems}
        problems.extend(
            problem
            for problem in problems_from_validation_error(error)
            if problem.pointer not in unstorable
        )
    # Checked on the raw stages, not by the model: reported at the stage that repeats a name even
    # when other fields are wrong too (a model validator would run only once every field is valid).
    problems.extend(_stage_name_problems(raw.get("stages")))
    if request is not None and not request.author.strip():
        problems.extend(
            Problem(
                f"/stages/{index}/approvals/forbid_author",
                "the author may not approve this stage, so the request must name its author "
                '(set "author", or "forbid_author": false)',
            )
            for index, stage in enumerate(request.stages)
            if stage.approvals is not None and stage.approvals.forbid_author
        )
    has_value, has_version = "value" in raw, "version" in raw
    if "changes" in raw:
        problems.extend(_changeset_problems(raw))
    elif has_value == has_version:
        problems.append(
            Problem(
                "",
                "a rollout request needs exactly one of 'value' (a new value) and 'version' "
                "(an existing version to roll back to)",
            )
        )
    raw_stages = raw.get("stages")
    if isinstance(raw_stages, list) and len(raw_stages) > MAX_STAGES:
        # The strategy's check below counts its expansion too; this is for stages alone.
        problems.append(
            Problem("/stages", f"{len(raw_stages)} stages: more than {MAX_STAGES} stages in all")
        )
    elif request is not None and request.strategy is not None:
        explicit = {stage.display_name for stage in request.stages}
        repeated = [
            stage.display_name
            for stage in request.strategy.expand()
            if stage.display_name in explicit
        ]
        if repeated:
            problems.append(
                Problem("/strategy", f"the strategy repeats stage(s) {repeated} of 'stages'")
            )
        if len(request.all_stages) > MAX_STAGES:
            problems.append(
                Problem("/strategy", f"the strategy expands to more than {MAX_STAGES} stages")
            )
    if "changes" not in raw and "path" not in raw:
        problems.append(Problem("/path", "required field is missing"))
    if problems or request is None:
        raise InvalidRequestError(problems)
    if request.changes is not None:
        # The changeset's first change stands for it where one config is named (workflow
        # search attribute, status, the audit of a refused prepare).
        # Each change's namespace is made explicit first: the request's is its default.
        changes = [
            change.model_copy(update={"namespace": request.change_namespace(change)})
            for change in request.changes
        ]
        request = request.model_copy(
            update={"path": changes[0].path, "namespace": changes[0].namespace, "changes": changes}
        )
    return request


def _changeset_problems(raw: dict[str, Any]) -> list[Problem]:
    """The changeset form's own rules: no top-level path/value/version, no config twice."""
    problems = [
        Problem(
            f"/{name}",
            f"a changeset names '{name}' in each of its 'changes', not at the top level",
        )
        for name in ("path", "value", "version")
        if name in raw
    ]
    changes = raw.get("changes")
    if changes is None:
        # The model takes null as "no changeset", which would leave a request naming no config.
        problems.append(
            Problem(
                "/changes", "changes is a list of 2 to 20 changes ({path, value} each), not null"
            )
        )
    if not isinstance(changes, list):
        return problems
    default_namespace = raw.get("namespace", DEFAULT_NAMESPACE)
    first_index: dict[tuple[Any, Any], int] = {}
    for index, change in enumerate(changes):
        if not isinstance(change, dict) or not isinstance(change.get("path"), str):
            continue
        namespace = change.get("namespace", default_namespace)
        # A namespace that is no string is the model's problem to report, and no key to compare.
        if isinstance(namespace, str):
            config = (namespace, change["path"])
            if config in first_index:
                problems.append(
                    Problem(
                        json_pointer(["changes", index, "path"]),
                        f"config {namespace}/{config[1]} is already changed by change "
                        f"{first_index[config]}: a changeset changes each config once",
                    )
                )
            else:
                first_index[config] = index
        for pointer, text in _value_problem(change, index):
            problems.append(Problem(pointer, text))
    return problems


def _value_problem(change: dict[str, Any], index: int) -> list[tuple[str, str]]:
    """A change's value that no store could keep (too deep, not plain JSON), at its pointer."""
    if "value" not in change:
        return []
    pointer = json_pointer(["changes", index, "value"])
    too_deep = json_depth_problem(change["value"], pointer)
    if too_deep is not None:
        return [(too_deep.pointer, too_deep.message)]
    try:
        canonical_json(change["value"])
    except (TypeError, ValueError, RecursionError) as error:
        return [(pointer, f"value is not plain JSON: {error}")]
    return []


def _stage_name_problems(raw_stages: Any) -> list[Problem]:
    """A stage whose display name an earlier stage already has, at /stages/i/name (or /stages/i)."""
    if not isinstance(raw_stages, list):
        return []
    first_index: dict[str, int] = {}
    problems = []
    for index, raw_stage in enumerate(raw_stages):
        try:
            stage = StageSpec.model_validate(raw_stage)
        except ValidationError:
            continue  # its own problems are reported already
        name = stage.display_name
        if name in first_index:
            parts: list[str | int] = ["stages", index, *(["name"] if stage.name else [])]
            problems.append(
                Problem(
                    json_pointer(parts),
                    f"stage name {name!r} is already used by stage {first_index[name]}; "
                    "give one of them a distinct name",
                )
            )
        else:
            first_index[name] = index
    return problems


def problems_from_validation_error(error: ValidationError) -> list[Problem]:
    """Turn pydantic's errors into Problems with JSON pointers and plain messages."""
    problems = []
    for detail in error.errors(include_url=False):
        location = _strip_union_tags(list(detail["loc"]))
        kind = detail["type"]
        # unexpected_keyword_argument: the same, said by a dataclass (tempoconf.rollout.commands)
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            message = f"unknown field {location[-1]!r}" if location else "unknown field"
        elif kind == "missing":
            message = "required field is missing"
        elif kind == "union_tag_invalid":
            message = (
                f"unknown check kind {detail['input'].get('kind')!r}; known: {sorted(_CHECK_KINDS)}"
            )
        elif kind == "union_tag_not_found":
            message = f"a health check needs 'kind', one of {sorted(_CHECK_KINDS)}"
        else:
            message = str(detail["msg"]).removeprefix("Value error, ")
        problems.append(Problem(json_pointer(location), message))
    return problems


def _strip_union_tags(location: list[Any]) -> list[Any]:
    # pydantic puts the discriminator's value into the location (health/0/reports/max_error_ratio);
    # the user's JSON has no such level, so drop it: only right after the index of a health check,
    # never elsewhere (an unknown stage field that happens to be called "http" stays in the pointer).
    return [
        part
        for position, part in enumerate(location)
        if not (
            part in _CHECK_KINDS
            and position >= 2
            and isinstance(location[position - 1], int)
            and location[position - 2] == "health"
        )
    ]
