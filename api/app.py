"""The distribution API as an ASGI app: Starlette, with config polls answered ahead of it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import Receive, Scope, Send
from temporalio.client import Client

from tempoconf.api.access import AccessControl
from tempoconf.api.applied import APPLIED_RETENTION, PendingApplied, record_applied_reports
from tempoconf.api.bundles import BUNDLES_PREFIX, BundlePolls
from tempoconf.api.change_feed import ChangeFeed, ChangeFeedCollector
from tempoconf.api.changes import LISTEN_FALLBACK_POLL_INTERVAL, ChangeListener
from tempoconf.api.errors import EXCEPTION_HANDLERS, UnexpectedErrors
from tempoconf.api.health_reports import UnwrittenReports, record_unwritten_reports
from tempoconf.api.lean_protocol import DirectAnswer
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.ofrep import OFREP_BULK, OFREP_FLAG_PREFIX, OfrepEvaluations
from tempoconf.api.openapi import route as openapi
from tempoconf.api.polls import CONFIGS_PREFIX, ConfigPolls
from tempoconf.api.read_limits import bounded_body
from tempoconf.api.routes import (
    bundles,
    changes,
    clients,
    config_sets,
    configs,
    freezes,
    health,
    metrics,
    ofrep,
    reports,
    rollouts,
    schemas,
    served,
    versions,
)
from tempoconf.api.seen import SEEN_CLIENT_RETENTION, SEEN_FLUSH_INTERVAL, record_seen_clients
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.snapshots import DEFAULT_POLL_INTERVAL, SnapshotCache
from tempoconf.api.temporal_client import TemporalConnector
from tempoconf.api.tracing import admin_tracing
from tempoconf.settings import Settings
from tempoconf.store.store import Store

__all__ = ["DistributionApp", "REPORT_RETENTION", "create_app"]

REPORT_RETENTION = timedelta(days=7)
"""Health reports older than this are deleted."""
_PRUNE_EVERY = 3600.0

logger = logging.getLogger(__name__)


class DistributionApp(Starlette):
    """Starlette, except that `GET|HEAD /v1/configs/...` goes straight to `ConfigPolls`: every
    client polls, and the poll path must not pay the middleware stack and routing per request."""

    config_polls: ConfigPolls
    bundle_polls: BundlePolls
    """`GET|HEAD /v1/bundles/...`: answered ahead of the framework too (clients long-poll it)."""
    change_feed: ChangeFeed
    """`GET /v1/changes`: the configs changed after a revision (edges follow it upstream)."""
    ofrep: OfrepEvaluations
    """OFREP's evaluations: answered ahead of the framework too (clients poll the bulk call)."""
    body_timeout: float
    """Seconds a request body may take to arrive (settings.api_body_timeout)."""
    direct_routes: tuple[tuple[bytes, DirectAnswer], ...] = ()
    """The protocol's `DirectAnswers` (api/lean_protocol.py): a plain GET of a config or a
    bundle is answered on its connection, by ConfigPolls or BundlePolls, without a frame of
    ours between the protocol and them; anything else goes the ASGI way."""

    def answer_from(
        self,
        source: SnapshotSource,
        settings: Settings,
        metrics: ApiMetrics,
        config_polls: ConfigPolls,
    ) -> None:
        """Wire the client-facing answers over `source`: the store's snapshots (the API) or an
        upstream's bundles (an edge relay), guarded by the access `config_polls` has."""
        self.state.settings = settings
        self.state.snapshot_cache = source
        self.state.metrics = metrics
        self.state.access = access = config_polls.access
        metrics.access_denials = access.denials.counts
        metrics.access_policy = access.source
        self.config_polls = self.state.config_polls = config_polls
        self.bundle_polls = self.state.bundle_polls = BundlePolls(source, settings, metrics, access)
        self.ofrep = self.state.ofrep = OfrepEvaluations(source, settings, metrics, config_polls)
        self.change_feed = self.state.change_feed = ChangeFeed(source)
        metrics.registry.register(ChangeFeedCollector(self.change_feed))
        self.body_timeout = settings.api_body_timeout
        self.direct_routes = (
            (config_polls.prefix, config_polls.answer_directly),
            (self.bundle_polls.prefix, self.bundle_polls.answer_directly),
        )

    def stopping(self) -> None:
        """The server stops (api/server.py): every waiting request is answered now with what it
        would get now (200 or 304), and new ones at once; none is left to the grace's end."""
        self.config_polls.close()  # single-config long-polls, and multi-config ones (closing)
        self.bundle_polls.close()
        self.change_feed.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            method: str = scope["method"]
            if method == "GET" or method == "HEAD":
                if path.startswith(CONFIGS_PREFIX):
                    await self.config_polls(scope, receive, send)
                    return
                if path.startswith(BUNDLES_PREFIX):
                    await self.bundle_polls(scope, receive, send)
                    return
            elif method == "POST" and (path == OFREP_BULK or path.startswith(OFREP_FLAG_PREFIX)):
                await self.ofrep(scope, receive, send)
                return
            receive = bounded_body(receive, self.body_timeout)
        await super().__call__(scope, receive, send)


def create_app(
    store: Store,
    settings: Settings,
    *,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    listen_poll_interval: float = LISTEN_FALLBACK_POLL_INTERVAL,
    temporal_client: Client | None = None,
    report_retention: timedelta = REPORT_RETENTION,
    seen_flush_interval: float = SEEN_FLUSH_INTERVAL,
    seen_client_retention: timedelta = SEEN_CLIENT_RETENTION,
) -> DistributionApp:
    """The API over `store`. Its lifespan loads the snapshots, then follows the store: it checks
    `store.revision()` every `poll_interval` seconds, and on PostgreSQL listens for change
    notifications, polling only every `listen_poll_interval` seconds while that works.

    The clients seen polling, apply reports and the health reports kept while the store was down
    are written to the store every `seen_flush_interval` seconds (and at shutdown); what cannot
    be written stays for the next flush (api/pending.py). Clients seen and health reports are
    pruned after their retention.

    `temporal_client` (tests) replaces the lazy connection to `settings`' Temporal.
    `app.state.snapshot_cache` is the SnapshotCache, `app.state.metrics` the metrics.
    """
    access = AccessControl.from_settings(settings)
    cache = SnapshotCache(store, poll_interval=poll_interval)
    api_metrics = ApiMetrics(cache)
    conninfo = store.listen_conninfo()
    listener = (
        ChangeListener(conninfo, cache, fallback_poll_interval=listen_poll_interval)
        if conninfo is not None
        else None
    )
    config_polls = ConfigPolls(cache, settings, api_metrics, access)
    pending_applied = PendingApplied()
    unwritten_reports = UnwrittenReports()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with cache.running():
            tasks = [
                asyncio.create_task(
                    _prune(store, report_retention, seen_client_retention), name="prune"
                )
            ]
            if listener is not None:
                tasks.append(asyncio.create_task(listener.run(), name="tempoconf-listen"))
            stop_seen = asyncio.Event()
            seen = asyncio.create_task(
                record_seen_clients(
                    config_polls, store, api_metrics, stop=stop_seen, interval=seen_flush_interval
                ),
                name="tempoconf-seen-clients",
            )
            applied = asyncio.create_task(
                record_applied_reports(
                    pending_applied, store, stop=stop_seen, interval=seen_flush_interval
                ),
                name="tempoconf-applied",
            )
            health_reports = asyncio.create_task(
                record_unwritten_reports(
                    unwritten_reports, store, stop=stop_seen, interval=seen_flush_interval
                ),
                name="tempoconf-reports",
            )
            try:
                yield
            finally:
                # Not cancelled: told to stop, it writes what the last polls left, then ends.
                stop_seen.set()
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await seen
                await applied
                await health_reports
                await access.aclose()

    app = DistributionApp(
        routes=[
            *configs.routes,
            *bundles.routes,
            *changes.routes,
            *ofrep.routes,
            *config_sets.routes,
            *reports.routes,
            *clients.routes,
            *schemas.routes,
            *versions.routes,
            *rollouts.routes,
            *freezes.routes,
            *served.routes,
            *health.routes,
            *metrics.routes,
            *openapi.routes,
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        # Admin requests' spans outermost, to see the status UnexpectedErrors answers (tracing).
        middleware=[*admin_tracing(), Middleware(UnexpectedErrors)],
        lifespan=lifespan,
    )
    app.state.store = store
    app.answer_from(cache, settings, api_metrics, config_polls)
    app.state.temporal = TemporalConnector(settings, temporal_client)
    app.state.change_listener = listener
    app.state.known_versions = set()
    app.state.pending_applied = pending_applied
    app.state.unwritten_reports = unwritten_reports
    return app


async def _prune(store: Store, report_retention: timedelta, seen_retention: timedelta) -> None:
    """Delete old health reports and forget clients not seen for long, now, then every hour,
    until cancelled."""
    while True:
        try:
            deleted = await asyncio.to_thread(store.prune_reports, store.now() - report_retention)
            if deleted:
                logger.info("deleted %d health reports older than %s", deleted, report_retention)
        except Exception as exc:  # the store may be down; the next round tries again
            logger.warning("cannot prune health reports: %s", exc)
        try:
            forgotten = await asyncio.to_thread(
                store.prune_seen_clients, store.now() - seen_retention
            )
            if forgotten:
                logger.info("forgot %d clients not seen for %s", forgotten, seen_retention)
        except Exception as exc:  # as above
            logger.warning("cannot prune the clients seen: %s", exc)
        try:
            await asyncio.to_thread(store.prune_applied, store.now() - APPLIED_RETENTION)
        except Exception as exc:  # as above
            logger.warning("cannot prune the apply reports: %s", exc)
        await asyncio.sleep(_PRUNE_EVERY)
