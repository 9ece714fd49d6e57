"""`tempoconf_agent_config_version{config_path, stage, version, commit, author}`: 1 for the value
in use; the series of the value it replaced is removed, so a dashboard never sees two."""

from __future__ import annotations

import threading
import weakref

from prometheus_client import CollectorRegistry, Gauge

from tempoconf.client._model import ConfigValue

__all__ = ["METRIC_NAME", "VersionGauge"]

METRIC_NAME = "tempoconf_agent_config_version"
_LABELS = ("config_path", "stage", "version", "commit", "author")

# One Gauge per registry: a registry refuses a second metric of the same name, and clients for
# several configs may share one registry (one /metrics for the process).
_GAUGES: weakref.WeakKeyDictionary[CollectorRegistry, Gauge] = weakref.WeakKeyDictionary()
_GAUGES_LOCK = threading.Lock()


def _gauge(registry: CollectorRegistry) -> Gauge:
    with _GAUGES_LOCK:
        gauge = _GAUGES.get(registry)
        if gauge is None:
            gauge = Gauge(
                METRIC_NAME,
                "1 for the config version this client has in use (one series per config).",
                _LABELS,
                registry=registry,
            )
            _GAUGES[registry] = gauge
        return gauge


class VersionGauge:
    """The series of one client in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._gauge = _gauge(registry)
        self._labels: tuple[str, ...] | None = None
        self._lock = threading.Lock()

    def set(self, value: ConfigValue) -> None:
        """Show `value` as the one in use, removing the series of the previous one."""
        labels = (
            value.path,
            value.stage,
            value.version,
            str(value.metadata.get("commit") or ""),
            str(value.metadata.get("author") or ""),
        )
        with self._lock:
            if labels == self._labels:
                return
            # Set the new series before removing the old: a scrape in between sees two, never none.
            self._gauge.labels(*labels).set(1)
            self._remove_current()
            self._labels = labels

    def clear(self) -> None:
        """Remove this client's series (it no longer has a value in use)."""
        with self._lock:
            self._remove_current()
            self._labels = None

    def _remove_current(self) -> None:
        if self._labels is not None:
            try:
                self._gauge.remove(*self._labels)
            except KeyError:  # already gone: another client of the same identity removed it
                pass
