"""An edge relay (`tempoconf edge`) as an ASGI app: the API's own answering code over bundles.

The edge is a `DistributionApp` whose snapshots come from its upstream (`BundleSnapshots`) instead
of the store: config polls, multi-path reads and bundles are answered by exactly the code the origin
uses, so an edge's client cannot tell it from the origin. Ahead of that, a request for a config
the edge does not serve yet fetches it and waits for the upstream's first answer; the upstream's
change feed keeps it fresh, and the edge serves its own feed (`/v1/changes`) to edges behind it. Reports
are queued and forwarded upstream in batches (`ReportRelay`). Admin routes are the origin's: the
edge answers them 421 and names its upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.middleware import Middleware
from starlette.types import Receive, Scope, Send

from tempoconf.api.access import AccessControl
from tempoconf.api.app import DistributionApp
from tempoconf.api.change_feed import CHANGES_ROUTE
from tempoconf.api.distribution import QUERIES_KEPT
from tempoconf.api.edge_reports import DEFAULT_FLUSH_INTERVAL, ReportRelay
from tempoconf.api.edge_snapshots import (
    DEFAULT_FIRST_ANSWER_TIMEOUT,
    DEFAULT_IDLE_AFTER,
    FETCH_CONCURRENCY,
    BundleSnapshots,
    UpstreamUnavailableError,
)
from tempoconf.api.errors import EXCEPTION_HANDLERS, UnexpectedErrors, error_body
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.polls import CONFIGS_PREFIX, ConfigPolls
from tempoconf.api.routes import (
    bundles,
    changes,
    config_sets,
    configs,
    edge_reports,
    health,
    metrics,
)
from tempoconf.api.routes.config_sets import MAX_PATHS
from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem, path_problem
from tempoconf.resolution.bundles import BUNDLES_PREFIX
from tempoconf.settings import Settings

__all__ = ["EdgeApp", "create_edge_app"]

CONFIG_SET = "/v1/configs"
_SEEN_DRAIN_INTERVAL = 10.0
"""The clients seen polling an edge are not recorded (no store): dropped this often."""

logger = logging.getLogger(__name__)


class EdgeApp(DistributionApp):
    """`DistributionApp` that starts serving a config on its first request (ahead of the config
    routes), and has no admin routes."""

    source: BundleSnapshots
    upstream_url: str
    access: AccessControl
    _asked: dict[tuple[str, bytes], list[tuple[str, str]]]
    """(path, query string) → the configs the request names, parsed once."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith(("/v1/admin/", "/ofrep/")) or path == "/openapi.json":
            await _send_json(
                send,
                421,
                f"this is a tempoconf edge relay: {path} is served by the origin API, not by an "
                f"edge (its upstream is {self.upstream_url})",
                head=scope["method"] == "HEAD",
            )
            return
        if path != CHANGES_ROUTE and scope["method"] in ("GET", "HEAD") and self._authorized(scope):
            asked = (path, scope["query_string"])
            keys = self._asked.get(asked)
            if keys is None:
                # Clients repeat the same request on every poll: parse it once.
                keys = _configs_asked(*asked)
                if len(self._asked) >= QUERIES_KEPT:
                    self._asked.clear()
                self._asked[asked] = keys
            try:
                if len(keys) == 1:  # a poll: no task, and no suspension once served
                    await self.source.ensure(*keys[0])
                elif keys:
                    await asyncio.gather(*(self.source.ensure(*key) for key in keys))
            except UpstreamUnavailableError as error:
                await _send_json(send, 503, str(error), head=scope["method"] == "HEAD")
                return
        await super().__call__(scope, receive, send)

    def stopping(self) -> None:
        """DistributionApp's, and the edge's own long-poll upstream is cancelled too."""
        self.source.stop_following()
        super().stopping()

    def _authorized(self, scope: Scope) -> bool:
        """Only a known client makes the edge serve a config; the routes answer the others 401 (and a
        namespace it may not read, 403)."""
        authorization = next((v for n, v in scope["headers"] if n == b"authorization"), None)
        client = self.access.known_client(authorization)
        if client is None:
            return False
        if client.namespaces is None:
            return True
        namespace = QueryParams(scope["query_string"]).get("namespace", DEFAULT_NAMESPACE)
        return client.reads(namespace)


def _configs_asked(path: str, query_string: bytes) -> list[tuple[str, str]]:
    """The valid (namespace, path) a config, config-set or bundle request names; the invalid ones
    are left to the route to refuse (400)."""
    if path.startswith(CONFIGS_PREFIX):
        paths = [path[len(CONFIGS_PREFIX) :]]
    elif path.startswith(BUNDLES_PREFIX):
        paths = [path[len(BUNDLES_PREFIX) :]]
    elif path == CONFIG_SET:
        paths = QueryParams(query_string).getlist("path")[:MAX_PATHS]
    else:
        return []
    namespace = QueryParams(query_string).get("namespace", DEFAULT_NAMESPACE)
    if namespace_problem(namespace) is not None:
        return []
    return [(namespace, p) for p in dict.fromkeys(paths) if path_problem(p) is None]


async def _send_json(send: Send, status: int, message: str, *, head: bool) -> None:
    body = json.dumps(error_body(message), ensure_ascii=False, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-cache"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else body})


class _EdgeCollector(Collector):
    def __init__(self, source: BundleSnapshots, relay: ReportRelay) -> None:
        self._source = source
        self._relay = relay

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "tempoconf_edge_watches",
            "Configs this edge serves, kept fresh by its one change feed long-poll upstream",
            value=self._source.watched,
        )
        fetches = CounterMetricFamily(
            "tempoconf_edge_bundle_fetches",
            "Bundles fetched upstream, by outcome: ok, absent (404), failed; one per config first "
            "asked for, per change of a served config, and per served config on a feed reset",
            labels=["outcome"],
        )
        for outcome in ("ok", "absent", "failed"):
            fetches.add_metric([outcome], self._source.fetch_counts[outcome])
        yield fetches
        yield CounterMetricFamily(
            "tempoconf_edge_feed_resets",
            "Times the upstream's change feed said reset (every served config fetched again)",
            value=self._source.feed_resets,
        )
        yield GaugeMetricFamily(
            "tempoconf_edge_reports_pending",
            "Reports queued for the upstream",
            value=self._relay.pending,
        )
        reports = CounterMetricFamily(
            "tempoconf_edge_reports",
            "Reports the edge handled, by outcome: forwarded upstream, refused by it (4xx), "
            "dropped (queue full)",
            labels=["outcome"],
        )
        counts = self._relay.counts
        reports.add_metric(["forwarded"], counts.forwarded)
        reports.add_metric(["refused"], counts.refused)
        reports.add_metric(["dropped"], counts.dropped)
        yield reports


def create_edge_app(
    upstream_url: str,
    settings: Settings,
    *,
    upstream_token: str | None = None,
    first_answer_timeout: float = DEFAULT_FIRST_ANSWER_TIMEOUT,
    idle_after: float = DEFAULT_IDLE_AFTER,
    report_interval: float = DEFAULT_FLUSH_INTERVAL,
) -> EdgeApp:
    """The edge relay of `upstream_url` (an origin API or another edge). Its clients use
    `settings.client_token`; it uses `upstream_token` upstream."""
    headers = {"Authorization": f"Bearer {upstream_token}"} if upstream_token else {}
    http = httpx.AsyncClient(
        base_url=upstream_url.rstrip("/"),
        headers=headers,
        # The change feed's long-poll, FETCH_CONCURRENCY bundle fetches, the probe, the reports.
        limits=httpx.Limits(max_connections=FETCH_CONCURRENCY + 8, max_keepalive_connections=32),
    )
    source = BundleSnapshots(http, first_answer_timeout=first_answer_timeout, idle_after=idle_after)
    relay = ReportRelay(http, interval=report_interval)
    api_metrics = ApiMetrics(source)
    api_metrics.registry.register(_EdgeCollector(source, relay))
    access = AccessControl.from_settings(settings)
    config_polls = ConfigPolls(source, settings, api_metrics, access)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with source.running(), relay.running():
            drain = asyncio.create_task(_drop_seen(config_polls), name="tempoconf-edge-seen")
            try:
                yield
            finally:
                drain.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drain
                await access.aclose()
        await http.aclose()

    app = EdgeApp(
        routes=[
            *configs.routes,
            *bundles.routes,
            *changes.routes,
            *config_sets.routes,
            *edge_reports.routes,
            *health.routes,
            *metrics.routes,
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[Middleware(UnexpectedErrors)],
        lifespan=lifespan,
    )
    app.source = source
    app._asked = {}
    app.upstream_url = upstream_url
    app.access = access
    app.state.report_relay = relay
    # OFREP included: never reached (EdgeApp answers it 421), but DistributionApp expects one.
    app.answer_from(source, settings, api_metrics, config_polls)
    return app


async def _drop_seen(config_polls: ConfigPolls) -> None:
    # An edge has no store to record the clients seen polling in (the origin sees the edge).
    while True:
        await asyncio.sleep(_SEEN_DRAIN_INTERVAL)
        config_polls.take_seen()
