"""Every consumer of the operator commands' registry (tempoconf.rollout.commands) lists all of them: the
workflow's signals and updates, the API's routes, the CLI's `rollout` subcommands."""

from __future__ import annotations

import argparse

from temporalio import workflow

from tempoconf.api.routes.rollouts import routes
from tempoconf.cli.main import build_parser
from tempoconf.rollout.commands import COMMAND_NAMES, COMMANDS
from tempoconf.temporal.names import FREEZE_ENDED_SIGNAL
from tempoconf.workflows.rollout import ConfigRollout


def test_the_workflow_has_a_signal_and_an_update_per_command() -> None:
    definition = workflow._Definition.must_from_class(ConfigRollout)
    # Beside the commands, one signal that is none: a freeze ended, look again (freeze_wakeup).
    assert sorted(name for name in definition.signals if name) == sorted(
        [*COMMAND_NAMES, FREEZE_ENDED_SIGNAL]
    )
    assert sorted(definition.updates) == sorted(COMMAND_NAMES)
    assert all(definition.updates[name].validator is not None for name in COMMAND_NAMES)


def test_the_api_has_a_route_per_command() -> None:
    paths = {getattr(route, "path", "") for route in routes}
    for name in COMMAND_NAMES:
        assert any(path.endswith(f":{name}") for path in paths), name


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_the_cli_has_a_rollout_subcommand_per_command_with_its_help() -> None:
    rollout = _subcommands(build_parser())["rollout"]
    commands = _subcommands(rollout)
    [action] = [a for a in rollout._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    for name in COMMAND_NAMES:
        assert name in commands
        assert helps[name] == COMMANDS[name].help
        assert "--reason" in commands[name].format_help()
