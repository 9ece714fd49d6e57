"""`tempoconf freeze start|end|list` against a live `tempoconf dev`, in both of the CLI's modes:
directly on the store, and through the admin API (TEMPOCONF_API_URL and TEMPOCONF_ADMIN_TOKEN set,
the database and Temporal pointed where nothing listens)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator

import pytest
from temporalio.client import Client

from tempoconf.temporal.names import FREEZE_ENDED_SIGNAL, rollout_workflow_id
from tests.cli.conftest import (
    RunningDev,
    cli_env,
    free_port,
    run_cli,
    start_dev,
    until_listed_frozen,
)

pytestmark = pytest.mark.timeout(240)

TOKEN = "freeze-s3cret"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    running = start_dev(
        tmp_path_factory.mktemp("freeze"), variables={"TEMPOCONF_ADMIN_TOKEN": TOKEN}
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def api_env(dev: RunningDev) -> dict[str, str]:
    return cli_env(
        TEMPOCONF_API_URL=dev.api_url,
        TEMPOCONF_ADMIN_TOKEN=TOKEN,
        TEMPOCONF_DATABASE_URL=f"postgresql+psycopg://nobody:pw@127.0.0.1:{free_port()}/nothing",
        TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
    )


def _via(dev: RunningDev, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("freeze", *args, env=env, cwd=dev.workdir)


@pytest.mark.parametrize("mode", ["direct", "api"])
def test_start_list_and_end_a_freeze(dev: RunningDev, api_env: dict[str, str], mode: str) -> None:
    env = dev.env if mode == "direct" else api_env
    other = api_env if mode == "direct" else dev.env
    namespace = f"frz-{mode}"

    started = _via(dev, env, "start", "--namespace", namespace, "--until", "2h", "--reason", "xmas")
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.startswith(f"frozen: namespace {namespace} frozen by ")
    assert ": xmas, until " in started.stdout

    # A second freeze is refused, by either mode, naming the active one.
    again = _via(dev, other, "start", "--namespace", namespace, "--reason", "second")
    assert again.returncode == 1
    assert f"not frozen again: namespace {namespace} frozen by " in again.stderr
    assert ": xmas, until " in again.stderr and "end it first" in again.stderr

    # Both modes list the same.
    listed = _via(dev, env, "list", "--namespace", namespace)
    assert listed.returncode == 0, listed.stderr
    listed_other = _via(dev, other, "list", "--namespace", namespace)
    assert (listed_other.returncode, listed_other.stdout, listed_other.stderr) == (
        0,
        listed.stdout,
        "",
    )
    lines = listed.stdout.splitlines()
    assert lines[0].split() == [
        "NAMESPACE", "STATUS", "SINCE", "(UTC)", "BY", "UNTIL", "(UTC)", "ENDED", "(UTC)", "REASON",
    ]  # fmt: skip
    assert len(lines) == 2 and lines[1].split()[:2] == [namespace, "active"]
    assert lines[1].endswith("xmas")
    (shown,) = json.loads(_via(dev, env, "list", "--namespace", namespace, "--json").stdout)
    assert shown["status"] == "active" and shown["reason"] == "xmas"
    assert shown["until"] is not None and shown["ended_at"] is None

    ended = _via(dev, other, "end", "--namespace", namespace, "--reason", "presents opened")
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert ended.stdout.startswith(f"ended the freeze of namespace {namespace} (xmas, by ")
    assert "waiting rollout" in ended.stdout and ended.stderr == "", ended.stderr
    not_frozen = _via(dev, env, "end", "--namespace", namespace)
    assert not_frozen.returncode == 1
    assert f"namespace {namespace} is not frozen" in not_frozen.stderr

    (shown,) = json.loads(_via(dev, env, "list", "--namespace", namespace, "--json").stdout)
    assert shown["status"] == "ended" and shown["end_reason"] == "presents opened"
    # The direct mode records the operator (user@host); the API the caller it verified: a named
    # token's name, else `api` (this stack's one token names nobody).
    operator = shown["by"] if mode == "direct" else shown["ended_by"]
    assert "@" in operator, shown
    assert (shown["by"], shown["ended_by"]) == (
        (operator, "api") if mode == "direct" else ("api", operator)
    )
    table = _via(dev, env, "list", "--namespace", namespace).stdout
    assert "ended" in table and ": presents opened" in table

    # A new freeze may start once the last one ended; `list` shows it first.
    restarted = _via(dev, env, "start", "--namespace", namespace, "--reason", "next")
    assert restarted.returncode == 0, restarted.stderr
    everything = json.loads(_via(dev, other, "list", "--json").stdout)
    mine = [freeze for freeze in everything if freeze["namespace"] == namespace]
    assert [freeze["status"] for freeze in mine] == ["active", "ended"]
    assert _via(dev, env, "end", "--namespace", namespace).returncode == 0


@pytest.mark.parametrize("mode", ["direct", "api"])
def test_freeze_end_tells_a_waiting_rollout_to_look_again_now(
    dev: RunningDev, api_env: dict[str, str], mode: str
) -> None:
    env = dev.env if mode == "direct" else api_env
    namespace, path = f"frz-wait-{mode}", f"clitest/frozen-{mode}"
    frozen = _via(dev, env, "start", "--namespace", namespace, "--reason", "release freeze")
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    request = dev.workdir / f"frozen-{mode}.json"
    request.write_text(
        json.dumps(
            {
                "namespace": namespace,
                "path": path,
                "value": {"mode": mode},
                "stages": [{"channel": "canary", "cooldown": "1s"}],
            }
        )
    )
    started = dev.cli("rollout", "start", request)
    assert started.returncode == 0, started.stdout + started.stderr
    workflow_id = rollout_workflow_id(namespace, path)
    asyncio.run(until_listed_frozen(dev, workflow_id))

    ended = _via(dev, env, "end", "--namespace", namespace)
    assert ended.returncode == 0, ended.stdout + ended.stderr
    first, told = ended.stdout.splitlines()
    assert first.startswith(f"ended the freeze of namespace {namespace} (release freeze, by ")
    assert re.fullmatch(
        r"told [1-9]\d* waiting rollouts? to look again now; any other goes on within 30 s\.", told
    ), told
    # It went on because it was told: the dev worker's own next look is 30 s away.
    watched = dev.cli("rollout", "status", path, "--namespace", namespace, "--watch", timeout=120)
    assert watched.returncode == 0 and "promoted" in watched.stdout, watched.stdout
    assert asyncio.run(_signals(dev, workflow_id)) == [FREEZE_ENDED_SIGNAL]


def test_freeze_end_ends_it_when_temporal_cannot_be_told(dev: RunningDev) -> None:
    # Directly on dev's store, with Temporal pointed where nothing listens.
    env = {**dev.env, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    namespace = "frz-no-temporal"
    assert _via(dev, env, "start", "--namespace", namespace, "--reason", "r").returncode == 0
    ended = _via(dev, env, "end", "--namespace", namespace)
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert ended.stdout.startswith(f"ended the freeze of namespace {namespace} (r, by ")
    assert ended.stderr.startswith("could not tell the waiting rollouts ("), ended.stderr
    assert ended.stderr.rstrip().endswith("): they go on within 30 s."), ended.stderr
    (shown,) = json.loads(_via(dev, env, "list", "--namespace", namespace, "--json").stdout)
    assert shown["status"] == "ended"


async def _signals(dev: RunningDev, workflow_id: str) -> list[str]:
    client = await Client.connect(dev.temporal_address)
    return [
        event.workflow_execution_signaled_event_attributes.signal_name
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events()
        if event.HasField("workflow_execution_signaled_event_attributes")
    ]


@pytest.mark.parametrize("mode", ["direct", "api"])
@pytest.mark.parametrize(
    ("until", "message"),
    [
        ("yesterday", "is neither an ISO 8601 time with an offset"),
        ("2020-01-01T00:00:00+00:00", "is not in the future"),
        ("2030-01-01T00:00:00", "has no UTC offset"),
        ("0s", "is not in the future"),
    ],
)
def test_a_bad_until_is_refused_and_nothing_is_frozen(
    dev: RunningDev, api_env: dict[str, str], mode: str, until: str, message: str
) -> None:
    env = dev.env if mode == "direct" else api_env
    namespace = f"frz-bad-{mode}"
    refused = _via(dev, env, "start", "--namespace", namespace, "--until", until, "--reason", "x")
    assert refused.returncode == 2
    assert refused.stderr.startswith("tempoconf: --until: until ")
    assert message in refused.stderr
    assert json.loads(_via(dev, env, "list", "--namespace", namespace, "--json").stdout) == []


def test_the_admin_api_refuses_a_bad_until_naming_the_field(dev: RunningDev) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {TOKEN}"}
    answer = httpx.post(
        f"{dev.api_url}/v1/admin/freezes",
        json={"namespace": "frz-http", "reason": "x", "until": "2020-01-01T00:00:00Z"},
        headers=headers,
        timeout=10,
    )
    assert answer.status_code == 400
    assert answer.json()["problems"][0]["pointer"] == "/until"
    missing = httpx.post(
        f"{dev.api_url}/v1/admin/freezes", json={"namespace": "frz-http"}, headers=headers
    )
    assert missing.status_code == 400
    assert missing.json()["problems"][0]["pointer"] == "/reason"
    assert httpx.post(f"{dev.api_url}/v1/admin/freezes", json={"reason": "x"}).status_code == 401
    listed = httpx.get(f"{dev.api_url}/v1/admin/freezes?namespace=frz-http", headers=headers)
    assert listed.json() == {"freezes": []}
