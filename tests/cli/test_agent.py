"""`tempoconf agent` as a process against a live API: the file, the command, /metrics, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.cli.conftest import TEMPOCONF, cli_env, free_port
from tests.client.helpers import PATH, stable_served
from tests.client.live_api import LiveApi, running_api
from tests.fixtures.waiting import eventually_sync

STOP_TIMEOUT = 15.0


@pytest.fixture
def live_api(sqlite_store: Store, tmp_path: Path) -> Iterator[LiveApi]:
    with running_api(sqlite_store, Settings(data_dir=tmp_path / "api")) as api:
        yield api


class Agent:
    def __init__(self, tmp_path: Path, api_url: str, *extra: str) -> None:
        self.out = tmp_path / "conf" / "server_config.json"
        self.log = tmp_path / "agent.log"
        self.metrics_port = free_port()
        with open(self.log, "wb") as sink:
            self.process = subprocess.Popen(
                [
                    str(TEMPOCONF),
                    "agent",
                    PATH,
                    "--out",
                    str(self.out),
                    "--client",
                    "host-1",
                    "--api-url",
                    api_url,
                    "--cache-dir",
                    str(tmp_path / "cache"),
                    "--metrics-port",
                    str(self.metrics_port),
                    "--poll-interval",
                    "0.2",  # the API may answer polls at once
                    *extra,
                ],  # fmt: skip
                env=cli_env(),
                cwd=tmp_path,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def value(self) -> object:
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            return None

    def wait_value(self, expected: object) -> None:
        try:
            eventually_sync(
                lambda: self.value() == expected, what=f"{self.out} to hold {expected}", timeout=20
            )
        except pytest.fail.Exception:
            pytest.fail(f"{self.out} never held {expected}; agent output:\n{self.output()}")

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def terminate(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the agent did not stop within {STOP_TIMEOUT}s:\n{self.output()}")


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[type[Agent]]:
    started: list[Agent] = []

    class Tracked(Agent):
        def __init__(self, api_url: str, *extra: str) -> None:
            super().__init__(tmp_path, api_url, *extra)
            started.append(self)

    yield Tracked  # type: ignore[misc]
    for agent in started:
        if agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait()


def test_agent_writes_runs_its_command_serves_metrics_and_stops_on_sigterm(
    live_api: LiveApi, start_agent: type[Agent], tmp_path: Path
) -> None:
    first = stable_served(live_api, {"max_connections": 100})
    ran = tmp_path / "ran.txt"
    agent = start_agent(
        live_api.url, "--exec", f'echo "$TEMPOCONF_VERSION $TEMPOCONF_STAGE" >> {ran}'
    )

    agent.wait_value({"max_connections": 100})
    eventually_sync(
        lambda: ran.exists() and ran.read_text().count("\n") == 1, what="the agent's first --exec"
    )
    assert ran.read_text() == f"{first.version} stable\n"
    assert sorted(p.name for p in agent.out.parent.iterdir()) == [agent.out.name]  # no temporary
    metrics = eventually_sync(
        lambda: "tempoconf_agent_config_version{" in agent.metrics() and agent.metrics(),
        what="the agent's version metric",
    )
    assert f'version="{first.version}"' in metrics and f'config_path="{PATH}"' in metrics

    second = stable_served(live_api, {"max_connections": 200})
    agent.wait_value({"max_connections": 200})
    eventually_sync(lambda: ran.read_text().count("\n") == 2, what="the agent's second --exec")
    assert ran.read_text().splitlines()[-1] == f"{second.version} stable"
    series = [
        line
        for line in agent.metrics().splitlines()
        if line.startswith("tempoconf_agent_config_version{")
    ]
    assert len(series) == 1 and f'version="{second.version}"' in series[0]

    assert agent.terminate() == 0
    with pytest.raises(httpx.TransportError):
        agent.metrics()
    assert "Traceback" not in agent.output()


def test_a_failing_command_is_logged_and_the_agent_goes_on(
    live_api: LiveApi, start_agent: type[Agent]
) -> None:
    stable_served(live_api, {"v": 1})
    agent = start_agent(live_api.url, "--exec", "echo failing >&2; exit 3")
    agent.wait_value({"v": 1})
    eventually_sync(
        lambda: "exited with 3" in agent.output(), what="the agent to report the failing --exec"
    )

    stable_served(live_api, {"v": 2})
    agent.wait_value({"v": 2})
    assert agent.process.poll() is None
    assert agent.terminate() == 0


def test_the_agent_serves_the_cached_value_when_the_api_is_down(
    live_api: LiveApi, start_agent: type[Agent]
) -> None:
    stable_served(live_api, {"v": 1})
    agent = start_agent(live_api.url)
    agent.wait_value({"v": 1})
    assert agent.terminate() == 0

    live_api.stop()
    agent.out.unlink()  # the program's file is gone too: the agent restores it from its cache
    again = start_agent(live_api.url)
    again.wait_value({"v": 1})
    assert again.process.poll() is None  # an unreachable API is waited out, not fatal
    assert again.terminate() == 0
