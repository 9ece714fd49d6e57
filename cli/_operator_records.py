"""What the operator backends answer, in either mode (cli/_backend.py, cli/_api_backend.py): the
records the commands format, so both modes print the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tempoconf.operations.errors import Refused
from tempoconf.operations.preview import RolloutPreview
from tempoconf.operations.view import StoreContext
from tempoconf.store.records import LockRecord, RolloutRecord

__all__ = ["CommandRefused", "Ending", "Prepared", "ViewUnavailable"]

# What `prepare` answers: the domain's preview, under the name the commands use.
Prepared = RolloutPreview
# The rollout refused an operator command: the message says so in the operator's words.
CommandRefused = Refused


@dataclass(frozen=True)
class Ending:
    """How a rollout ended: its result, or why it ended without one."""

    result: dict[str, Any] | None = None
    failure: str = ""


class ViewUnavailable(Exception):
    """Temporal could not tell the rollout's state (`kind` as in SnapshotUnavailable, or
    `unavailable`: the API could not reach Temporal). What the store knows comes with it: its lock
    and active-rollout rows, and (when the workflow did not answer, `no_answer`) the context."""

    def __init__(
        self,
        workflow_id: str,
        kind: str,
        detail: str,
        *,
        lock: LockRecord | None = None,
        rollout: RolloutRecord | None = None,
        context: StoreContext | None = None,
    ) -> None:
        super().__init__(detail)
        self.workflow_id = workflow_id
        self.kind = kind
        self.detail = detail
        self.lock = lock
        self.rollout = rollout
        self.context = context
