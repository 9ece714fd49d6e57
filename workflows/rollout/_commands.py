"""The operator commands (tempoconf.rollout.commands): each a signal and an update of the same name, its
handlers made from the registry, not written out one by one.

They are the workflow class's own methods (`with_command_handlers`), as the decorators would have
made them, not handlers registered at run time (`workflow.set_signal_handler` in `__init__`):
those would be missing from the class's definition (the SDK's, which the tests read), and a signal
that comes with the start would be held until `__init__` registers it, which the SDK (1.35) runs
after the start's job created the run's task, so the signal would act after the run's first step,
not before it as it does now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from tempoconf.workflows.rollout._audit import refresh_view
from tempoconf.workflows.rollout._run import RolloutRun

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.commands import (
        COMMANDS,
        OPERATOR_COMMANDS,
        AnswerWhen,
        CommandName,
        OperatorCommand,
    )
    from tempoconf.rollout.progress import CommandResult
    from tempoconf.rollout.run_state import Effect
    from tempoconf.storable import storable_text, text_problem

__all__ = ["Steered", "with_command_handlers"]

# An update answers once the rollout has acted on it (e.g. the next stage is published and held),
# or after this long with a `requested:` message: clients wait 15 s for an answer.
STEERING_REPLY_TIMEOUT = timedelta(seconds=10)


class Steered(Protocol):
    """A workflow the commands steer: the run they act on."""

    rollout: RolloutRun


_Workflow = TypeVar("_Workflow", bound=Steered)


def with_command_handlers(cls: type[_Workflow]) -> type[_Workflow]:
    """Give the workflow class, for each operator command, a signal `NAME_signal` and an update
    `NAME_update` with its validator, named after the command (before `@workflow.defn` reads
    the class)."""
    for spec in OPERATOR_COMMANDS:
        signal, update, validate = _handlers(spec.name)
        if spec.signal:
            _add(cls, f"{spec.name}_signal", workflow.signal(name=spec.name)(signal))
        if spec.update:
            handler = workflow.update(name=spec.name)(update)
            handler.validator(_method_of(cls, f"_validate_{spec.name}", validate))
            _add(cls, f"{spec.name}_update", handler)
    return cls


def _handlers(
    name: CommandName,
) -> tuple[Callable[..., None], Callable[..., Any], Callable[..., None]]:
    # The SDK takes a handler's first parameter for the workflow instance only while it has no
    # annotation (temporalio.common._type_hints_from_func): `self`'s is for mypy, and removed.
    def signal(self: Steered, command: OperatorCommand | None = None) -> None:
        apply(self.rollout, name, command)

    async def update(self: Steered, command: OperatorCommand | None = None) -> CommandResult:
        return await answer(self.rollout, name, command)

    def validate(self: Steered, command: OperatorCommand | None = None) -> None:
        refuse(self.rollout, name, command)

    for handler in (signal, update, validate):
        del handler.__annotations__["self"]
    return signal, update, validate


def _method_of(cls: type, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` named as a method of `cls` (tracebacks, the SDK's messages)."""
    fn.__name__ = name
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    fn.__module__ = cls.__module__
    return fn


def _add(cls: type, name: str, fn: Callable[..., Any]) -> None:
    setattr(cls, name, _method_of(cls, name, fn))


def apply(run: RolloutRun, command: CommandName, argument: OperatorCommand | None) -> Effect:
    """Act on an operator command, then show its effect."""
    given = argument or OperatorCommand()
    # A signal cannot be refused: text the store could not keep (a NUL) is replaced, so the
    # audit of this command records it instead of failing (updates refuse it: refuse).
    # replace(): the command's other fields (an approval's digest) are carried as given.
    given = replace(
        given,
        reason=storable_text(given.reason),
        by=storable_text(given.by),
        digest=storable_text(given.digest),
        signature=storable_text(given.signature),
        signed_at=storable_text(given.signed_at),
    )
    effect = run.state.apply(command, given, at=run.now_iso())
    refresh_view(run)
    return effect


def refuse(run: RolloutRun, command: CommandName, argument: OperatorCommand | None) -> None:
    """An update's validator: a refusal is answered before anything is written to history."""
    texts = (
        (("reason", argument.reason), ("by", argument.by), ("digest", argument.digest))
        if argument
        else ()
    )
    for field, text in texts:
        problem = text_problem(text)
        if problem is not None:
            raise ApplicationError(f"invalid {command.value} {field}: {problem}")
    # The workflow's clock judges an approval's signature (its freshness).
    refusal = run.state.refusal(command, argument, now=run.clock())
    if refusal:
        raise ApplicationError(refusal)


def _settled(run: RolloutRun) -> bool:
    """The rollout acted on the command: it has ended, or waits for something the command did
    not give it (a hold's end, an approval, a resume, a re-check), its history audited."""
    if run.state.ended():
        return True
    # While it publishes, checks health, promotes or reverts, it is not parked: not yet.
    parked_on = run.parked_on
    return parked_on is not None and not parked_on() and not run.state.has_unaudited()


async def answer(
    run: RolloutRun, command: CommandName, argument: OperatorCommand | None
) -> CommandResult:
    """Apply an update, wait (bounded) until it took effect, then answer where the rollout is."""
    effect = apply(run, command, argument)
    took_effect = {
        AnswerWhen.ENDED: run.state.ended,
        AnswerWhen.SETTLED: lambda: _settled(run),
        AnswerWhen.AT_ONCE: None,
    }[COMMANDS[command].answer_when]
    in_effect = True
    if effect.accepted and took_effect is not None:
        try:
            await workflow.wait_condition(
                took_effect,
                timeout=STEERING_REPLY_TIMEOUT,
                timeout_summary=f"answer {command} once it took effect",
            )
        except TimeoutError:
            in_effect = False
        else:
            # Parked only to go on as a new run: the command takes effect in that run.
            in_effect = run.state.ended() or not run.between_stages
    progress = run.progress
    return CommandResult(
        command=command,
        accepted=effect.accepted,
        state=progress.state,
        phase=progress.phase,
        stage=progress.stage_name,
        stage_number=progress.stage_index + 1 if progress.stage_index >= 0 else 0,
        stage_count=progress.stage_count,
        paused=progress.paused,
        message=(
            run.state.answer_message(command, effect)
            if in_effect
            else (effect.requested or effect.done)
        ),
    )
