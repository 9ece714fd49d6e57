"""The reference model of tests/fuzz/test_model.py: what a rollout does with each operator command,
and what every client of a config must be served, from the commands sent so far alone.

Pure (no I/O, no clock of its own) and small on purpose: it re-derives the contract
(docs/explanation/resolution.md; docs/contract.md: the `reports` check, the commands) instead of
calling the code under test. The one thing it reuses is the published bucketing formula
(`tempoconf.resolution.bucketing`), which is the contract itself.

Every rollout the model starts holds each stage for an hour and checks `reports` only at the end
of the hold, so nothing moves unless the model says so: `advance` ends a hold, `approve` lets a
manual stage go on, `resume` lets a paused one go on.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any

from tempoconf.resolution.bucketing import bucket, in_percentile

__all__ = [
    "COMMANDS",
    "HEALTH_CHECK",
    "LEASE_SECONDS",
    "MAX_ERROR_RATIO",
    "NAMESPACES",
    "ROLES",
    "STAGES",
    "ConfigModel",
    "Identity",
    "Phase",
    "Principal",
    "Report",
    "RolloutModel",
    "Served",
    "StageSpec",
    "changeset_workflow_id",
    "identities_for",
]

LEASE_SECONDS = 8.0
"""Every stage's lease: renewed every 4 s while a rollout runs; a terminated one lapses within 8 s."""
MAX_ERROR_RATIO = Fraction(1, 2)
HEALTH_CHECK: dict[str, Any] = {
    "kind": "reports",
    "max_error_ratio": float(MAX_ERROR_RATIO),
    "min_clients": 1,
    "on_no_data": "pass",
    "window": "1h",
}
"""Judged at the end of each hold only (no `interval`): the model decides when that is."""
COMMANDS = ("halt", "bypass", "advance", "pause", "resume", "approve")
OUTCOME_ACTIONS = frozenset(
    {
        "rollout.promoted",
        "rollout.bypassed",
        "rollout.reverted",
        "rollout.halted",
        "rollout.cancelled",
    }
)
"""Audit actions that end a rollout's trail (a bypass is recorded as `rollout.promoted`)."""

NAMESPACES = ("default", "team-b")
"""Two teams' namespaces: a config in each, and a changeset across both."""
ROLES = ("viewer", "operator", "approver", "admin")


@dataclass(frozen=True)
class Principal:
    """Who sends a step: a token of the access policy holding `role` in `namespace` (`*`: in
    every namespace)."""

    name: str
    namespace: str
    role: str

    def may(self, step: str, namespaces: tuple[str, ...]) -> bool:
        """docs/contract.md, Access: approving is the approver's, every other command and a
        start the operator's; admin holds every role; the role is needed in every namespace
        the rollout touches (the object decides the namespace)."""
        needed = "approver" if step == "approve" else "operator"
        holds = self.role in (needed, "admin")
        return holds and all(self.namespace in ("*", namespace) for namespace in namespaces)


def changeset_workflow_id(configs: list[tuple[str, str]]) -> str:
    """docs/contract.md, Changesets: `changeset:` and the first 16 hex characters of the SHA-256
    of the configs as `namespace/path` lines, sorted, joined by a newline."""
    lines = "\n".join(sorted(f"{namespace}/{path}" for namespace, path in configs))
    return "changeset:" + hashlib.sha256(lines.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class StageSpec:
    name: str
    channel: str | None = None
    percentile: float | None = None
    labels: tuple[tuple[str, str], ...] = ()
    manual: bool = False

    def request(self) -> dict[str, Any]:
        stage: dict[str, Any] = {"name": self.name}
        if self.channel is not None:
            stage["channel"] = self.channel
        if self.percentile is not None:
            stage["percentile"] = self.percentile
        if self.labels:
            stage["labels"] = dict(self.labels)
        if self.manual:
            stage["manual"] = True
        return stage

    def matches(self, path: str, client: Identity) -> bool:
        """docs/explanation/resolution.md, Resolution: a client must match everything the stage names."""
        if self.channel is not None and client.channel != self.channel:
            return False
        if any(dict(client.labels).get(key) != value for key, value in self.labels):
            return False
        return self.percentile is None or in_percentile(path, client.client, self.percentile)


STAGES: tuple[StageSpec, ...] = (
    StageSpec("canary", channel="canary"),
    StageSpec("nobody", percentile=0),
    StageSpec("p10", percentile=10),
    StageSpec("p50", percentile=50),
    StageSpec("everyone", percentile=100),
    StageSpec("eu", labels=(("region", "eu"),)),
    StageSpec("canary-half", channel="canary", percentile=50),
)
"""The stages a drawn rollout picks from (each at most once, in any order, manual or not)."""


@dataclass(frozen=True)
class Identity:
    client: str
    channel: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def query(self) -> list[tuple[str, str | int | float | bool | None]]:
        """The poll's query parameters (docs/contract.md, Distribution API)."""
        params: list[tuple[str, str | int | float | bool | None]] = [("client", self.client)]
        if self.channel is not None:
            params.append(("channel", self.channel))
        params.extend(("label", f"{key}={value}") for key, value in self.labels)
        return params

    def __str__(self) -> str:
        labels = ",".join(f"{k}={v}" for k, v in self.labels)
        return f"{self.client}[{self.channel or '-'}|{labels or '-'}]"


def identities_for(path: str) -> tuple[Identity, ...]:
    """A sample of the fleet that every stage of STAGES slices differently: each channel (none,
    canary) × labels (none, region=eu) × bucket band (in 10 %, in 50 % only, outside 50 %)."""
    bands = ((0, 1000), (1000, 5000), (5000, 10000))
    taken: set[str] = set()
    sample = []
    for channel, labels, (low, high) in itertools.product(
        (None, "canary"), ((), (("region", "eu"),)), bands
    ):
        client = next(
            name
            for name in (f"host-{number}" for number in itertools.count())
            if name not in taken and low <= bucket(path, name) < high
        )
        taken.add(client)
        sample.append(Identity(client, channel, labels))
    return tuple(sample)


class Phase(StrEnum):
    """Where a running rollout is at its current stage (the workflow's `state` in brackets)."""

    HOLDING = "holding"
    """The hour's hold runs (`holding`)."""
    SETTLING = "checking_health"
    """The hold ended and the checks passed, but a pause keeps it at this stage (`checking_health`)."""
    AWAITING = "awaiting_approval"
    """A manual stage passed its hold and checks (`awaiting_approval`)."""


@dataclass(frozen=True)
class Report:
    identity: Identity
    version: str
    ok: int
    failed: int
    stage: int
    """The stage the rollout was at when the report was sent (it counts for that stage only)."""


@dataclass(frozen=True)
class Served:
    """What a poll answers: a version and the stage it is served at, or None for 404."""

    version: str
    stage: str

    def __str__(self) -> str:
        return f"{self.version}@{self.stage}"


@dataclass
class RolloutModel:
    workflow_id: str
    version: str
    stages: tuple[StageSpec, ...]
    published: int = 1
    """Stages 1..published are live (widening never drops the canaries)."""
    phase: Phase = Phase.HOLDING
    paused: bool = False
    approved: bool = False
    reports: list[Report] = field(default_factory=list)

    @property
    def stage(self) -> int:
        return self.published - 1

    def live(self) -> tuple[StageSpec, ...]:
        return self.stages[: self.published]

    def refusal(self, command: str) -> bool:
        """Whether the workflow refuses this update (tempoconf.rollout.run_state.refusal, as the contract
        states it): only the commands that would change nothing are refused."""
        if command == "advance":
            return self.phase is not Phase.HOLDING
        if command == "resume":
            return not self.paused
        if command == "approve":
            return self.phase is not Phase.AWAITING or self.approved
        return False  # halt, bypass, pause: always taken while the rollout runs

    def unhealthy(self, path: str) -> bool:
        """The end-of-hold `reports` check of the current stage: the reports received since it was
        published, on this version, from the cohort of stages 1..k; none is no data (passes)."""
        evidence = [
            report
            for report in self.reports
            if report.stage == self.stage
            and report.version == self.version
            and any(stage.matches(path, report.identity) for stage in self.live())
        ]
        total = sum(report.ok + report.failed for report in evidence)
        if total == 0:
            return False
        return Fraction(sum(report.failed for report in evidence), total) > MAX_ERROR_RATIO

    def serves(self, path: str, client: Identity) -> Served | None:
        for stage in self.live():
            if stage.matches(path, client):
                return Served(self.version, stage.name)


@dataclass
class Lapsing:
    """A terminated rollout's stages: nobody renews their leases any more."""

    rollout: RolloutModel
    live_until: dict[int, float]
    """Stage index → the lease the workflow last renewed (read just before the terminate): the
    API serves the stage at least until then."""
    gone_by: float
    """The terminate's time + one lease: the API serves none of it after that."""


@dataclass
class Ended:
    """A rollout that ended, for the audit check."""

    workflow_id: str
    version: str
    outcome: str
    """The workflow's outcome (`terminated`: it has none)."""
    action: str | None
    """The outcome entry its trail must end with; None: a terminated rollout (see test_model)."""
    reason_prefix: str
    published: int
    checked: bool = False


@dataclass
class ConfigModel:
    path: str
    identities: tuple[Identity, ...]
    namespace: str = NAMESPACES[0]
    others: tuple[tuple[str, str], ...] = ()
    """A changeset's other configs (namespace, path): its rollouts change them all at once."""
    stable: str | None = None
    running: RolloutModel | None = None
    lapsing: Lapsing | None = None
    reclaim_from: str | None = None
    """The terminated rollout whose lock the next start must reclaim (its workflow id)."""
    retiring: list[str] = field(default_factory=list)
    """Versions the last step took away from every client (reverted, halted, replaced as stable,
    a terminated rollout's replaced by the next start)."""
    retired: set[str] = field(default_factory=set)
    """Versions every client has seen taken away: no poll may ever answer one again."""
    ended: list[Ended] = field(default_factory=list)
    rollouts: int = 0

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.namespace, *(ns for ns, _ in self.others)]))

    def allowed(self, client: Identity, sent: float, received: float) -> set[Served | None]:
        """Every answer the API may give `client` to a poll sent and answered at these wall-clock
        times: one, unless a terminated rollout's lease may or may not have lapsed meanwhile."""
        stable = None if self.stable is None else Served(self.stable, "stable")
        if self.running is not None:
            served = self.running.serves(self.path, client)
            return {served if served is not None else stable}
        if self.lapsing is not None:
            answers: set[Served | None] = set()
            lapsing = self.lapsing
            for index, stage in enumerate(lapsing.rollout.live()):
                if not stage.matches(self.path, client) or sent > lapsing.gone_by:
                    continue
                answers.add(Served(lapsing.rollout.version, stage.name))
                if received < lapsing.live_until.get(index, 0.0):
                    return answers  # surely still live: nothing after it applies
            answers.add(stable)
            return answers
        return {stable}

    # -- what each step does to the model -------------------------------------------------------
    def end(self, outcome: str, action: str | None, reason_prefix: str) -> RolloutModel:
        """The running rollout ends: `action` is the audit entry its trail must end with."""
        rollout = self.running
        assert rollout is not None
        self.running = None
        if outcome in ("promoted", "bypassed"):
            if self.stable is not None:
                self.retiring.append(self.stable)
            self.stable = rollout.version
        else:
            self.retiring.append(rollout.version)
        self.ended.append(
            Ended(
                rollout.workflow_id,
                rollout.version,
                outcome,
                action,
                reason_prefix,
                rollout.published,
            )
        )
        return rollout

    def next_stage(self) -> None:
        """The current stage passed: publish the next one, or promote after the last."""
        rollout = self.running
        assert rollout is not None
        if rollout.published == len(rollout.stages):
            self.end("promoted", "rollout.promoted", "every stage passed")
            return
        rollout.published += 1
        rollout.phase = Phase.HOLDING
        rollout.approved = False

    def retire(self, checked_from: float) -> None:
        """Every client was served what the model says from `checked_from` on: what the step took
        away is gone for good, and so is a terminated rollout whose leases had all run out."""
        self.retired.update(self.retiring)
        self.retiring.clear()
        if self.lapsing is not None and self.lapsing.gone_by < checked_from:
            self.retired.add(self.lapsing.rollout.version)

    def command(self, name: str) -> None:
        """Apply a command the rollout accepted."""
        rollout = self.running
        assert rollout is not None and not rollout.refusal(name)
        if name == "halt":
            self.end("halted", "rollout.halted", "")
        elif name == "bypass":
            self.end("bypassed", "rollout.promoted", "bypassed:")
        elif name == "pause":
            rollout.paused = True
        elif name == "resume":
            rollout.paused = False
            if rollout.phase is Phase.SETTLING or (
                rollout.phase is Phase.AWAITING and rollout.approved
            ):
                self.next_stage()
        elif name == "approve":
            rollout.approved = True
            if not rollout.paused:
                self.next_stage()
        elif name == "advance":
            if rollout.unhealthy(self.path):
                unhealthy = f"stage {rollout.stages[rollout.stage].name} is unhealthy"
                self.end("reverted", "rollout.reverted", unhealthy)
            elif rollout.stages[rollout.stage].manual:
                rollout.phase = Phase.AWAITING
            elif rollout.paused:
                rollout.phase = Phase.SETTLING
            else:
                self.next_stage()
