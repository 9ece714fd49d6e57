"""`POST /v1/reports` on an edge relay: validated as the origin does, then queued for the upstream.

A report on a version the edge serves for that config is queued (202, api/edge_reports.py); one on
any other version is forwarded at once and answered with the upstream's verdict, since only the
origin's store knows whether that version exists (the origin's 404 for an unknown one).
"""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tempoconf.api.answers import Accepted
from tempoconf.api.auth import access_of, require_client, route_of
from tempoconf.api.bodies import REPORT_BODY_LIMIT, read_json, validate_body
from tempoconf.api.deps import state_of
from tempoconf.api.edge_reports import ReportRelay
from tempoconf.api.errors import ApiError
from tempoconf.api.health_reports import REPORT_RETRY_AFTER_SECONDS
from tempoconf.api.routes.reports import ReportBody, served_versions
from tempoconf.api.routing import route

__all__ = ["routes"]


async def post_report(request: Request) -> Response:
    client = require_client(request)
    raw = await read_json(request, limit=REPORT_BODY_LIMIT)
    report = validate_body(ReportBody, raw, what="report")
    access_of(request).client_reads(client, report.namespace, route_of(request))
    body = report.model_dump(mode="json", exclude_none=True)
    relay: ReportRelay = request.app.state.report_relay
    if report.version not in served_versions(request, report.namespace, report.path):
        try:
            answer = await relay.forward(body)
        except httpx.HTTPError as exc:
            raise ApiError(
                503,
                f"cannot judge a report on version {report.version!r}, which this edge does not "
                f"serve: the upstream is unreachable ({type(exc).__name__})",
                headers={"Retry-After": str(REPORT_RETRY_AFTER_SECONDS)},
            ) from exc
        return Response(
            answer.content,
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type", "application/json"),
        )
    if not relay.add(body):
        raise ApiError(
            503,
            "the edge's report queue is full: the upstream is unreachable",
            headers={"Retry-After": str(REPORT_RETRY_AFTER_SECONDS)},
        )
    if report.ok or report.failed:
        state_of(request).metrics.record_report(
            report.namespace, report.path, report.version, report.ok, report.failed
        )
    return JSONResponse(Accepted().body(), status_code=202)


routes = [route("/v1/reports", post_report, methods=["POST"])]
