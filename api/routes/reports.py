"""`POST /v1/reports`: a client's health report on the version it runs; stored for the health
checks (kept in memory while the store is down: api/health_reports.py) and counted in metrics."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.api.answers import Accepted
from tempoconf.api.applied import PendingApplied
from tempoconf.api.auth import access_of, require_client, route_of
from tempoconf.api.bodies import REPORT_BODY_LIMIT, read_json, validate_body
from tempoconf.api.deps import state_of
from tempoconf.api.errors import ApiError
from tempoconf.api.health_reports import REPORT_RETRY_AFTER_SECONDS, ReceivedReport, store_report
from tempoconf.api.routing import route
from tempoconf.api.snapshots import SnapshotsNotLoadedError
from tempoconf.paths import DEFAULT_NAMESPACE
from tempoconf.rollout.spec_fields import ConfigPath, Namespace
from tempoconf.storable import STORABLE
from tempoconf.store import AppliedReport

__all__ = [
    "MAX_CHANNEL_LENGTH",
    "MAX_COUNT",
    "MAX_ERROR_LENGTH",
    "MAX_LABELS",
    "MAX_LABEL_LENGTH",
    "MAX_LATENCY_SUM_MS",
    "ReportBody",
    "routes",
]

MAX_COUNT = 10**12
"""Largest `ok` or `failed` of one report."""
MAX_LATENCY_SUM_MS = 1e15
"""Largest `latency_sum_ms` of one report: MAX_COUNT operations of a second each."""
MAX_ERROR_LENGTH = 1000
MAX_CHANNEL_LENGTH = 100
"""As long as a stage's channel can be."""
MAX_LABELS = 64
MAX_LABEL_LENGTH = 255
"""Longest label key, and longest label value."""
_KNOWN_VERSIONS_KEPT = 10_000


def _integral(value: Any) -> Any:
    # JSON has one number type: 3.0 is the integer 3 (true and "3" stay refused: strict mode).
    return int(value) if isinstance(value, float) and value.is_integer() else value


# The bounds inside the validator, so that the JSON Schema states them (as minimum and maximum).
Count = Annotated[int, Field(ge=0, le=MAX_COUNT), BeforeValidator(_integral)]
Milliseconds = Annotated[float, Field(ge=0, le=MAX_LATENCY_SUM_MS, allow_inf_nan=False)]


def _label_keys(labels: dict[str, str] | None) -> dict[str, str] | None:
    # A poll names a label as `label=KEY=VALUE`: a key with "=" could never match a stage.
    for key in labels or {}:
        if not key or "=" in key or len(key) > MAX_LABEL_LENGTH:
            raise ValueError(
                f"label key {key[:40]!r} must be 1-{MAX_LABEL_LENGTH} characters without '='"
            )
    return labels


# _label_keys checks the keys (with its own message); the JSON Schema says the same of them.
_LabelKey = Annotated[
    str,
    STORABLE,
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_LENGTH, "not": {"pattern": "="}}
    ),
]
Labels = Annotated[
    dict[_LabelKey, Annotated[str, Field(max_length=MAX_LABEL_LENGTH), STORABLE]] | None,
    Field(default=None, max_length=MAX_LABELS),
    AfterValidator(_label_keys),
]


class ReportBody(BaseModel):
    """The report a client POSTs (docs/contract.md, Distribution API). Unknown fields are ignored, so
    newer clients can send more."""

    model_config = ConfigDict(
        extra="ignore", strict=True, frozen=True, use_attribute_docstrings=True
    )

    path: ConfigPath
    namespace: Namespace = DEFAULT_NAMESPACE
    client: Annotated[str, Field(min_length=1, max_length=255), STORABLE]
    version: Annotated[str, Field(min_length=1, max_length=64), STORABLE]
    ok: Count
    failed: Count
    error: Annotated[str, Field(max_length=MAX_ERROR_LENGTH), STORABLE] | None = None
    channel: Annotated[str, Field(min_length=1, max_length=MAX_CHANNEL_LENGTH), STORABLE] | None = (
        None
    )
    """The channel the client polls with; with `labels`, which stage's cohort the report is from."""
    labels: Labels = None
    """The labels the client polls with. A report naming neither channel nor labels counts with
    the identity the client last polled with."""
    applied: bool | None = None
    """True: the client applied `version` (wrote it, and its reload succeeded); false: applying
    it failed (`apply_error` says why). Absent: a health report only."""
    apply_error: Annotated[str, Field(max_length=MAX_ERROR_LENGTH), STORABLE] | None = None
    """Why applying `version` failed; only with `applied: false`."""
    latency_count: Count | None = None
    """How many operations since the last report were timed; only with `latency_sum_ms`."""
    latency_sum_ms: Milliseconds | None = None
    """The timed operations' durations added up, in milliseconds; only with `latency_count` (their
    mean latency is latency_sum_ms / latency_count)."""

    @model_validator(mode="after")
    def _apply_error_with_failed_apply(self) -> ReportBody:
        if self.apply_error is not None and self.applied is not False:
            raise ValueError("apply_error only with applied: false (a failed apply)")
        return self

    @model_validator(mode="after")
    def _latency_count_with_its_sum(self) -> ReportBody:
        # Both or neither: a sum without its count (or the reverse) has no mean to compare.
        if self.latency_count is None and self.latency_sum_ms is not None:
            raise ValueError("latency_sum_ms needs latency_count (how many operations were timed)")
        if self.latency_sum_ms is None and self.latency_count is not None:
            raise ValueError("latency_count needs latency_sum_ms (their durations added up, in ms)")
        if self.latency_count == 0 and self.latency_sum_ms:
            raise ValueError(
                f"latency_sum_ms is {self.latency_sum_ms} with latency_count 0: "
                "a sum needs timed operations"
            )
        return self


async def post_report(request: Request) -> JSONResponse:
    client = require_client(request)
    raw = await read_json(request, limit=REPORT_BODY_LIMIT)
    report = validate_body(ReportBody, raw, what="report")
    access_of(request).client_reads(client, report.namespace, route_of(request))
    await _require_version(request, report)
    if report.applied is not None:
        record_applied(request, report)
        if report.ok == 0 and report.failed == 0 and not report.latency_count:
            # An apply report only (the SDK and the agent send these): no operations to judge,
            # and a 0/0 health report would count the client as reporting health.
            return JSONResponse(Accepted().body(), status_code=202)
    received = ReceivedReport(
        namespace=report.namespace,
        path=report.path,
        client=report.client,
        version=report.version,
        ok=report.ok,
        failed=report.failed,
        received_at=state_of(request).store.now(),
        error=report.error,
        channel=report.channel,
        labels=report.labels,
        latency_count=report.latency_count or 0,
        latency_sum_ms=report.latency_sum_ms or 0.0,
    )
    if not await store_report(
        state_of(request).store, request.app.state.unwritten_reports, received
    ):
        raise ApiError(
            503,
            "the store is unreachable and too many reports wait for it: send this one again later",
            headers={"Retry-After": str(REPORT_RETRY_AFTER_SECONDS)},
        )
    state_of(request).metrics.record_report(
        report.namespace, report.path, report.version, report.ok, report.failed
    )
    return JSONResponse(Accepted().body(), status_code=202)


def record_applied(request: Request, report: ReportBody) -> None:
    """Queue what the client applied for the next batched write (api/applied.py)."""
    pending: PendingApplied = request.app.state.pending_applied
    pending.add_report(
        report.namespace,
        report.path,
        AppliedReport(
            client=report.client,
            version=report.version,
            at=state_of(request).store.now(),
            # a failed apply with no reason still is a failure: the store keeps an error for it
            error=None if report.applied else (report.apply_error or "apply failed"),
            channel=report.channel,
            labels=dict(report.labels or {}),
        ),
    )


async def _require_version(request: Request, report: ReportBody) -> None:
    """404 unless the config has that version: metrics are labelled by version, and a label
    value must come from the store, not from whatever a client sends."""
    key = (report.namespace, report.path, report.version)
    known: set[tuple[str, str, str]] = request.app.state.known_versions
    if key in known:
        return
    if report.version not in served_versions(request, report.namespace, report.path):
        try:
            stored = await asyncio.to_thread(
                state_of(request).store.get_version, report.namespace, report.path, report.version
            )
        except Exception as exc:  # the store is down: the client sends it again (SDK, agent)
            raise ApiError(
                503,
                f"cannot check version {report.version!r} of {report.path!r}, which is not "
                f"served now: the store is unreachable ({type(exc).__name__})",
                headers={"Retry-After": str(REPORT_RETRY_AFTER_SECONDS)},
            ) from exc
        if stored is None:
            raise ApiError(
                404,
                f"config {report.path!r} in namespace {report.namespace!r} has no version "
                f"{report.version!r}",
            )
    if len(known) >= _KNOWN_VERSIONS_KEPT:
        known.clear()
    known.add(key)


routes = [route("/v1/reports", post_report, methods=["POST"])]


def served_versions(request: Request, namespace: str, path: str) -> frozenset[str]:
    """The versions the snapshots in memory serve for this config (none before they load)."""
    try:
        snapshot = state_of(request).snapshot_cache.get(namespace, path)
    except SnapshotsNotLoadedError:
        return frozenset()
    return snapshot.served_versions() if snapshot is not None else frozenset()
