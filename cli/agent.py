"""`tempoconf agent PATH --out FILE`: the client SDK as a process, for programs in any language.

It writes the value in use to FILE as JSON (atomically: write, fsync, rename) whenever it changes,
optionally runs a command after each write, serves its own `/metrics`, and stops cleanly on
SIGINT/SIGTERM. The client itself (long-poll, disk cache, hold rule) is `tempoconf.client`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from tempoconf.cli._common import die, run_until_signal
from tempoconf.cli._flags import client_identity_flags, config_namespace_flag, seconds_flag
from tempoconf.settings import Settings

if TYPE_CHECKING:
    from tempoconf.client import AsyncConfigClient, ConfigValue

__all__ = ["add_parser", "agent_command"]

logger = logging.getLogger("tempoconf.agent")

STOP_GRACE_SECONDS = 5.0
"""On SIGTERM, a command still running gets this long to finish before it is killed."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `tempoconf agent` on the CLI's subparsers."""
    agent = commands.add_parser(
        "agent",
        help="keep a file up to date with the value the API serves this host",
        description=(
            "Write the config value this host resolves to into FILE (JSON, replaced atomically) "
            "and keep it current: long-polls the API, falls back to the last good value in the "
            "cache dir, applies the hold rule, runs --exec after each change."
        ),
    )
    agent.add_argument("path", metavar="PATH", help="config path, e.g. myproject/server_config")
    agent.add_argument("--out", required=True, metavar="FILE", help="file the value is written to")
    config_namespace_flag(agent)
    client_identity_flags(agent)
    agent.add_argument("--api-url", help="distribution API base URL (env TEMPOCONF_API_URL)")
    agent.add_argument(
        "--token",
        help="client token (env TEMPOCONF_CLIENT_TOKEN; prefer it: flags show in `ps`)",
    )
    agent.add_argument(
        "--cache-dir",
        help="where the last good value is kept (env TEMPOCONF_CACHE_DIR; "
        "default $XDG_CACHE_HOME/tempoconf or ~/.cache/tempoconf)",
    )
    agent.add_argument(
        "--exec",
        dest="exec_command",
        metavar="CMD",
        help="shell command run after each change of FILE; it gets TEMPOCONF_VERSION, "
        "TEMPOCONF_STAGE, TEMPOCONF_PATH, TEMPOCONF_NAMESPACE, TEMPOCONF_FILE",
    )
    seconds_flag(agent, "--exec-timeout", 60.0, "a command running longer is killed (default 60)")
    agent.add_argument(
        "--metrics-port", type=int, metavar="N", help="serve /metrics on this port (0: a free one)"
    )
    agent.add_argument(
        "--metrics-host", default="127.0.0.1", help="address /metrics binds (default 127.0.0.1)"
    )
    seconds_flag(
        agent, "--long-poll", 30.0, "long-poll seconds, up to 60 (default 30; 0 polls instead)"
    )
    seconds_flag(
        agent, "--poll-interval", 5.0, "pause between polls the API answers at once (default 5)"
    )
    agent.set_defaults(handler="agent.agent_command")


def agent_command(args: argparse.Namespace) -> int:
    settings = Settings.from_env(api_url=args.api_url)
    out = Path(args.out).absolute()
    if out.is_dir():
        die(f"--out {args.out} is a directory; give the file to write")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        die(f"--metrics-port {args.metrics_port} is not a port number", exit_code=2)
    # The agent's own news (each write, each command) is worth a line in the service's log.
    for name in ("tempoconf.agent", "tempoconf.client"):
        logging.getLogger(name).setLevel(logging.INFO)

    from tempoconf.client import AsyncConfigClient

    labels = dict(label.split("=", 1) for label in args.label)
    try:
        client = AsyncConfigClient(
            settings.resolved_api_url,
            args.path,
            namespace=args.namespace,
            client_id=args.client or socket.gethostname(),
            channel=args.channel,
            labels=labels,
            token=args.token or settings.client_token,
            cache_dir=_cache_dir(args.cache_dir),
            long_poll_seconds=args.long_poll,
            poll_interval=args.poll_interval,
            # The agent reports a version applied itself: once the file is written and --exec
            # succeeded, not when its subscriber returns (the command runs after it).
            report_applied=False,
        )
    except ValueError as error:
        die(f"agent: {error}", exit_code=2)
    description = (
        f"watching {args.namespace}/{args.path} as client {client.client_id!r} "
        f"at {settings.resolved_api_url}"
    )
    agent = _Agent(
        client, out, args.exec_command, exec_timeout=args.exec_timeout, description=description
    )
    return run_until_signal(lambda: agent.run(args.metrics_host, args.metrics_port))


def _cache_dir(flag: str | None) -> Path:
    if flag:
        return Path(flag)
    if os.environ.get("TEMPOCONF_CACHE_DIR"):
        return Path(os.environ["TEMPOCONF_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tempoconf"


class _Agent:
    """Writes each value in use to `out`, and runs `command` after each write (one at a time;
    when values change faster than the command runs, it runs once more for the latest)."""

    def __init__(
        self,
        client: AsyncConfigClient,
        out: Path,
        command: str | None,
        *,
        exec_timeout: float,
        description: str,
    ) -> None:
        self.client = client
        self.description = description
        self.out = out
        self.command = command
        self.exec_timeout = exec_timeout
        self._to_run: ConfigValue | None = None
        self._wake = asyncio.Event()

    async def run(self, metrics_host: str, metrics_port: int | None) -> int:
        from prometheus_client import start_http_server

        metrics = None
        if metrics_port is not None:
            try:
                metrics, _ = start_http_server(
                    metrics_port, addr=metrics_host, registry=self.client.registry
                )
            except OSError as error:
                die(f"cannot serve /metrics on {metrics_host}:{metrics_port}: {error}")
            host = f"[{metrics_host}]" if ":" in metrics_host else metrics_host
            logger.info("metrics on http://%s:%d/metrics", host, metrics.server_port)
        self.client.subscribe(self._on_value)
        logger.info("%s, writing %s", self.description, self.out)
        runner = asyncio.create_task(self._run_commands(), name="tempoconf-agent-exec")
        try:
            async with self.client:
                await asyncio.Event().wait()  # until SIGINT/SIGTERM cancel us
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()
        return 0

    async def _on_value(self, value: ConfigValue) -> None:
        data = (
            json.dumps(value.value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        ).encode()
        try:
            if self.out.read_bytes() == data:
                # A restart with the file already current: no rewrite, no reload of the program.
                logger.info("%s already holds version %s", self.out, value.version)
                if not self.command:
                    await self._report_applied(value, None)
                return
        except OSError:
            pass  # no file yet (or unreadable): write it
        from tempoconf.client import write_file_atomically

        try:
            await asyncio.to_thread(write_file_atomically, self.out, data)
        except OSError as error:
            logger.error("cannot write version %s to %s: %s", value.version, self.out, error)
            await self._report_applied(value, f"cannot write {self.out}: {error}")
            return
        logger.info(
            "wrote version %s (stage %s, from %s) to %s",
            value.version,
            value.stage,
            value.source,
            self.out,
        )
        if self.command:
            self._to_run = value
            self._wake.set()
        else:
            await self._report_applied(value, None)

    async def _report_applied(self, value: ConfigValue, error: str | None) -> None:
        """Tell the API what this host applied (the gate on applied versions counts it); a
        report that cannot be sent is logged, never fatal, and the next change reports again."""
        if value.source == "cache":
            return  # the API is unreachable: nothing to tell it now
        from tempoconf.client import ConfigClientError

        try:
            await self.client.report_applied(value.version, error)
        except ConfigClientError as exc:
            logger.warning("cannot report version %s applied: %s", value.version, exc)
            return
        if error is None:
            logger.info("reported version %s applied", value.version)
        else:
            logger.info("reported version %s failed to apply: %s", value.version, error)

    async def _run_commands(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            value, self._to_run = self._to_run, None
            if value is not None:
                await self._run_command(value)

    async def _run_command(self, value: ConfigValue) -> None:
        assert self.command is not None
        env = {
            **os.environ,
            "TEMPOCONF_VERSION": value.version,
            "TEMPOCONF_STAGE": value.stage,
            "TEMPOCONF_PATH": value.path,
            "TEMPOCONF_NAMESPACE": value.namespace,
            "TEMPOCONF_FILE": str(self.out),
        }
        try:
            process = await asyncio.create_subprocess_shell(
                self.command, env=env, stdin=subprocess.DEVNULL
            )
        except OSError as error:  # a failing command is reported, never fatal to the agent
            logger.error("cannot run --exec %r: %s", self.command, error)
            await self._report_applied(value, f"cannot run --exec: {error}")
            return
        try:
            code = await asyncio.wait_for(process.wait(), self.exec_timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            logger.error(
                "--exec %r ran over %gs for version %s: killed",
                self.command,
                self.exec_timeout,
                value.version,
            )
            await self._report_applied(value, f"--exec ran over {self.exec_timeout:g}s: killed")
            return
        except asyncio.CancelledError:
            # Stopping: let a reload in progress finish (briefly) rather than cut it in half.
            try:
                await asyncio.wait_for(process.wait(), STOP_GRACE_SECONDS)
            except TimeoutError:
                process.kill()
                await process.wait()
            raise
        if code != 0:
            logger.error(
                "--exec %r exited with %d for version %s", self.command, code, value.version
            )
            await self._report_applied(value, f"--exec exited with {code}")
        else:
            logger.info("--exec %r done for version %s", self.command, value.version)
            await self._report_applied(value, None)
