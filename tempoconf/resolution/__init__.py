"""Which version a client gets (docs/contract.md, Resolution and Leases).

Stages are cumulative and evaluated in order: a client gets the first unexpired stage it matches,
otherwise stable. A stage that names several of channel, percentile and labels needs all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from tempoconf.resolution.bucketing import in_percentile

__all__ = [
    "ClientIdentity",
    "ConfigSnapshot",
    "PublishedStage",
    "Resolution",
    "StageKind",
    "StageTarget",
    "VersionRecord",
    "resolve",
    "stage_kind",
    "stage_matches",
    "STABLE",
]

STABLE = "stable"


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who polls: held per client by the API while it long-polls, so its fields are slots."""

    client_id: str
    channel: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VersionRecord:
    version: str
    value: Any
    author: str = ""
    commit: str = ""
    message: str = ""
    created_at: datetime | None = None

    def metadata(self) -> dict[str, Any]:
        return {
            "author": self.author,
            "commit": self.commit,
            "message": self.message,
            "created_at": self.created_at.isoformat() if self.created_at else None,
        }


@dataclass(frozen=True)
class PublishedStage:
    index: int
    name: str
    channel: str | None
    percentile: float | None
    labels: Mapping[str, str]
    expires_at: datetime
    bucket_key: str | None = None
    """A changeset's key (tempoconf.rollout.changesets): its percentile buckets by it, not by the path."""


@dataclass(frozen=True)
class ConfigSnapshot:
    """A config as the distribution API serves it: stable, and the live rollout's stages."""

    namespace: str
    path: str
    stable: VersionRecord | None
    staged: VersionRecord | None = None
    stages: tuple[PublishedStage, ...] = ()

    def served_versions(self) -> frozenset[str]:
        """The versions some client can be served now: stable's and the staged one's."""
        return frozenset(record.version for record in (self.stable, self.staged) if record)


@dataclass(frozen=True)
class Resolution:
    record: VersionRecord
    stage: str
    """The stage's name, or "stable"."""
    expires_at: datetime | None
    """The lease of the stage that applies (None on stable)."""


class StageTarget(Protocol):
    """Who a stage reaches: a PublishedStage, or a PlannedStage before it is published."""

    @property
    def channel(self) -> str | None: ...

    @property
    def percentile(self) -> float | None: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


StageKind = Literal["split", "targeting"]
"""What decided that a stage's clients are in it: `split`, the client's bucket (a percentile);
`targeting`, who the client is (channel, labels) only."""


def stage_kind(stage: StageTarget | None) -> StageKind | None:
    """The kind of `stage` (None: stable, no stage applies). A percentile makes it a split even
    beside a channel or labels: among the clients they match, the bucket still decides."""
    if stage is None:
        return None
    return "split" if stage.percentile is not None else "targeting"


def stage_matches(stage: StageTarget, path: str, client: ClientIdentity) -> bool:
    # A changeset's stage buckets by the changeset's key, so its configs share every cohort.
    path = getattr(stage, "bucket_key", None) or path
    if stage.channel is not None and client.channel != stage.channel:
        return False
    if stage.labels and any(client.labels.get(key) != value for key, value in stage.labels.items()):
        return False
    if stage.percentile is not None and not in_percentile(path, client.client_id, stage.percentile):
        return False
    return True


def resolve(snapshot: ConfigSnapshot, client: ClientIdentity, now: datetime) -> Resolution | None:
    """The version this client gets now; None when the config has no stable and no stage applies."""
    if snapshot.staged is not None:
        for stage in sorted(snapshot.stages, key=lambda s: s.index):
            if stage.expires_at > now and stage_matches(stage, snapshot.path, client):
                return Resolution(snapshot.staged, stage.name, stage.expires_at)
    if snapshot.stable is None:
        return None
    return Resolution(snapshot.stable, STABLE, None)
