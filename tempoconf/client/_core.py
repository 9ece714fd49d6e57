"""The logic both flavours share, free of I/O: what to request, what an answer means, which value
is in use (hold rule), when to ask next (long-poll, minimum interval, backoff), cache and gauge.

The sync and asyncio clients only move bytes between this and httpx. Every method is safe to call
from several threads (the sync client's watcher runs in its own).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from tempoconf.backoff import Backoff
from tempoconf.client._cache import DiskCache
from tempoconf.client._hold import decide
from tempoconf.client._metrics import VersionGauge
from tempoconf.client._model import (
    ConfigClientError,
    ConfigRequestError,
    ConfigResponseError,
    ConfigUnavailableError,
    ConfigValue,
    Source,
)
from tempoconf.client._options import ClientOptions, check_path, client_id_of

__all__ = [
    "ConfigRequest",
    "ReportRequest",
    "MAX_APPLY_ERROR_LENGTH",
    "WatchState",
    "apply_error_text",
    "REPORT_ATTEMPTS",
    "check_report_answer",
    "latency_fields",
    "report_resend_after",
    "report_unreachable",
]

logger = logging.getLogger("tempoconf.client")

MAX_APPLY_ERROR_LENGTH = 1000
"""The API keeps an apply error up to this long; a longer one is cut, not refused."""
REPORT_ATTEMPTS = 3
"""A report refused with 503 and `Retry-After` (the API's store is down and too many reports wait
for it) is sent again after that many seconds, at most this many times in all; then the 503 is
raised as ConfigUnavailableError, as any other."""
MAX_RESEND_AFTER_SECONDS = 30.0
"""A longer `Retry-After` is waited this long: a report call must end."""
_E = TypeVar("_E", bound=ConfigClientError)
_CONFIRM_WRITE_INTERVAL = 60.0
"""A 304 refreshes the cache file's confirmation time at most this often (not on every poll)."""


@dataclass(frozen=True)
class ConfigRequest:
    url: str
    params: tuple[tuple[str, str], ...]
    headers: dict[str, str]
    wait: int
    """Long-poll seconds asked for (0: answer at once)."""
    read_timeout: float
    probe: bool = False
    """Asked at once because the last request failed: is the API back?"""


@dataclass(frozen=True)
class ReportRequest:
    url: str
    json: dict[str, Any]
    headers: dict[str, str]


class WatchState:
    """The value in use, the value held back (if any), and the schedule of the next request."""

    def __init__(
        self,
        api_url: str,
        path: str,
        options: ClientOptions,
        *,
        cache: DiskCache | None,
        gauge: VersionGauge,
        backoff: Backoff,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        check_path(path)
        self.api_url = api_url
        self.path = path
        self.options = options
        self.client_id = client_id_of(options)
        """The id this state polls as (it decides the percentile bucket)."""
        self.labels = dict(options.labels or {})
        self._cache = cache
        self._gauge = gauge
        self._backoff = backoff
        self._wall = wall
        self.monotonic = monotonic
        self._lock = threading.RLock()
        self._applied: ConfigValue | None = None
        self._pending: ConfigValue | None = None
        """What the API serves now, held back by the hold rule until `_applied.expires_at`."""
        self._seen_etag: str | None = None
        """The ETag of the last 200 (the pending value's when one is held), sent as If-None-Match:
        with the applied one's, a held-back value would be answered 200 again on every poll."""
        self._api_ok = False
        self._next_request_at = 0.0
        self._cache_confirmed_at = 0.0
        self.last_error: ConfigClientError | None = None
        """The error of the last failed request; None once one succeeds."""
        self._source_listeners: list[Callable[[Source], None]] = []
        self._flipped: Source | None = None
        """Set under the lock when a request flips the source; listeners are told after it."""
        if cache is not None:
            cached = cache.load()
            if cached is not None:
                self._applied = cached
                self._seen_etag = cached.etag
                self._cache_confirmed_at = cached.confirmed_at
                self._gauge.set(cached)

    @property
    def config_url(self) -> str:
        return f"{self.api_url.rstrip('/')}/v1/configs/{self.path}"

    @property
    def reports_url(self) -> str:
        return f"{self.api_url.rstrip('/')}/v1/reports"

    def auth_headers(self) -> dict[str, str]:
        token = self.options.token
        return {"Authorization": f"Bearer {token}"} if token else {}

    # -- reading -------------------------------------------------------------------------------
    def current(self) -> ConfigValue | None:
        """The value in use; source "cache" until the API confirms it, and while it cannot."""
        with self._lock:
            if self._applied is None:
                return None
            source: Source = "api" if self._api_ok else "cache"
            if self._applied.source == source:
                return self._applied
            return dataclasses.replace(self._applied, source=source)

    @property
    def pending(self) -> ConfigValue | None:
        """The value the API serves that the hold rule keeps back, if any."""
        with self._lock:
            return self._pending

    @property
    def registry(self) -> CollectorRegistry:
        return self._gauge.registry

    def add_source_listener(self, listener: Callable[[Source], None]) -> Callable[[], None]:
        """Call `listener(source)` when the API stops answering ("cache") and when it answers
        again ("api"): on each flip, not on every request. Returns a function that removes it."""
        with self._lock:
            self._source_listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._source_listeners:
                    self._source_listeners.remove(listener)

        return remove

    def fallback(self) -> ConfigValue:
        """The last good value after a failed request, or the error of that request."""
        value = self.current()
        if value is not None:
            return value
        error = self.last_error
        if isinstance(error, ConfigRequestError):
            raise ConfigRequestError(error.status, error.message, url=error.url) from error
        raise ConfigUnavailableError(
            f"no value for {self.options.namespace}/{self.path}: "
            f"{error or 'the API has not answered yet'}, and no cached value"
        ) from error

    # -- scheduling ----------------------------------------------------------------------------
    def delay(self) -> float:
        """Seconds to wait before the next request (0: now). Ends early when a hold expires, so
        the watcher wakes to apply the held-back value on time."""
        with self._lock:
            delay = max(0.0, self._next_request_at - self.monotonic())
            hold = self._seconds_until_hold_ends()
            return delay if hold is None else max(0.0, min(delay, hold))

    def config_request(self, *, long_poll: bool) -> ConfigRequest:
        """The next GET; `long_poll=False` asks for an answer at once (`get()`)."""
        options = self.options
        with self._lock:
            wait = 0
            # After a failure, ask for an answer at once: a held poll would tell that the API is
            # back (source "api" again) only when its wait runs out, up to long_poll_seconds on.
            probe = long_poll and self._seen_etag is not None and not self._api_ok
            if long_poll and options.long_poll_seconds > 0 and self._seen_etag is not None:
                # Without an ETag the API answers at once anyway; with a hold, wake when it ends.
                wait = 0 if probe else math.ceil(options.long_poll_seconds)
                hold = self._seconds_until_hold_ends()
                if hold is not None and wait:
                    wait = max(1, min(wait, math.ceil(hold)))
            params: list[tuple[str, str]] = [
                ("namespace", options.namespace),
                ("client", self.client_id),
            ]
            if options.channel:
                params.append(("channel", options.channel))
            params += [("label", f"{key}={value}") for key, value in sorted(self.labels.items())]
            if wait:
                params.append(("wait", str(wait)))
            headers = {"Accept": "application/json", **self.auth_headers()}
            if self._seen_etag is not None:
                headers["If-None-Match"] = self._seen_etag
        return ConfigRequest(
            url=self.config_url,
            params=tuple(params),
            headers=headers,
            wait=wait,
            read_timeout=wait + options.timeout,
            probe=probe,
        )

    # -- outcomes ------------------------------------------------------------------------------
    def tick(self) -> ConfigValue | None:
        """Apply the held-back value once its hold has ended; returns it when it was applied."""
        with self._lock:
            if self._pending is None:
                return None
            hold = self._seconds_until_hold_ends()
            if hold is not None and hold > 0:
                return None
            pending, self._pending = self._pending, None
            logger.info(
                "hold on %s ended: applying version %s (stage %s)",
                self._describe(),
                pending.version,
                pending.stage,
            )
            return self._apply(pending)

    def on_response(
        self,
        request: ConfigRequest,
        status: int,
        headers: Mapping[str, str],
        content: bytes,
        *,
        started: float,
    ) -> ConfigValue | None:
        """Take one answer; returns the new value in use when the version in use changed.

        Raises ConfigRequestError (4xx), ConfigUnavailableError (5xx) or ConfigResponseError
        (an answer that is not the documented JSON), after recording the failure.
        """
        try:
            now = self._wall()
            with self._lock:
                if status == 304:
                    if self._seen_etag is None:
                        raise self._failed(ConfigResponseError("304 without a prior ETag"))
                    # A poll the API held until its deadline is followed at once (min_interval); one
                    # answered at once (long-poll off, or an API that ignores `wait`) waits out
                    # poll_interval: never spin.
                    held = request.wait > 0 and self.monotonic() - started >= request.wait / 2
                    options = self.options
                    quick = held or request.probe  # a probe answered: back to long-polls at once
                    self._succeeded(
                        started, options.min_interval if quick else options.poll_interval
                    )
                    self._confirm(now)
                    return None
                if status == 200:
                    incoming = self._parse(content, headers, now)
                    self._succeeded(started, self.options.min_interval)
                    return self._receive(incoming, now)
                message = _error_message(content)
                if 400 <= status < 500:
                    raise self._failed(ConfigRequestError(status, message, url=request.url))
                if status >= 500:
                    raise self._failed(
                        ConfigUnavailableError(f"{status} from {request.url}: {message}")
                    )
                raise self._failed(
                    ConfigResponseError(f"unexpected {status} from {request.url}: {message}")
                )
        finally:
            self._tell_source_listeners()

    def on_transport_error(self, exc: Exception) -> ConfigUnavailableError:
        """Record a request that got no answer; returns the error to raise (cause: `exc`)."""
        error = ConfigUnavailableError(
            f"cannot reach the API at {self.api_url}: {type(exc).__name__}: {exc}"
        )
        error.__cause__ = exc
        with self._lock:
            self._failed(error)
        self._tell_source_listeners()
        return error

    def report_request(
        self,
        ok: int,
        failed: int,
        error: str | None,
        *,
        latency_count: int | None = None,
        latency_sum_ms: float | None = None,
    ) -> ReportRequest:
        """The POST /v1/reports body for the version in use (with its latency when given)."""
        for name, count in (("ok", ok), ("failed", failed)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"{name} must be a count (an int >= 0), not {count!r}")
        latency = latency_fields(latency_count, latency_sum_ms)
        value = self.current()
        if value is None:
            raise ConfigUnavailableError("no value in use yet: nothing to report health about")
        extra = {} if error is None else {"error": error}
        return self._report(value.version, ok=ok, failed=failed, **extra, **latency)

    def applied_request(self, version: str, error: str | None) -> ReportRequest:
        """The POST /v1/reports body saying this client applied `version` (error None) or failed
        to (the gate on applied versions counts it): no operations, so no health report."""
        if not isinstance(version, str) or not version:
            raise ValueError(f"version must be a version id, not {version!r}")
        extra: dict[str, Any] = {"applied": error is None}
        if error is not None:
            extra["apply_error"] = error[:MAX_APPLY_ERROR_LENGTH] or "apply failed"
        return self._report(version, ok=0, failed=0, **extra)

    def _report(self, version: str, *, ok: int, failed: int, **extra: Any) -> ReportRequest:
        body: dict[str, Any] = {
            "path": self.path,
            "namespace": self.options.namespace,
            "client": self.client_id,
            "version": version,
            "ok": ok,
            "failed": failed,
            # The identity it polls with: the health check counts the report for the stage whose
            # cohort this client is in, and only for that one.
            "channel": self.options.channel,
            "labels": dict(self.labels),
            **extra,
        }
        headers = {"Accept": "application/json", **self.auth_headers()}
        return ReportRequest(url=self.reports_url, json=body, headers=headers)

    def close(self) -> None:
        """Remove this client's series from the gauge."""
        self._gauge.clear()

    # -- internals (called with the lock held) -------------------------------------------------
    def _receive(self, incoming: ConfigValue, now: float) -> ConfigValue | None:
        self._seen_etag = incoming.etag
        current = self._applied
        decision = decide(current, incoming, datetime.fromtimestamp(now, UTC))
        if not decision.apply:
            if self._pending is None or self._pending.version != incoming.version:
                assert current is not None and decision.hold_until is not None
                logger.info(
                    "%s: holding version %s (stage %s) until %s against staged version %s",
                    self._describe(),
                    current.version,
                    current.stage,
                    decision.hold_until.isoformat(),
                    incoming.version,
                )
            self._pending = incoming
            return None
        self._pending = None
        return self._apply(incoming)

    def _apply(self, value: ConfigValue) -> ConfigValue | None:
        previous = self._applied
        self._applied = value
        self._gauge.set(value)
        if self._cache is not None and self._cache.save(value):
            self._cache_confirmed_at = value.confirmed_at
        if previous is not None and previous.version == value.version:
            return None
        logger.info(
            "%s: version %s in use (stage %s)", self._describe(), value.version, value.stage
        )
        return self.current()

    def _confirm(self, now: float) -> None:
        if self._pending is not None:
            self._pending = dataclasses.replace(self._pending, confirmed_at=now)
            return
        if self._applied is None:
            return
        self._applied = dataclasses.replace(self._applied, confirmed_at=now)
        if self._cache is not None and now - self._cache_confirmed_at >= _CONFIRM_WRITE_INTERVAL:
            if self._cache.save(self._applied):
                self._cache_confirmed_at = now

    def _succeeded(self, started: float, interval: float) -> None:
        if self.last_error is not None:
            logger.info("%s: the API answers again", self._describe())
        self.last_error = None
        if not self._api_ok:
            self._flipped = "api"
        self._api_ok = True
        self._backoff.reset()
        self._next_request_at = started + interval

    def _parse(self, content: bytes, headers: Mapping[str, str], now: float) -> ConfigValue:
        try:
            incoming = ConfigValue.from_body(
                json.loads(content), source="api", confirmed_at=now, etag=headers.get("etag")
            )
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise self._failed(ConfigResponseError(f"answer is not JSON: {exc}")) from exc
        except ConfigResponseError as exc:
            raise self._failed(exc) from None
        if (incoming.namespace, incoming.path) != (self.options.namespace, self.path):
            raise self._failed(
                ConfigResponseError(f"answer is for {incoming.namespace}/{incoming.path}")
            )
        return incoming

    def _failed(self, error: _E) -> _E:
        """Record a failed request (backoff, source "cache"); returns `error` for the caller."""
        first = self.last_error is None
        self.last_error = error
        if self._api_ok:
            self._flipped = "cache"
        self._api_ok = False
        delay = self._backoff.next()
        self._next_request_at = self.monotonic() + delay
        in_use = self._applied
        keeping = f"keeping version {in_use.version}" if in_use else "no value yet"
        log = logger.warning if first else logger.debug
        log("%s: %s (%s; retry in %.1fs)", self._describe(), error, keeping, delay)
        return error

    def _tell_source_listeners(self) -> None:
        # Outside the lock: a listener may read this state from another thread.
        with self._lock:
            flipped, self._flipped = self._flipped, None
            listeners = list(self._source_listeners)
        if flipped is None:
            return
        for listener in listeners:
            try:
                listener(flipped)
            except Exception:  # a bad listener must not break the poll that told it
                logger.exception("source listener %r failed", listener)

    def _seconds_until_hold_ends(self) -> float | None:
        if self._pending is None or self._applied is None or self._applied.expires_at is None:
            return None
        return self._applied.expires_at.timestamp() - self._wall()

    def _describe(self) -> str:
        return f"config {self.options.namespace}/{self.path}"


def _error_message(content: bytes) -> str:
    try:
        body = json.loads(content)
    except ValueError:
        return content[:200].decode(errors="replace").strip() or "(empty body)"
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    return json.dumps(body)[:200]


def apply_error_text(error: BaseException) -> str:
    """What an apply report says of a subscriber's exception: its type and first line."""
    first = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def latency_fields(count: int | None, sum_ms: float | None) -> dict[str, Any]:
    """A report's latency fields: none, or both (ValueError naming the one missing or wrong)."""
    if count is None and sum_ms is None:
        return {}
    if count is None or sum_ms is None:
        given, missing = (
            ("latency_sum_ms", "latency_count")
            if count is None
            else ("latency_count", "latency_sum_ms")
        )
        raise ValueError(f"{given} needs {missing}: give both or neither")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"latency_count must be a count (an int >= 0), not {count!r}")
    if (
        isinstance(sum_ms, bool)
        or not isinstance(sum_ms, (int, float))
        or not math.isfinite(sum_ms)
        or sum_ms < 0
    ):
        raise ValueError(f"latency_sum_ms must be a finite number of ms >= 0, not {sum_ms!r}")
    if count == 0 and sum_ms > 0:
        raise ValueError(f"latency_sum_ms is {sum_ms!r} with latency_count 0: nothing was timed")
    return {"latency_count": count, "latency_sum_ms": float(sum_ms)}


def report_unreachable(url: str, exc: Exception) -> ConfigUnavailableError:
    return ConfigUnavailableError(f"cannot send the report to {url}: {type(exc).__name__}: {exc}")


def report_resend_after(status: int, headers: Mapping[str, str], attempt: int) -> float | None:
    """Seconds to wait before sending a report again after answer `attempt` (1 for the first),
    or None: not a 503 with `Retry-After` in seconds, or REPORT_ATTEMPTS were made."""
    retry_after = headers.get("retry-after")
    if status != 503 or retry_after is None or attempt >= REPORT_ATTEMPTS:
        return None
    try:
        seconds = float(retry_after)
    except ValueError:  # an HTTP date: not what the API sends
        return None
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RESEND_AFTER_SECONDS)


def check_report_answer(url: str, status: int, content: bytes) -> None:
    """Raise for a refused report: ConfigUnavailableError on 5xx, ConfigRequestError on 4xx."""
    if 200 <= status < 300:
        return
    message = _error_message(content)
    if status >= 500:
        raise ConfigUnavailableError(f"{status} from {url}: {message}")
    raise ConfigRequestError(status, message, url=url)
