"""`tempoconf dev`, `worker` and `api`: the embedded stack, or one component of a real deployment."""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable

from tempoconf.cli._common import (
    check_access_policy,
    connect_temporal,
    die,
    open_store,
    run_until_signal,
    settings_from_args,
)
from tempoconf.cli.devstack import DevStack, DevStackError
from tempoconf.settings import Settings

__all__ = ["api_command", "dev_command", "run_dev_stack", "worker_command"]


def run_dev_stack(
    args: argparse.Namespace, body: Callable[[DevStack], Awaitable[int]], *, command: str
) -> int:
    """Start the dev stack (saying so, then its banner), run `body(stack)` until it returns or
    Ctrl-C; a component that stops prints `tempoconf {command}: why` and the exit code is 1."""
    from tempoconf.temporal.connection import use_process_runtime

    settings = settings_from_args(args)
    # A policy that would not load stops it here, before the Temporal dev server starts.
    check_access_policy(settings, command)
    # One SDK runtime for the stack's worker and API: Core's logs plain and throttled, as a
    # `tempoconf worker`'s.
    use_process_runtime()

    async def run() -> int:
        print(
            f"starting the Temporal dev server, worker and API (data dir {settings.data_dir})...",
            flush=True,
        )
        try:
            async with DevStack(settings) as stack:
                print(stack.banner(), flush=True)
                return await body(stack)
        except DevStackError as error:
            print(f"tempoconf {command}: {error}", flush=True)
            return 1

    # uvloop, as `tempoconf api`: the stack's API serves as a deployment's does. The worker is
    # fine on it (workflows run on temporalio's own deterministic loop, activities on this one).
    return run_until_signal(run, fast_loop=True, hangup=True)


def dev_command(args: argparse.Namespace) -> int:
    async def serve(stack: DevStack) -> int:
        await stack.wait()
        return 0

    return run_dev_stack(args, serve, command="dev")


def worker_command(args: argparse.Namespace) -> int:
    from tempoconf.cli.worker import WorkerSettingsError, deployment_config, run_worker
    from tempoconf.temporal.connection import TemporalSettingsError, worker_runtime

    settings = settings_from_args(args)
    try:
        deployment = deployment_config(settings)
    except WorkerSettingsError as error:
        die(f"tempoconf worker: {error}")
    version = f" as version {deployment.version.to_canonical_string()}" if deployment else ""
    try:
        # Core's logs through Python's logging, throttled (a server outage is not 10 lines a
        # second); the SDK's metrics too when asked for.
        runtime = worker_runtime(settings.sdk_metrics_address)
    except TemporalSettingsError as error:
        die(f"tempoconf worker: {error}", exit_code=2)

    async def run() -> int:
        # The store first: one that is not migrated is refused before anything connects.
        with open_store(settings) as store:
            client = await connect_temporal(settings, runtime=runtime)
            if settings.sdk_metrics_address is not None:
                print(
                    f"worker: Temporal SDK metrics at http://{settings.sdk_metrics_address}/metrics",
                    flush=True,
                )
            print(
                f"worker: polling task queue {settings.task_queue!r} of {settings.resolved_temporal_address} "
                f"(namespace {settings.temporal_namespace}){version}; Ctrl-C stops it",
                flush=True,
            )
            await run_worker(settings, store, client)
        return 0

    return run_until_signal(run)


def api_command(args: argparse.Namespace) -> int:
    from tempoconf.temporal.connection import (
        TemporalSettingsError,
        temporal_connection,
        use_process_runtime,
    )

    settings = settings_from_args(args)
    # Before the workers of `--workers N` start: one message, not one per worker.
    check_access_policy(settings, "api")
    try:
        # The API connects to Temporal on first use; settings it could never use fail here, at once.
        temporal_connection(settings)
    except TemporalSettingsError as error:
        die(f"tempoconf api: {error}", exit_code=2)
    # Its connector's client on the worker's kind of runtime: while Temporal is down, Core's
    # retries are a plain line a minute, not a coloured one per failed call.
    use_process_runtime()

    if args.workers > 1:
        return _supervise_api(args, settings)
    worker_index: int | None = args.worker_index

    def serving(base_url: str) -> None:
        from tempoconf.api.server import settle_heap

        settle_heap()
        if worker_index is None:
            # Once serving, with the port bound (--port 0 picks one): the URL works as printed.
            print(f"API: listening on {base_url}; Ctrl-C stops it", flush=True)
        if args.ready_fd is not None:  # tell the supervisor: this worker serves
            with os.fdopen(args.ready_fd, "w") as ready:
                ready.write(f"{base_url}\n")

    async def run() -> int:
        from tempoconf.api.server import serve_api

        with open_store(settings) as store:
            await serve_api(
                settings,
                store,
                host=settings.host,
                port=settings.api_port,
                reuse_port=worker_index is not None,
                on_started=serving,
            )
        return 0

    return run_until_signal(run, fast_loop=True, quiet=worker_index is not None, hangup=True)


def _supervise_api(args: argparse.Namespace, settings: Settings) -> int:
    """`tempoconf api --workers N` (N > 1): hold the port, run N workers (cli/api_workers.py)."""
    from tempoconf.api.server import ApiServerError, bind_listener
    from tempoconf.cli.api_workers import supervise_workers

    try:
        # Bound, not listening: it resolves --port 0 once, refuses a port in use at once, and
        # keeps the port ours while a worker restarts; it is given no connection.
        held = bind_listener(settings.host, settings.api_port, reuse_port=True, listen=False)
    except ApiServerError as error:
        die(f"tempoconf api: {error}")
    with held:
        port = int(held.getsockname()[1])

        async def run() -> int:
            return await supervise_workers(args, settings, args.workers, port=port)

        # The stdlib loop: the supervisor only waits for its children.
        return run_until_signal(run)
