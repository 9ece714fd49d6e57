"""What the client hands out (`ConfigValue`) and the errors it raises."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "STABLE",
    "STAGE_KINDS",
    "ConfigClientError",
    "ConfigRequestError",
    "ConfigResponseError",
    "ConfigUnavailableError",
    "ConfigValue",
    "Source",
    "StageKind",
]

STABLE = "stable"
"""The `stage` of a value that no stage of a rollout applies to."""

Source = Literal["api", "cache"]

StageKind = Literal["split", "targeting"]
"""What put the client in its stage: `split`, a percentile (its bucket); `targeting`, its channel
or labels only."""
STAGE_KINDS: tuple[StageKind, ...] = ("split", "targeting")


class ConfigClientError(Exception):
    """Base of every error `tempoconf.client` raises."""


class ConfigUnavailableError(ConfigClientError):
    """The API cannot be reached (or answers 5xx) and no last good value is known.

    The transport error, if any, is in `__cause__`.
    """


class ConfigRequestError(ConfigClientError):
    """The API refused the request (4xx): unknown config (404), bad input (400), missing or
    wrong client token (401). Serving a cached value would hide the mistake, so it is raised."""

    def __init__(self, status: int, message: str, *, url: str) -> None:
        self.status = status
        self.message = message
        self.url = url
        super().__init__(f"{status} from {url}: {message}")


class ConfigResponseError(ConfigClientError):
    """The API answered something this client cannot read (not the documented JSON)."""


@dataclass(frozen=True)
class ConfigValue:
    """A config value as this client applies it.

    `source` is "api" when the API confirmed it on the last request, "cache" when it comes from
    the last good value (on disk, or in memory while the API is unreachable). `age_seconds` is
    the time since the API last confirmed it; it keeps growing while the API is unreachable.
    """

    namespace: str
    path: str
    version: str
    stage: str
    value: Any
    expires_at: datetime | None
    """The lease of the stage that applies (None on stable)."""
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """`author`, `commit`, `message`, `created_at` of the version."""
    stage_kind: StageKind | None = None
    """`split` or `targeting` as the API says it; None on stable, and when the answer has no
    `stage_kind` (an API older than the field, or a cache file written from one)."""
    source: Source = "api"
    confirmed_at: float = 0.0
    """Unix time at which the API last served or confirmed this value."""
    etag: str | None = field(default=None, repr=False)

    @property
    def age_seconds(self) -> float:
        """Seconds since the API last confirmed this value (grows while it is unreachable)."""
        return max(0.0, time.time() - self.confirmed_at)

    @property
    def is_staged(self) -> bool:
        """True when a stage of a rollout applies (not stable)."""
        return self.stage != STABLE

    def body(self) -> dict[str, Any]:
        """The API's JSON shape of this value (what the disk cache stores)."""
        return {
            "namespace": self.namespace,
            "path": self.path,
            "version": self.version,
            "stage": self.stage,
            "stage_kind": self.stage_kind,
            "value": self.value,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_body(
        cls,
        body: Any,
        *,
        source: Source,
        confirmed_at: float,
        etag: str | None,
    ) -> ConfigValue:
        """Read the API's JSON answer; raises ConfigResponseError naming what is wrong."""
        if not isinstance(body, Mapping):
            raise ConfigResponseError(f"expected a JSON object, got {type(body).__name__}")
        for name in ("namespace", "path", "version", "stage"):
            if not isinstance(body.get(name), str) or not body[name]:
                raise ConfigResponseError(f"field {name!r} is missing or not a non-empty string")
        if "value" not in body:
            raise ConfigResponseError("field 'value' is missing")
        stage_kind = body.get("stage_kind")
        if stage_kind is not None and not isinstance(stage_kind, str):
            raise ConfigResponseError(f"field 'stage_kind' is not a string or null: {stage_kind!r}")
        if stage_kind not in STAGE_KINDS:
            stage_kind = None  # a kind newer than this client: read as an answer without one
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise ConfigResponseError("field 'metadata' is not an object")
        return cls(
            namespace=body["namespace"],
            path=body["path"],
            version=body["version"],
            stage=body["stage"],
            value=body["value"],
            expires_at=_parse_time(body.get("expires_at")),
            metadata=MappingProxyType(dict(metadata)),
            stage_kind=stage_kind,
            source=source,
            confirmed_at=confirmed_at,
            etag=etag,
        )


def _parse_time(raw: Any) -> datetime | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ConfigResponseError(f"field 'expires_at' is not a string: {raw!r}")
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigResponseError(f"field 'expires_at' is not an ISO 8601 time: {raw!r}") from exc
    # A naive time would compare wrongly with the client's clock: the API speaks UTC.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
