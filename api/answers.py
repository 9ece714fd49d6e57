"""The JSON the API answers, as models: the routes build their answers from these, and
`/openapi.json` documents each answer with its model's JSON Schema (serialization mode).

Timestamps are ISO 8601 strings made by the routes (`datetime.isoformat()`, as they always were).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, with_config

from tempoconf.gates.freezes import Freeze
from tempoconf.resolution import StageKind
from tempoconf.rollout.progress import CommandResult

__all__ = [
    "Accepted",
    "AccessPolicyAnswer",
    "AuditEntryAnswer",
    "BundleAnswer",
    "BundleStageAnswer",
    "BundleVersionAnswer",
    "ChangedConfigAnswer",
    "ChangesAnswer",
    "ClientsAnswer",
    "CommandAnswer",
    "ConfigAnswer",
    "ConfigMetadata",
    "ErrorAnswer",
    "FreezeAnswer",
    "HealthAnswer",
    "HistoryAnswer",
    "LockAnswer",
    "PlanContextAnswer",
    "ProblemAnswer",
    "ReadinessAnswer",
    "RolloutContextAnswer",
    "RolloutAnswer",
    "RolloutStarted",
    "RolloutStateAnswer",
    "SchemaAnswer",
    "SeenClientAnswer",
    "ServedConfigAnswer",
    "ServedLockAnswer",
    "ServedStateAnswer",
    "StableAnswer",
    "Timestamp",
    "VersionAnswer",
    "VersionsAnswer",
    "WorkflowAnswer",
]

Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""An ISO 8601 date-time with its UTC offset."""


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    def body(self) -> dict[str, Any]:
        """The answer as JSON-ready data."""
        return self.model_dump(mode="json", by_alias=True)


class ProblemAnswer(_Answer):
    pointer: str
    """JSON pointer into the input."""
    message: str


class ErrorAnswer(_Answer):
    """Every error the API answers."""

    error: str
    """What is wrong, and where."""
    problems: list[ProblemAnswer] = Field(default_factory=list)
    """Every reason an input was refused (absent when there is only `error`)."""


class ConfigMetadata(_Answer):
    author: str
    commit: str
    message: str
    created_at: Timestamp | None


class ConfigAnswer(_Answer):
    """The version a client resolves to."""

    namespace: str
    path: str
    version: str
    stage: str
    """`stable` when no stage applies."""
    stage_kind: StageKind | None
    """Why the stage applies: `split`, it has a percentile (the client's bucket decided);
    `targeting`, it matched by channel or labels only; null on stable."""
    value: Any
    """The config value (any JSON)."""
    expires_at: Timestamp | None
    """The lease of the stage that applies; null on stable."""
    metadata: ConfigMetadata


class ConfigsAnswer(_Answer):
    """Several configs for one client, resolved against one snapshot (`GET /v1/configs`)."""

    configs: list[ConfigAnswer]
    """In the order of the `path` parameters."""


class BundleVersionAnswer(_Answer):
    """A version in a bundle: its value and metadata."""

    version: str
    value: Any
    """The config value (any JSON)."""
    author: str
    commit: str
    message: str
    created_at: Timestamp | None


class BundleStageAnswer(_Answer):
    """A published stage of the live rollout: who it reaches and until when."""

    index: int
    """Evaluation order: a client gets the first unexpired stage it matches."""
    name: str
    channel: str | None
    percentile: float | None
    """The client's bucket (docs/contract.md, Bucketing) must be below this; null: no split."""
    labels: dict[str, str]
    """Every one must match the client's label of that key."""
    expires_at: Timestamp
    """The stage's lease: past it (by the reader's clock) the stage no longer applies."""
    bucket_key: str | None
    """What the percentile buckets by instead of the path (a changeset's key); null: the path."""


class BundleAnswer(_Answer):
    """Everything a client needs to resolve the config itself (`GET /v1/bundles/{path}`), the
    same for every client (tempoconf.resolution.bundles)."""

    namespace: str
    path: str
    stable: BundleVersionAnswer | None
    staged: BundleVersionAnswer | None
    """The version the live rollout stages; null when none is live."""
    stages: list[BundleStageAnswer]
    """The stages published so far, in evaluation order (by index)."""


class ChangedConfigAnswer(_Answer):
    namespace: str
    path: str


class ChangesAnswer(_Answer):
    """The configs changed after a revision (`GET /v1/changes`): what an edge relay follows."""

    revision: int
    """The revision held now: `since` of the next call."""
    changes: list[ChangedConfigAnswer] | None = None
    """The configs changed after `since`, in the namespaces this caller reads (empty when the
    wait ended without any); absent on a reset."""
    reset: bool
    """True when `since` is missing, older than this process remembers, or newer than the
    revision it holds (another database, another replica): refetch every config served."""

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class Accepted(_Answer):
    accepted: Literal[True] = True


class HealthAnswer(_Answer):
    """Liveness: the process serves (always 200 when it answers at all)."""

    status: Literal["ok"]
    revision: int | None = None
    """The store revision of the snapshots served (absent before the first load)."""


class AccessPolicyAnswer(_Answer):
    """The access policy in force (under `TEMPOCONF_ACCESS_FILE` only)."""

    status: Literal["current", "stale"]
    """`stale`: the file's latest content does not load, and an older policy is in force."""
    loaded_at: str
    """When the policy in force was read from the file (ISO 8601)."""
    failing_since: str | None = None
    """When the file first failed to load since then (stale only)."""
    failed_reloads: int
    """Reloads that failed since the process started."""
    error: str | None = None
    """Why the file's latest content does not load: each problem's place in the file, without
    the file's values (the log has them whole)."""


class ReadinessAnswer(_Answer):
    """Readiness: this instance can serve polls, from snapshots of a known age."""

    status: Literal["ready", "unavailable"]
    revision: int | None = None
    """The store revision of the snapshots served (absent before the first load)."""
    snapshot_age_seconds: float | None = None
    """Seconds since the snapshots served were last known to be the store's current ones."""
    store: Literal["ok", "unreachable"] | None = None
    """Whether the last check of the store succeeded (absent before the first load)."""
    error: str | None = None
    """Why the store cannot be read, or why the instance is not ready."""
    access_policy: AccessPolicyAnswer | None = None
    """The access policy in force, and whether the file's latest content is (with a policy)."""


class SchemaAnswer(_Answer):
    namespace: str
    path: str
    schema_: Any = Field(alias="schema")
    """A JSON Schema (draft 2020-12)."""


class VersionAnswer(_Answer):
    version: str
    author: str
    commit: str
    message: str
    created_at: Timestamp
    is_stable: bool
    stable_since: list[Timestamp]
    """Every time this version became stable, oldest first."""


class VersionsAnswer(_Answer):
    namespace: str
    path: str
    stable: str | None
    versions: list[VersionAnswer]
    """Newest first."""


class AuditEntryAnswer(_Answer):
    id: int
    at: Timestamp
    actor: str
    action: str
    reason: str
    version: str | None
    workflow_id: str | None
    details: dict[str, Any]


class HistoryAnswer(_Answer):
    namespace: str
    path: str
    entries: list[AuditEntryAnswer]
    """Oldest first."""


class SeenClientAnswer(_Answer):
    client: str
    channel: str | None
    """null for a client without one, or known only from reports that named none."""
    labels: dict[str, str]
    last_seen: Timestamp
    last_version: str | None
    """The version it was last served, or last reported on."""
    applied_version: str | None = None
    """The version it last reported applied (null: none reported)."""
    applied_at: Timestamp | None = None
    apply_error: str | None = None
    """The error of its last failed apply, when that came after its last success."""
    apply_error_version: str | None = None


class ClientsAnswer(_Answer):
    namespace: str
    path: str
    since: Timestamp
    clients: list[SeenClientAnswer]
    """Each client once, sorted by client id."""


class RolloutStarted(_Answer):
    namespace: str
    path: str
    version: str
    stages: list[str]
    """The stages' names, in order."""
    workflow_id: str
    run_id: str | None


class RolloutAnswer(_Answer):
    """The store's active-rollout row."""

    namespace: str
    path: str
    workflow_id: str
    run_id: str
    version: str
    state: str
    stage_index: int
    """Index of the highest published stage; -1 before the first."""
    started_at: Timestamp
    updated_at: Timestamp


class LockAnswer(_Answer):
    """Who holds the config's rollout lock."""

    namespace: str
    path: str
    workflow_id: str
    run_id: str
    version: str
    acquired_at: Timestamp


class FreezeAnswer(_Answer):
    """A freeze of a namespace (`GET /v1/admin/freezes`)."""

    id: int
    namespace: str
    reason: str
    by: str
    started_at: Timestamp
    until: Timestamp | None
    """When it ends by itself; null: when it is ended."""
    ended_at: Timestamp | None
    """When it was ended early; null: it was not."""
    ended_by: str | None
    end_reason: str
    active: bool

    @classmethod
    def of(cls, freeze: Freeze, now: datetime) -> FreezeAnswer:
        return cls.model_validate({**freeze.to_json(), "active": freeze.active(now)})


class ServedLockAnswer(_Answer):
    """Who holds a config's rollout lock: a running rollout."""

    workflow_id: str
    run_id: str
    version: str
    """The version the rollout rolls out."""
    acquired_at: Timestamp


class ServedConfigAnswer(_Answer):
    """A config the store knows (a version, a stable version, a schema or a lock)."""

    namespace: str
    path: str
    stable_version: str | None
    """The stable version's id; null when it has none."""
    schema_digest: str | None
    """The version id of its JSON Schema (the hash a value's version id is: the first 16 hex
    characters of the SHA-256 of its canonical JSON); null without a schema."""
    lock: ServedLockAnswer | None
    """Who holds its rollout lock; null when it is free."""


class ServedStateAnswer(_Answer):
    """What is served in some namespaces, read at once (`GET /v1/admin/configs`): what configs as
    code compare a directory of configs with."""

    configs: list[ServedConfigAnswer]
    """Every config the store knows in the namespaces asked, by namespace and path."""
    freezes: list[FreezeAnswer]
    """The active freezes of the namespaces asked, by namespace."""


class WorkflowAnswer(_Answer):
    """What Temporal says of the workflow."""

    workflow_id: str
    run_id: str | None = None
    execution_status: str | None = None
    status: dict[str, Any] | None = None
    """The workflow's `status` query (its RolloutProgress); null for an ended run no worker
    could replay (`outcome` still tells the end)."""
    outcome: str | None = None
    """Once the run ended: the result's outcome, or `failed`, `cancelled`, `terminated`,
    `timed_out` when it ended without a result."""
    result: dict[str, Any] | None = None
    """The rollout's result (`outcome`, `version`, `reason`, `stable_version`) once it ended with
    one, whatever `execution_status`: COMPLETED when promoted or bypassed, FAILED when reverted
    or halted (the result is the failure's details), CANCELED when cancelled (its memo)."""
    reason: str = ""
    """Why it ended (the result's reason, or the failure's message)."""
    starter: str = ""
    """The identity that started the run (e.g. `tempoconf:alice@laptop`)."""
    error: str | None = None
    """Why Temporal could not tell."""
    error_kind: Literal["not_found", "no_answer", "rpc", "query_failed", "unavailable"] | None = (
        None
    )
    """What kind of failure `error` is: no such workflow, no worker answered in time, another
    Temporal error, the query failed, Temporal unreachable."""
    error_detail: str | None = None
    """The underlying error's own message."""


class RolloutContextAnswer(_Answer):
    """What the store adds to a rollout's state: who started the run and why, the version's
    metadata, the config's stable version."""

    started_by: str
    started_at: Timestamp | None
    start_reason: str
    author: str
    commit: str
    message: str
    stable: str | None


class RolloutStateAnswer(_Answer):
    namespace: str
    path: str
    rollout: RolloutAnswer | None
    lock: LockAnswer | None
    workflow: WorkflowAnswer
    context: RolloutContextAnswer | None = None
    """Null when Temporal could not tell (`workflow.error`)."""


class StableAnswer(_Answer):
    """A config's stable version, with its value."""

    namespace: str
    path: str
    version: str
    value: Any
    author: str
    commit: str
    message: str
    created_at: Timestamp | None


class ChangeAnswer(_Answer):
    """One config of a changeset, as its plan says it."""

    namespace: str
    path: str
    version: str
    stable_version: str | None
    change: str
    value: Any = None
    """The value it rolls out."""
    stable_value: Any = None
    """Its stable version's value (null also when it has none: see `stable_version`)."""
    version_exists: bool = False
    """The version is stored already (reused, or a rollback's)."""


class PlanContextAnswer(_Answer):
    """What a valid rollout request would do, with nothing started (`tempoconf rollout plan`)."""

    namespace: str
    path: str
    version: str
    """The version it rolls out (a rollback's, or the new value's id)."""
    rollback: bool
    version_exists: bool
    """The version is stored already (reused, or the rollback's)."""
    value: Any
    """The value it rolls out."""
    stable: StableAnswer | None
    lock: LockAnswer | None
    """Who holds the config's rollout lock (a running rollout refuses another)."""
    change: str
    """The change against stable, as the workflow's summary says it."""
    changes: list[ChangeAnswer] = Field(default_factory=list)
    """A changeset's configs, each with its version and change (empty for one config; the
    fields above are then its first config's)."""
    digest: str
    """The plan's digest (`sha256:` + 32 hex): what an `approve` of this rollout names."""


@with_config(ConfigDict(use_attribute_docstrings=True))
@dataclass(kw_only=True)
class CommandAnswer(CommandResult):
    """The workflow's short answer to an operator command, once it took effect (or after 10 s,
    then `message` starts with `requested:`). The full progress is `GET /v1/admin/rollouts/{path}`."""

    workflow_id: str
    """The rollout's workflow."""
