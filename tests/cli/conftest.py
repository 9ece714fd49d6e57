"""Run `tempoconf` as a user does: the console script in a subprocess, on free ports and tmp dirs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fixtures.waiting import eventually_sync

TEMPOCONF = Path(sys.executable).parent / "tempoconf"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def page(relpath: str) -> str:
    """A docs page's text, as a test that runs its commands reads it."""
    return (DOCS / relpath).read_text(encoding="utf-8")


STARTUP_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
# Settings the caller's shell may carry; a test must decide them itself.
_SETTINGS_VARIABLES = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPOCONF_DATA_DIR",
    "TEMPOCONF_DATABASE_URL",
    "TEMPOCONF_API_URL",
    "TEMPOCONF_ACCESS_FILE",
    "TEMPOCONF_ADMIN_TOKEN",
    "TEMPOCONF_ADMIN_TOKENS",
    "TEMPOCONF_API_TOKEN",
    "TEMPOCONF_API_TOKEN_COMMAND",
    "TEMPOCONF_CLIENT_TOKEN",
    "TEMPOCONF_TASK_QUEUE",
    "TEMPOCONF_UI_URL",
    "TEMPOCONF_DEPLOYMENT_NAME",
    "TEMPOCONF_BUILD_ID",
    "TEMPOCONF_SDK_METRICS_ADDRESS",
)


def free_port() -> int:
    """tests/fixtures/services.py's: a port from this worker's own range."""
    from tests.fixtures.services import free_port as worker_port

    return worker_port()


def cli_env(**variables: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # TEMPORAL_*: the address, and TLS or an API key (the Temporal CLI's variables) too;
        # OTEL_*: whether the command traces (tempoconf.tracing).
        if key not in _SETTINGS_VARIABLES and not key.startswith(("TEMPORAL_", "OTEL_"))
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(variables)
    return env


def run_cli(
    *args: str | Path, env: dict[str, str], cwd: Path, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """`tempoconf ARGS...`; the result has rc, stdout and stderr (text)."""
    return subprocess.run(
        [str(TEMPOCONF), *map(str, args)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass(frozen=True)
class ShellCommand:
    """One command of a ```sh block, as bash reads it, with what the README says about it."""

    text: str  # continuation lines joined with their backslash-newline kept, as bash reads them
    notes: str  # the comment lines right above it, `# ` dropped, joined with spaces
    comment: str  # its trailing `# ...` comment, without the `#`; "" when it has none


@dataclass(frozen=True)
class ShellBlock:
    intro: str  # the Markdown text between the previous ```sh block (or the start) and this one
    commands: list[ShellCommand]


def shell_blocks(text: str) -> list[ShellBlock]:
    """The ```sh blocks of a Markdown text, each with the text before it and its commands."""
    blocks = []
    position = 0
    for match in re.finditer(r"```sh\n(.*?)```", text, re.S):
        commands = []
        current, notes = "", []
        for line in match.group(1).splitlines():
            if not current and not line.strip():
                notes = []
                continue
            if not current and line.lstrip().startswith("#"):
                notes.append(line.lstrip()[1:].strip())
                continue
            current += line
            if line.endswith("\\"):
                current += "\n"
                continue
            # A `#` that starts a word on the command's last line starts bash's comment.
            comment = re.search(r"\s#\s+(.*)$", line)
            commands.append(
                ShellCommand(current, " ".join(notes), comment.group(1) if comment else "")
            )
            current, notes = "", []
        blocks.append(ShellBlock(text[position : match.start()], commands))
        position = match.end()
    return blocks


def shell_commands(text: str) -> list[str]:
    """The commands of the ```sh blocks of a Markdown text, comment lines dropped."""
    return [command.text for block in shell_blocks(text) for command in block.commands]


def readme_command(*fragments: str) -> str:
    """The README's one command that contains every fragment."""
    found = [
        command
        for command in shell_commands(README.read_text(encoding="utf-8"))
        if all(fragment in command for fragment in fragments)
    ]
    assert len(found) == 1, f"{len(found)} README commands contain {fragments}: {found}"
    return found[0]


def bash(
    script: str, *, cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def unique_path(name: str) -> str:
    return f"clitest/{name}-{uuid.uuid4().hex[:8]}"


def processes_with(fragment: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `fragment`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if fragment in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def wait_for_output(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> str:
    """Wait until `text` shows in the process's output file; fail with the output if it dies first."""

    def printed() -> str:
        output = log.read_text(errors="replace") if log.exists() else ""
        if text in output:
            return output
        if process.poll() is not None:
            pytest.fail(f"tempoconf exited with {process.returncode} before {text!r}:\n{output}")
        return ""

    try:
        return eventually_sync(printed, what=repr(text), timeout=timeout, interval=0.1)
    except pytest.fail.Exception:
        if process.poll() is not None:
            raise
        pytest.fail(f"{text!r} not printed within {timeout}s:\n{log.read_text(errors='replace')}")


@dataclass
class RunningDev:
    """A `tempoconf dev` subprocess and the environment that points the CLI at it."""

    process: subprocess.Popen[bytes]
    workdir: Path
    data_dir: Path
    output: Path
    temporal_address: str
    api_url: str
    ui_port: int
    env: dict[str, str]

    def cli(self, *args: str | Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env, cwd=self.workdir, timeout=timeout)

    def temporal(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """The venv's Temporal CLI against this stack; `ok`: it must exit 0."""
        from tempoconf.temporal.binaries import temporal_cli_path

        done = subprocess.run(
            [str(temporal_cli_path()), *args, "--address", self.temporal_address],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if ok:
            assert done.returncode == 0, f"temporal {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    def stop(self) -> int:
        """SIGINT, as Ctrl-C; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"tempoconf dev did not stop within {STOP_TIMEOUT_SECONDS}s of SIGINT")


def start_dev(
    workdir: Path, *, default_data_dir: bool = False, variables: dict[str, str] | None = None
) -> RunningDev:
    """`tempoconf dev` in `workdir` on free ports, with `--data-dir workdir/state`, or with no
    `--data-dir` (so `.tempoconf` there, as a user's) when `default_data_dir`; `variables` go
    into its environment (e.g. TEMPOCONF_ADMIN_TOKEN).

    A port found free can be taken by a parallel test's process before dev binds it: dev then
    exits saying so, and is started again on other ports."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return _start_dev_once(workdir, default_data_dir=default_data_dir, variables=variables)
        except pytest.fail.Exception as failure:
            # Python says "Address already in use"; the Temporal dev server (Go) "address already
            # in use", for its HTTP API port too (one dev picks itself, beside the gRPC port).
            if "address already in use" not in str(failure).lower() or attempt == PORT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


PORT_ATTEMPTS = 3


def _start_dev_once(
    workdir: Path, *, default_data_dir: bool, variables: dict[str, str] | None
) -> RunningDev:
    temporal_port, ui_port, api_port = free_port(), free_port(), free_port()
    data_dir = workdir / (".tempoconf" if default_data_dir else "state")
    output = workdir / "dev.out"
    env = cli_env(**(variables or {}))
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            [
                str(TEMPOCONF),
                "dev",
                *([] if default_data_dir else ["--data-dir", str(data_dir)]),
                "--temporal-port",
                str(temporal_port),
                "--ui-port",
                str(ui_port),
                "--api-port",
                str(api_port),
            ],  # fmt: skip
            cwd=workdir,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    dev = RunningDev(
        process=process,
        workdir=workdir,
        data_dir=data_dir,
        output=output,
        temporal_address=f"127.0.0.1:{temporal_port}",
        api_url=f"http://127.0.0.1:{api_port}",
        ui_port=ui_port,
        env=cli_env(
            TEMPORAL_ADDRESS=f"127.0.0.1:{temporal_port}",
            TEMPOCONF_API_URL=f"http://127.0.0.1:{api_port}",
            TEMPOCONF_DATA_DIR=str(data_dir),
        ),
    )
    try:
        wait_for_output(output, "tempoconf dev stack is up", process, STARTUP_TIMEOUT_SECONDS)
    except BaseException:
        dev.stop()
        raise
    return dev


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    """One `tempoconf dev` for a test module (each test uses its own config paths)."""
    running = start_dev(tmp_path_factory.mktemp("dev"))
    try:
        assert httpx.get(f"{running.api_url}/healthz", timeout=5).status_code == 200
        yield running
    finally:
        running.stop()


async def until_listed_frozen(dev: RunningDev, workflow_id: str) -> None:
    """Until Temporal's visibility lists the rollout as frozen, as `freeze end` looks for it
    (visibility lags the workflow a moment: a rollout frozen just before is not told yet)."""
    from temporalio.client import Client

    from tempoconf.temporal.freeze_wakeup import FROZEN_ROLLOUTS_QUERY
    from tests.fixtures.waiting import eventually

    client = await Client.connect(dev.temporal_address)

    async def listed() -> list[str]:
        ids = [execution.id async for execution in client.list_workflows(FROZEN_ROLLOUTS_QUERY)]
        assert workflow_id in ids, ids
        return ids

    await eventually(listed, what=f"{workflow_id} listed as frozen", timeout=60)
