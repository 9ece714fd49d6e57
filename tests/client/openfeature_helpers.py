"""Helpers of the OpenFeature provider tests: the SDK's global state reset, and its events."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from openfeature import api
from openfeature.event import EventDetails, EventHandler, ProviderEvent

from tempoconf.client.openfeature import PROVIDER_NAME

__all__ = ["Events", "openfeature_events"]


@dataclass
class Events:
    """Every event the SDK dispatched for the tempoconf provider, in order."""

    seen: list[tuple[ProviderEvent, EventDetails]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, event: ProviderEvent, details: EventDetails) -> None:
        if details.provider_name == PROVIDER_NAME:  # not the no-op provider's READY at start
            with self._lock:
                self.seen.append((event, details))

    def kinds(self) -> list[ProviderEvent]:
        with self._lock:
            return [event for event, _ in self.seen]

    def of(self, kind: ProviderEvent) -> list[EventDetails]:
        with self._lock:
            return [details for event, details in self.seen if event == kind]

    def last(self) -> ProviderEvent | None:
        kinds = self.kinds()
        return kinds[-1] if kinds else None


@contextmanager
def openfeature_events() -> Iterator[Events]:
    """Record the provider's events; on exit, shut OpenFeature down (providers, handlers)."""
    events = Events()
    handlers = {kind: _recorder(events, kind) for kind in ProviderEvent}
    for kind, handler in handlers.items():
        api.add_handler(kind, handler)
    try:
        yield events
    finally:
        api.shutdown()  # shuts every provider down and drops every handler


def _recorder(events: Events, kind: ProviderEvent) -> EventHandler:
    return lambda details: events.record(kind, details)
