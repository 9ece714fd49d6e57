"""`tempoconf api --workers N`: N API processes on one port, under a supervisor.

Each worker is a `tempoconf api` process of its own (its snapshot cache, change notifications,
seen-clients flush and metrics) that binds the port with SO_REUSEPORT, so the kernel spreads new
connections across them. The supervisor (this process) holds the port bound without listening (so
`--port 0` resolves once and nobody else takes the port between restarts), starts the workers,
restarts one that dies (with backoff, logged), and on SIGTERM/SIGINT stops them all gracefully.
SIGHUP is passed on to every worker (each reads its access policy again). Workers die with the
supervisor, even when it is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from tempoconf.cli._children import die_with_parent
from tempoconf.settings import Settings

__all__ = ["RESTART_DELAYS", "WORKER_STOP_SECONDS", "supervise_workers"]

RESTART_DELAYS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds before restarting a worker that died, by how many times in a row it died young."""
HEALTHY_AFTER_SECONDS = 60.0
"""A worker that served this long before it died starts its backoff over."""
START_TIMEOUT_SECONDS = 120.0
"""A worker not serving by then counts as failed to start."""
WORKER_STOP_SECONDS = 15.0
"""After SIGTERM, a worker gets this long (its graceful shutdown is 5 s) before SIGKILL."""

# The flags of `tempoconf api` a worker is given again, as the supervisor was given them.
_REPEATED_FLAGS = (
    "data_dir", "temporal_address", "temporal_namespace", "task_queue", "database_url",
    "api_url", "ui_port",
)  # fmt: skip

logger = logging.getLogger("tempoconf.api.workers")


@dataclass
class _Worker:
    index: int
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    served: asyncio.Event = field(default_factory=asyncio.Event)
    watch: asyncio.Task[None] | None = None
    """Reads the worker's "serving" line (a task the loop holds only weakly: kept here)."""
    young_deaths: int = 0


async def supervise_workers(
    args: argparse.Namespace, settings: Settings, workers: int, *, port: int
) -> int:
    """Run `workers` API processes on `settings.host:port` (the port the caller holds) until
    cancelled (SIGTERM/SIGINT through run_until_signal): then stop them all and re-raise.

    Returns a worker's exit code when one fails before the first start of every worker is
    serving (a setting, the store): restarting it would only fail again."""
    pool = [_Worker(index) for index in range(1, workers + 1)]
    loop = asyncio.get_running_loop()
    # The workers are in sessions of their own: a SIGHUP meant for the API reaches them only so
    # (and SIGHUP's default action would stop the supervisor).
    loop.add_signal_handler(signal.SIGHUP, _pass_on, pool, signal.SIGHUP)
    try:
        for worker in pool:
            await _start(worker, args, settings, port)
        failed = await _first_start(pool)
        if failed is not None:
            return failed
        pids = ", ".join(str(w.process.pid) for w in pool if w.process is not None)
        print(
            f"API: {workers} workers (pids {pids}) listening on "
            f"http://{_shown_host(settings.host)}:{port}; Ctrl-C stops them",
            flush=True,
        )
        await _keep_running(pool, args, settings, port)
        return 0  # unreachable: _keep_running returns only by cancellation
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        await asyncio.shield(_stop_all(pool))


def _pass_on(pool: list[_Worker], signum: signal.Signals) -> None:
    """To the workers that serve: one still starting has not set its handler (the signal would
    stop it), and reads the file as it is anyway."""
    for worker in pool:
        if (
            worker.served.is_set()
            and worker.process is not None
            and worker.process.returncode is None
        ):
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signum)


async def _start(worker: _Worker, args: argparse.Namespace, settings: Settings, port: int) -> None:
    read_fd, write_fd = os.pipe()
    command = [
        sys.executable, "-m", "tempoconf.cli.main", "api",
        "--host", settings.host, "--port", str(port),
        "--worker-index", str(worker.index), "--ready-fd", str(write_fd),
    ]  # fmt: skip
    for dest in _REPEATED_FLAGS:
        value = getattr(args, dest, None)
        if value is not None:
            command += [f"--{dest.replace('_', '-')}", str(value)]
    worker.served = asyncio.Event()
    try:
        worker.process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            pass_fds=(write_fd,),
            # Own session: a terminal's Ctrl-C reaches the supervisor only, which stops the
            # workers in order; the kernel stops them if the supervisor dies.
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    worker.started_at = time.monotonic()
    worker.watch = asyncio.create_task(
        _watch_ready(read_fd, worker.served), name=f"api-worker-{worker.index}-ready"
    )


async def _watch_ready(read_fd: int, served: asyncio.Event) -> None:
    """Set `served` when the worker writes its line (it serves); the pipe closes when it exits."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    try:
        if await reader.readline():
            served.set()
    finally:
        transport.close()


async def _first_start(pool: list[_Worker]) -> int | None:
    """Wait until every worker serves; a worker's exit code if one exits first (the others
    are stopped by the caller)."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    for worker in pool:
        assert worker.process is not None
        served = asyncio.ensure_future(worker.served.wait())
        exited = asyncio.ensure_future(worker.process.wait())
        try:
            await asyncio.wait(
                {served, exited},
                timeout=max(0.0, deadline - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            served.cancel()
            exited.cancel()
        if worker.process.returncode is not None:
            code = worker.process.returncode
            print(
                f"tempoconf api: worker {worker.index} exited with code {code} while starting; "
                "stopping the others",
                file=sys.stderr,
                flush=True,
            )
            return code if code > 0 else 1
        if not worker.served.is_set():
            print(
                f"tempoconf api: worker {worker.index} was not serving within "
                f"{START_TIMEOUT_SECONDS:.0f} s; stopping",
                file=sys.stderr,
                flush=True,
            )
            return 1
    return None


async def _keep_running(
    pool: list[_Worker], args: argparse.Namespace, settings: Settings, port: int
) -> None:
    """Restart each worker that exits, after a backoff that grows while it keeps dying young."""

    async def tend(worker: _Worker) -> None:
        while True:
            assert worker.process is not None
            pid = worker.process.pid
            code = await worker.process.wait()
            lived = time.monotonic() - worker.started_at
            worker.young_deaths = 0 if lived >= HEALTHY_AFTER_SECONDS else worker.young_deaths + 1
            delay = RESTART_DELAYS[min(max(worker.young_deaths, 1), len(RESTART_DELAYS)) - 1]
            logger.error(
                "API worker %d (pid %d) exited (%s) after %.1f s; restarting it in %.1f s",
                worker.index,
                pid,
                _how(code),
                lived,
                delay,
            )
            await asyncio.sleep(delay)
            await _start(worker, args, settings, port)
            assert worker.process is not None
            logger.warning("API worker %d restarted as pid %d", worker.index, worker.process.pid)

    async with asyncio.TaskGroup() as group:
        for worker in pool:
            group.create_task(tend(worker), name=f"tend-api-worker-{worker.index}")


async def _stop_all(pool: list[_Worker]) -> None:
    """SIGTERM to every worker (each answers its long-polls at once and stops within its
    graceful shutdown), SIGKILL to any still running after WORKER_STOP_SECONDS."""
    running = [w.process for w in pool if w.process is not None and w.process.returncode is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    if not running:
        return
    waits = [asyncio.ensure_future(process.wait()) for process in running]
    _, late = await asyncio.wait(waits, timeout=WORKER_STOP_SECONDS)
    for process in running:
        if process.returncode is None:
            logger.error("API worker pid %d did not stop in time: killing it", process.pid)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    if late:
        await asyncio.wait(late)


def _how(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _shown_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
