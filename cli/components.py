"""`tempoconf dev`, `worker` and `api`: the embedded stack, or one component of a real deployment."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from tempoconf.cli._common import (
    connect_temporal,
    die,
    open_store,
    run_until_signal,
    settings_from_args,
)
from tempoconf.cli.devstack import DevStack, DevStackError

__all__ = ["api_command", "dev_command", "run_dev_stack", "worker_command"]


def run_dev_stack(
    args: argparse.Namespace, body: Callable[[DevStack], Awaitable[int]], *, command: str
) -> int:
    """Start the dev stack (saying so, then its banner), run `body(stack)` until it returns or
    Ctrl-C; a component that stops prints `tempoconf {command}: why` and the exit code is 1."""
    settings = settings_from_args(args)

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

    return run_until_signal(run)


def dev_command(args: argparse.Namespace) -> int:
    async def serve(stack: DevStack) -> int:
        await stack.wait()
        return 0

    return run_dev_stack(args, serve, command="dev")


def worker_command(args: argparse.Namespace) -> int:
    from tempoconf.cli.worker import WorkerSettingsError, deployment_config, run_worker
    from tempoconf.temporal_connection import TemporalSettingsError, worker_runtime

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
    from tempoconf.temporal_connection import TemporalSettingsError, temporal_connection

    settings = settings_from_args(args)
    try:
        # The API connects to Temporal on first use; settings it could never use fail here, at once.
        temporal_connection(settings)
    except TemporalSettingsError as error:
        die(f"tempoconf api: {error}", exit_code=2)

    async def run() -> int:
        from tempoconf.api.server import serve_api

        with open_store(settings) as store:
            print(
                f"API: listening on http://{settings.host}:{settings.api_port}; Ctrl-C stops it",
                flush=True,
            )
            await serve_api(settings, store, host=settings.host, port=settings.api_port)
        return 0

    return run_until_signal(run, fast_loop=True)
