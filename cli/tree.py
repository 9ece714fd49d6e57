"""`tempoconf diff DIR` and `tempoconf apply DIR`: configs as code (docs/how-to/configs-as-code.md).

Both read the tree (tempoconf.tree), check every file, and compare it with what is served in one
read of the served state (`OperatorBackend.served_state`), so they work alike in direct mode and
through the admin API. apply then sets the changed schemas and starts one rollout per changed
config (or changeset), each through the same prepare and start as `tempoconf rollout start`."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from tempoconf.cli._backend import (
    AlreadyRunning,
    LockBusy,
    OperatorBackend,
    OperatorCommandInput,
    operator_backend,
)
from tempoconf.cli._common import (
    SUCCESSFUL_OUTCOMES,
    actor,
    die,
    settings_from_args,
    workflow_ui_url,
)
from tempoconf.cli._format import value_diff
from tempoconf.cli._operator_records import Ending
from tempoconf.cli._tree_format import (
    diff_json,
    diff_markdown,
    diff_text,
    problem_lines,
)
from tempoconf.operations.errors import OperationError
from tempoconf.problems import InvalidRequestError
from tempoconf.settings import Settings
from tempoconf.temporal.names import request_workflow_id
from tempoconf.tree.diff import Action, ConfigDiff, TreeDiff, diff_tree
from tempoconf.tree.git import head_commit
from tempoconf.tree.layout import FileProblem, Tree, TreeError
from tempoconf.tree.reader import read_tree
from tempoconf.tree.requests import (
    Authorship,
    check_tree,
    locate_problems,
    rollout_request,
    value_problems_of,
)

__all__ = ["apply_command", "diff_command"]

# Reads of single configs (stable values, served schemas) in flight at once.
READ_CONCURRENCY = 16
EXIT_PENDING = 2  # diff: there is something to apply (as `terraform plan -detailed-exitcode`)

_T = TypeVar("_T")


@dataclass
class _Compared:
    tree: Tree
    authorship: Authorship
    problems: list[FileProblem]
    diff: TreeDiff | None = None


def _load(args: argparse.Namespace) -> tuple[Tree, Authorship]:
    root = Path(args.dir)
    try:
        tree = read_tree(root)
    except TreeError as error:
        die(str(error))
    head = head_commit(root)
    authorship = Authorship(
        author=args.author or (head.author if head else actor()),
        commit=args.commit if args.commit is not None else (head.commit if head else ""),
        message=args.message or (head.subject if head else f"tempoconf apply {args.dir}"),
        source="git HEAD" if head else "tempoconf apply",
    )
    return tree, authorship


def _heading(args: argparse.Namespace, tree: Tree, authorship: Authorship) -> str:
    at = f" at {authorship.commit[:12]}" if authorship.commit else ""
    kind = " (a protoconf repository)" if tree.kind == "protoconf" else ""
    return (
        f"{args.dir}{kind}{at}: {len(tree.configs)} config(s) in "
        f"{len(tree.namespaces)} namespace(s), against what is served"
    )


async def _compare(
    backend: OperatorBackend, tree: Tree, authorship: Authorship, *, readable: bool = True
) -> _Compared:
    """The tree's problems (its files, its requests, its values against the served schemas), and
    its diff against what is served; `readable`: with each value's and schema's diff (a read of
    its stable value and served schema). The diff is None when the tree's own files have
    problems."""
    problems = sorted(
        [*tree.problems, *check_tree(tree, authorship)], key=lambda p: (p.file, p.pointer)
    )
    compared = _Compared(tree, authorship, problems)
    if problems:
        return compared
    served = await backend.served_state(tree.namespaces)
    diff = diff_tree(tree, served.configs, served.freezes, now=datetime.now(UTC))
    digests = {(c.namespace, c.path): c.schema_digest for c in served.configs}
    changed = [c for c in diff.configs if c.action in (Action.START, Action.BLOCKED)]
    limit = asyncio.Semaphore(READ_CONCURRENCY)

    async def bounded(call: Awaitable[_T]) -> _T:
        async with limit:
            return await call

    async def judge(config: ConfigDiff) -> None:
        """A new value without a schema in the tree meets the served schema."""
        assert config.config is not None
        schema = await bounded(backend.get_schema(config.namespace, config.path))
        if schema is not None:
            problems.extend(value_problems_of(config.config, schema))

    async def show_value(config: ConfigDiff) -> None:
        assert config.config is not None
        stable = None
        if config.stable_version is not None:
            record = await bounded(backend.get_stable(config.namespace, config.path))
            stable = record.value if record is not None else None
        config.value_diff = value_diff(
            stable,
            config.config.value,
            old_name=f"stable {config.stable_version}" if config.stable_version else "no stable",
            new_name=f"{config.file} ({config.version})",
        )

    async def show_schema(config: ConfigDiff) -> None:
        assert config.config is not None and config.config.schema_source is not None
        old = None
        if digests.get((config.namespace, config.path)) is not None:
            old = await bounded(backend.get_schema(config.namespace, config.path))
        config.schema_diff = value_diff(
            old,
            config.config.schema,
            old_name="served schema" if old is not None else "no schema",
            new_name=config.config.schema_source.file,
        )

    calls: list[Awaitable[None]] = [show_value(config) for config in changed if readable]
    calls += [
        judge(config)
        for config in changed
        if config.config is not None
        and config.config.schema_source is None
        and digests.get((config.namespace, config.path)) is not None
    ]
    calls += [show_schema(config) for config in diff.configs if config.schema_change and readable]
    await asyncio.gather(*calls)
    problems.sort(key=lambda p: (p.file, p.pointer))
    compared.diff = diff
    return compared


# -- diff --------------------------------------------------------------------------------------
def diff_command(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    tree, authorship = _load(args)
    output = "json" if args.json else args.format
    return asyncio.run(_diff(settings, args, tree, authorship, output))


async def _diff(
    settings: Settings, args: argparse.Namespace, tree: Tree, authorship: Authorship, output: str
) -> int:
    async with operator_backend(settings) as backend:
        compared = await _compare(backend, tree, authorship)
    diff, problems = compared.diff, compared.problems
    heading = _heading(args, tree, authorship)
    if output == "json":
        print(json.dumps(diff_json(diff, tree=args.dir, commit=authorship.commit,
                                   problems=problems), indent=2))  # fmt: skip
    elif output == "markdown":
        assert diff is not None or problems
        print(diff_markdown(diff or TreeDiff([]), heading=heading, problems=problems), end="")
    elif problems or diff is None:
        print("\n".join(problem_lines(problems, root=args.dir)), file=sys.stderr)
    else:
        print("\n".join(diff_text(diff, heading=heading)))
    if problems or diff is None:
        return 1
    return EXIT_PENDING if diff.pending else 0


# -- apply -------------------------------------------------------------------------------------
def apply_command(args: argparse.Namespace) -> int:
    if args.halt_on_interrupt and not args.wait:
        die(
            "--halt-on-interrupt needs --wait: it halts the rollouts this apply waits for",
            exit_code=2,
        )
    settings = settings_from_args(args)
    tree, authorship = _load(args)
    return asyncio.run(_apply(settings, args, tree, authorship))


@dataclass
class _Started:
    configs: list[ConfigDiff]
    workflow_id: str
    run_id: str | None
    ending: Ending | None = None

    @property
    def label(self) -> str:
        if len(self.configs) == 1:
            return self.configs[0].name
        names = ", ".join(config.name for config in self.configs)
        return f"changeset {self.configs[0].changeset} ({names})"


@dataclass
class _Interrupt:
    """SIGINT and SIGTERM while apply runs with --halt-on-interrupt: the first halts what this
    apply started, a second stops waiting for the halts to finish."""

    signum: int | None = None
    first: asyncio.Event = field(default_factory=asyncio.Event)
    again: asyncio.Event = field(default_factory=asyncio.Event)

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._received, signum)

    def _received(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
            self.first.set()
        else:
            self.again.set()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or 0)


async def _apply(
    settings: Settings, args: argparse.Namespace, tree: Tree, authorship: Authorship
) -> int:
    interrupt = _Interrupt()
    if args.halt_on_interrupt:
        interrupt.install()
    async with operator_backend(settings) as backend:
        # Without the values' diffs: they are diff's, for review; apply's log says what it does.
        compared = await _compare(backend, tree, authorship, readable=False)
        diff = compared.diff
        if compared.problems or diff is None:
            print("\n".join(problem_lines(compared.problems, root=args.dir)), file=sys.stderr)
            print("nothing was applied.", file=sys.stderr)
            return 1
        heading = _heading(args, tree, authorship)
        print("\n".join(diff_text(diff, heading=heading)), flush=True)
        if not diff.pending:
            print("nothing to apply.")
            return 0
        if interrupt.signum:
            print(f"{interrupt.name}: nothing was applied.")
            return interrupt.exit_code
        refused = [f"{config.name}: {config.blocked}" for config in diff.of(Action.BLOCKED)]
        for config in diff.configs:
            if config.schema_change and config.action is not Action.BLOCKED:
                assert config.config is not None
                await backend.set_schema(
                    config.namespace,
                    config.path,
                    config.config.schema,
                    reason=f"tempoconf apply: {authorship.message}",
                )
                print(f"schema set: {config.name}")
        started: list[_Started] = []
        for unit in diff.units():
            if interrupt.signum:
                break
            launched = await _start(backend, settings, unit, authorship, refused)
            if launched is not None:
                started.append(launched)
        for line in refused:
            print(f"refused: {line}")
        if not args.wait or not started:
            if interrupt.signum:
                return interrupt.exit_code
            print(f"applied: {len(started)} rollout(s) started, {len(refused)} refused")
            return 1 if refused else 0
        await _wait(backend, started, interrupt)
    if interrupt.signum:
        return interrupt.exit_code
    failed = [s for s in started if not _succeeded(s.ending)]
    print(
        f"applied: {len(started) - len(failed)} of {len(started)} rollout(s) promoted, "
        f"{len(refused)} refused"
    )
    return 1 if failed or refused else 0


async def _start(
    backend: OperatorBackend,
    settings: Settings,
    unit: list[ConfigDiff],
    authorship: Authorship,
    refused: list[str],
) -> _Started | None:
    """Start one rollout of the tree; None (with the reason in `refused`) when it cannot."""
    configs = [config.config for config in unit if config.config is not None]
    raw = rollout_request(configs, authorship)
    label = _Started(unit, "", None).label
    try:
        prepared = await backend.prepare(raw)
    except InvalidRequestError as error:
        located = locate_problems(error.problems, configs, authorship)
        refused.append(f"{label}: " + "; ".join(str(problem) for problem in located))
        return None
    workflow_id = request_workflow_id(prepared.request)
    try:
        run_id = await backend.start(raw, prepared, workflow_id)
    except LockBusy as busy:
        refused.append(
            f"{label}: a rollout of version {busy.lock.version} is running "
            f"(workflow {busy.lock.workflow_id})"
        )
        return None
    except AlreadyRunning:
        refused.append(f"{label}: workflow {workflow_id} is running")
        return None
    if len(unit) == 1:
        print(f"started: {label}  version {unit[0].version}")
    else:
        print(f"started: {label}")
        print("  versions  " + ", ".join(f"{c.name} {c.version}" for c in unit))
    print(f"  workflow  {workflow_id}")
    print(f"  Web UI    {workflow_ui_url(settings, workflow_id, run_id)}", flush=True)
    return _Started(unit, workflow_id, run_id)


def _succeeded(ending: Ending | None) -> bool:
    return bool(ending and ending.result and ending.result.get("outcome") in SUCCESSFUL_OUTCOMES)


def _ending_line(started: _Started) -> str:
    ending = started.ending
    if ending is None:
        return f"  still running  {started.label} (workflow {started.workflow_id})"
    if ending.result is None:
        return f"  failed  {started.label}: {ending.failure}"
    result = ending.result
    reason = f": {result['reason']}" if result.get("reason") else ""
    return f"  {result.get('outcome')}  {started.label}{reason}"


async def _wait(backend: OperatorBackend, started: list[_Started], interrupt: _Interrupt) -> None:
    """Wait for every rollout this apply started, each outcome printed as it comes; on a signal
    (--halt-on-interrupt), halt those still running and wait until they have reverted."""
    print(f"waiting for {len(started)} rollout(s)...", flush=True)
    waits = {
        asyncio.create_task(_ending(backend, item)): item for item in started
    }  # fmt: skip
    await _until(waits, interrupt.first)
    if interrupt.signum is None:
        return
    running = [item for item in started if item.ending is None]
    print(f"{interrupt.name}: halting the {len(running)} rollout(s) this apply started", flush=True)
    for item in running:
        first = item.configs[0]
        try:
            await backend.command(
                OperatorCommandInput(
                    namespace=first.namespace,
                    path=first.path,
                    name="halt",
                    reason=f"tempoconf apply was interrupted ({interrupt.name})",
                    workflow_id=item.workflow_id,
                )
            )
        except OperationError as error:  # it ended meanwhile, or cannot be reached: said below
            print(f"  halt of {item.label}: {error.message}")
    print("waiting until they are back on stable (a second signal stops waiting)...", flush=True)
    await _until({task: item for task, item in waits.items() if not task.done()}, interrupt.again)
    for task in waits:
        task.cancel()


async def _ending(backend: OperatorBackend, item: _Started) -> None:
    first = item.configs[0]
    item.ending = await backend.wait_result(
        first.namespace, first.path, item.workflow_id, item.run_id
    )
    print(_ending_line(item), flush=True)


async def _until(waits: dict[asyncio.Task[None], _Started], stop: asyncio.Event) -> None:
    """Until every wait is done, or `stop` is set."""
    stopper = asyncio.create_task(stop.wait())
    pending: set[asyncio.Task[Any]] = set(waits)
    try:
        while pending and not stop.is_set():
            done, pending = await asyncio.wait(
                pending | {stopper}, return_when=asyncio.FIRST_COMPLETED
            )
            pending.discard(stopper)
            for task in done:
                if task is not stopper and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
    finally:
        stopper.cancel()
