"""The API's Prometheus metrics, in a registry of its own (one per app).

The poll path counts into plain dicts that a collector turns into metrics at scrape time: a dict
increment is far cheaper than a prometheus-client child (label lookup and a lock) per poll.

Series labelled by version (reports, client operations) are bounded: when the snapshots change,
those of versions that are no longer stable or staged of their config are dropped, so a long-lived
process holds the series of the versions live now (and those reported since the last change).
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tempoconf.access.source import PolicySource
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.resolution import STABLE

__all__ = ["ApiMetrics", "LATENCY_BUCKETS", "LONG_POLL_BUCKETS"]

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
LONG_POLL_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)


class _Histogram:
    """Bucket counts and a sum; cumulative only when collected."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def buckets(self) -> list[tuple[str, float]]:
        cumulative = 0
        out: list[tuple[str, float]] = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        return out


class ApiMetrics:
    """Every metric of one app, and `registry` to expose them."""

    def __init__(self, cache: SnapshotSource) -> None:
        self.registry = CollectorRegistry()
        self.polls: defaultdict[tuple[str, str, str, int], int] = defaultdict(int)
        """(namespace, path, stage, status code) → polls answered. Unknown or invalid configs
        count under namespace="" and path="" (their names come from the caller: unbounded)."""
        self.ofrep: defaultdict[tuple[str, int], int] = defaultdict(int)
        """(kind: "flag" or "bulk", status code) → OFREP evaluation requests answered."""
        self.long_polls_waiting = 0
        self.long_poll_wakeups = 0
        """Long-polls woken before their deadline: by a change of their answer, or to resolve
        again (shutdown, their config deleted). A change that moves nobody wakes nobody."""
        self.long_polls_abandoned = 0
        """Long-polls whose client disconnected before an answer."""
        self.seen_clients_dropped = 0
        """Client identities from polls not recorded as seen (pending limit, or not storable)."""
        self.long_poll_waits = _Histogram(LONG_POLL_BUCKETS)
        self.latency: dict[tuple[str, str], _Histogram] = {}
        self.reports: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        """(namespace, path, version) → health reports received."""
        self.client_operations: defaultdict[tuple[str, str, str, str], int] = defaultdict(int)
        """(namespace, path, version, result) → operations clients reported."""
        self.access_denials: Mapping[tuple[str, str], int] = {}
        """(route template, reason) → requests refused by access (api/access.py)."""
        self.access_policy: PolicySource | None = None
        """The access policy file followed (None: no policy)."""
        self._cache = cache
        self.registry.register(_Collector(self, cache))
        cache.on_change(self._snapshots_changed)

    def observe_request(self, method: str, route: str, seconds: float) -> None:
        """Latency of one request, by route template (never the raw path)."""
        self.request_latency(method, route).observe(seconds)

    def request_latency(self, method: str, route: str) -> _Histogram:
        """The latency histogram of a route template (the poll path holds its own)."""
        histogram = self.latency.get((method, route))
        if histogram is None:
            histogram = self.latency[(method, route)] = _Histogram(LATENCY_BUCKETS)
        return histogram

    def record_report(self, namespace: str, path: str, version: str, ok: int, failed: int) -> None:
        self.reports[(namespace, path, version)] += 1
        if ok:
            self.client_operations[(namespace, path, version, "ok")] += ok
        if failed:
            self.client_operations[(namespace, path, version, "failed")] += failed

    def _snapshots_changed(self, keys: Sequence[tuple[str, str]]) -> None:
        """Drop the series of versions the changed configs no longer serve (neither stable nor
        staged): else every version ever reported keeps its series for the life of the process.
        Only a changed config can have stopped serving a version, so only those are looked at."""
        changed = set(keys)
        if not changed:
            return
        snapshots = self._cache.snapshots()
        live: dict[tuple[str, str], frozenset[str]] = {}
        for key in changed:
            snapshot = snapshots.get(key)
            live[key] = snapshot.served_versions() if snapshot is not None else frozenset()
        for key3 in [k for k in self.reports if k[:2] in live and k[2] not in live[k[:2]]]:
            del self.reports[key3]
        for key4 in [
            k for k in self.client_operations if k[:2] in live and k[2] not in live[k[:2]]
        ]:
            del self.client_operations[key4]


class _Collector(Collector):
    def __init__(self, metrics: ApiMetrics, cache: SnapshotSource) -> None:
        self._metrics = metrics
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        polls = CounterMetricFamily(
            "tempoconf_api_polls",
            "Config polls answered, by namespace, path, stage and HTTP status code",
            labels=["namespace", "path", "stage", "code"],
        )
        for (namespace, path, stage, code), count in list(metrics.polls.items()):
            polls.add_metric([namespace, path, stage, str(code)], count)
        yield polls
        ofrep = CounterMetricFamily(
            "tempoconf_api_ofrep_evaluations",
            "OFREP evaluation requests answered, by kind (flag: one key, bulk: the namespace) "
            "and HTTP status code",
            labels=["kind", "code"],
        )
        for (kind, code), count in list(metrics.ofrep.items()):
            ofrep.add_metric([kind, str(code)], count)
        yield ofrep
        yield GaugeMetricFamily(
            "tempoconf_api_long_polls_waiting",
            "Long-polls waiting for a change right now",
            value=metrics.long_polls_waiting,
        )
        yield CounterMetricFamily(
            "tempoconf_api_long_polls_abandoned",
            "Long-polls whose client disconnected before it was answered",
            value=metrics.long_polls_abandoned,
        )
        yield CounterMetricFamily(
            "tempoconf_api_seen_clients_dropped",
            "Client identities from polls not recorded as seen: over the pending limit between "
            "two flushes, or not storable",
            value=metrics.seen_clients_dropped,
        )
        waits = HistogramMetricFamily(
            "tempoconf_api_long_poll_wait_seconds",
            "How long long-polls that waited held before they were answered",
        )
        waits.add_metric([], metrics.long_poll_waits.buckets(), metrics.long_poll_waits.total)
        yield waits
        latency = HistogramMetricFamily(
            "tempoconf_api_request_duration_seconds",
            "Time to answer a request (long-polls: without their wait), by route template",
            labels=["method", "route"],
        )
        for (method, route), histogram in list(metrics.latency.items()):
            latency.add_metric([method, route], histogram.buckets(), histogram.total)
        yield latency
        reports = CounterMetricFamily(
            "tempoconf_reports",
            "Health reports received from clients (versions still stable or staged)",
            labels=["namespace", "path", "version"],
        )
        for labels, count in list(metrics.reports.items()):
            reports.add_metric(list(labels), count)
        yield reports
        operations = CounterMetricFamily(
            "tempoconf_client_operations",
            "Operations clients reported, by result (versions still stable or staged)",
            labels=["namespace", "path", "version", "result"],
        )
        for labels4, count in list(metrics.client_operations.items()):
            operations.add_metric(list(labels4), count)
        yield operations
        yield CounterMetricFamily(
            "tempoconf_api_long_poll_wakeups",
            "Long-polls woken before their deadline, by a change of what they resolve to (or to "
            "resolve again: shutdown, config deleted); a change that moves nobody wakes nobody",
            value=metrics.long_poll_wakeups,
        )
        denied = CounterMetricFamily(
            "tempoconf_api_access_denied",
            "Requests refused by access control, by route template and reason (missing, "
            "malformed, unknown_token, role, namespace, client_token, operator_token, oidc_*, "
            "workflow_id)",
            labels=["route", "reason"],
        )
        for (route, reason), count in list(metrics.access_denials.items()):
            denied.add_metric([route, reason], count)
        yield denied
        yield from self._access_policy()
        yield from self._served()

    def _access_policy(self) -> Iterator[Metric]:
        source = self._metrics.access_policy
        if source is None:  # no policy: nothing to reload
            return
        yield CounterMetricFamily(
            "tempoconf_api_access_policy_reload_failures",
            "Reloads of the access policy file that failed (the policy loaded before stayed in "
            "force; the log and /readyz say why)",
            value=source.failed_reloads,
        )
        yield GaugeMetricFamily(
            "tempoconf_api_access_policy_loaded_timestamp_seconds",
            "When the access policy in force was read from its file (Unix time)",
            value=source.loaded_at.timestamp(),
        )
        yield GaugeMetricFamily(
            "tempoconf_api_access_policy_stale",
            "1 while the access policy file's latest content does not load (an older policy is "
            "in force), else 0",
            value=0 if source.error is None else 1,
        )

    def _served(self) -> Iterator[Metric]:
        served = GaugeMetricFamily(
            "tempoconf_api_served_version",
            "1 for the version each stage of each config serves now (stable included)",
            labels=["namespace", "path", "stage", "version"],
        )
        revision = GaugeMetricFamily(
            "tempoconf_api_snapshot_revision", "Store revision of the snapshots served"
        )
        if self._cache.loaded:
            now = datetime.now(UTC)
            for (namespace, path), snapshot in self._cache.snapshots().items():
                if snapshot.stable is not None:
                    served.add_metric([namespace, path, STABLE, snapshot.stable.version], 1)
                if snapshot.staged is not None:
                    for stage in snapshot.stages:
                        if stage.expires_at > now:
                            served.add_metric(
                                [namespace, path, stage.name, snapshot.staged.version], 1
                            )
            revision.add_metric([], float(self._cache.revision or 0))
        yield served
        yield revision
        # Which process answered this scrape: with `tempoconf api --workers N`, each of the N
        # keeps its own metrics and one of them answers each scrape (README, Metrics).
        process = GaugeMetricFamily(
            "tempoconf_api_process_info",
            "1, labelled with the process id of the API process that answered this scrape",
            labels=["pid"],
        )
        process.add_metric([str(os.getpid())], 1)
        yield process
        age = self._cache.age
        if age is not None:  # absent before the first load: there is no snapshot to be old
            yield GaugeMetricFamily(
                "tempoconf_api_snapshot_age_seconds",
                "Seconds since the snapshots served were last known to be the store's current "
                "ones (grows while the store is unreachable; polls are served from them)",
                value=age,
            )
