"""The operator commands that steer a running rollout, listed once.

halt, bypass, advance, pause, resume and approve: each is a signal and an update of the
`ConfigRollout` workflow of the same name, a route of the API (`POST
/v1/admin/rollouts/{path}:{name}`, see `command_path`) and a `tempoconf rollout NAME` command.
The workflow's handlers, the API's routes and document and the CLI's parser all read this
registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, with_config
from pydantic.json_schema import SkipJsonSchema

from tempoconf.rollout.signatures import (
    MAX_EMAIL_CHARS,
    MAX_EMAILS,
    MAX_NONCE_CHARS,
    MAX_RUN_CHARS,
    MAX_SIGNATURE_CHARS,
    MAX_SIGNED_AT_CHARS,
)
from tempoconf.storable import STORABLE

__all__ = [
    "COMMANDS",
    "COMMAND_NAMES",
    "AnswerWhen",
    "CommandName",
    "CommandSpec",
    "OperatorCommand",
    "OPERATOR_COMMANDS",
    "command_path",
]


class CommandName(StrEnum):
    HALT = "halt"
    BYPASS = "bypass"
    ADVANCE = "advance"
    PAUSE = "pause"
    RESUME = "resume"
    APPROVE = "approve"


class AnswerWhen(StrEnum):
    """When an update answers (at the latest after a bounded wait, with a `requested:` message)."""

    ENDED = "ended"
    """Once the rollout has ended: every live stage reverted, or the version promoted."""
    SETTLED = "settled"
    """Once the rollout acted on it and waits for something the command did not give it."""
    AT_ONCE = "at_once"
    """At once: the command is in effect as soon as it is recorded."""


@dataclass(frozen=True)
class CommandSpec:
    name: CommandName
    help: str
    """What it does, for `tempoconf rollout --help` (lower case, no final period)."""
    answer_when: AnswerWhen
    takes_reason: bool = True
    """The command accepts a reason, recorded in the rollout's history."""
    signal: bool = True
    """Also a signal (fire and forget: never refused, a no-op is noted in the history)."""
    update: bool = True
    """An update: refused by its validator before anything is recorded, else answered."""
    takes_digest: bool = False
    """The command names the plan it acts on (`digest`, `--digest`; tempoconf.rollout.approvals)."""
    signed: bool = False
    """A rollout whose plan has an `approval_key` takes it only with the API's signature
    (tempoconf.rollout.signatures). Never halt: the way back is always open."""

    @property
    def summary(self) -> str:
        """`help` as a sentence, for the API's document."""
        return self.help[:1].upper() + self.help[1:] + "."


OPERATOR_COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec(
        CommandName.HALT, "revert every client to stable and end the rollout", AnswerWhen.ENDED
    ),
    CommandSpec(
        CommandName.BYPASS,
        "skip every remaining hold, check and approval and promote now",
        AnswerWhen.ENDED,
    ),
    CommandSpec(CommandName.ADVANCE, "end the current hold now", AnswerWhen.SETTLED),
    CommandSpec(
        CommandName.PAUSE, "hold the rollout where it is until `resume`", AnswerWhen.AT_ONCE
    ),
    CommandSpec(CommandName.RESUME, "clear the pause", AnswerWhen.SETTLED),
    CommandSpec(
        CommandName.APPROVE,
        "let a manual stage advance",
        AnswerWhen.SETTLED,
        takes_digest=True,
        signed=True,
    ),
)
COMMANDS: Mapping[str, CommandSpec] = {spec.name.value: spec for spec in OPERATOR_COMMANDS}
COMMAND_NAMES: tuple[str, ...] = tuple(spec.name.value for spec in OPERATOR_COMMANDS)


@with_config(ConfigDict(extra="forbid"))
@dataclass
class OperatorCommand:
    """The argument of every command (signal, update, API body): why, and who (both optional);
    for `approve`, also which plan (`digest`).

    A plain dataclass, so Temporal's default converter carries it; pydantic validates it as the
    API's request body (`TypeAdapter(OperatorCommand)`), with the limits declared here.
    """

    reason: Annotated[str, Field(max_length=2000, strict=True), STORABLE] = ""
    by: Annotated[str, Field(max_length=200, strict=True), STORABLE] = ""
    digest: Annotated[str, Field(max_length=100, strict=True), STORABLE] = ""
    """approve only: the digest of the plan the approver reviewed (tempoconf.rollout.digest); it must be
    the running rollout's. Required by a stage with `approvals`; the other commands ignore it
    (a halt is never refused for a stale digest)."""
    # Not in the API's document (SkipJsonSchema): the API sets both, and refuses a body's.
    signature: Annotated[
        SkipJsonSchema[str], Field(max_length=MAX_SIGNATURE_CHARS, strict=True), STORABLE
    ] = ""
    """approve only: the API's Ed25519 signature (base64) over who, the emails below, which
    workflow and run, which stage, which command, which digest, the nonce and `signed_at`
    (tempoconf.rollout.signatures; a run started before, over who, the workflow, the command, the
    digest and `signed_at`); the admin API sets it, a rollout whose plan has an `approval_key`
    requires it."""
    signed_at: Annotated[
        SkipJsonSchema[str], Field(max_length=MAX_SIGNED_AT_CHARS, strict=True), STORABLE
    ] = ""
    """When the API signed it (ISO 8601): a signature counts for 10 minutes."""
    # What a bound signature names besides (tempoconf.rollout.signatures.bound_message): the API
    # sets them, for a run whose status names an `approval_run`.
    rollout_run: Annotated[
        SkipJsonSchema[str], Field(max_length=MAX_RUN_CHARS, strict=True), STORABLE
    ] = ""
    """approve only: the rollout's run the approval was given for (its `approval_run`)."""
    stage_index: SkipJsonSchema[int | None] = None
    """approve only: the stage (0-based) the approval was given for."""
    nonce: Annotated[
        SkipJsonSchema[str], Field(max_length=MAX_NONCE_CHARS, strict=True), STORABLE
    ] = ""
    """approve only: the API's random nonce; the rollout takes each once."""
    emails: SkipJsonSchema[
        Annotated[
            list[Annotated[str, Field(max_length=MAX_EMAIL_CHARS, strict=True)]],
            Field(max_length=MAX_EMAILS),
        ]
    ] = field(default_factory=list)
    """approve only: the emails the access policy (or a verified OpenID `email` claim) gives the
    approver; four eyes refuse an approver whose email is the author's (tempoconf.rollout.identities)."""


def command_path(path: str, name: str) -> str:
    """The admin API's route of command `name` on config `path`: after a ':', which no config
    path contains (tempoconf.paths), so a config named `.../halt` is never taken for a command."""
    return f"/v1/admin/rollouts/{path}:{name}"
