"""Temporal beyond the dev server: the worker, the API and the CLI over TLS with a client
certificate (mTLS) or an API key, set with the Temporal CLI's own variables, so the `temporal`
hints tempoconf prints work in the same shell."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tempoconf.cli.devstack import DevStack
from tempoconf.settings import Settings
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.connection import temporal_connection
from tests.cli.conftest import (
    STARTUP_TIMEOUT_SECONDS,
    TEMPOCONF,
    bash,
    cli_env,
    free_port,
    run_cli,
    unique_path,
    wait_for_output,
)
from tests.fixtures.temporal_config import temporal_config_set
from tests.fixtures.tls import TlsTemporal, tls_temporal
from tests.fixtures.waiting import eventually_sync

API_KEY = f"tc-test-key-{uuid.uuid4().hex}"
ADMIN_TOKEN = "admin-token-of-the-tls-test"
VALUE = {"is_debug": False, "max_connections": 1500}


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsTemporal]:
    with tls_temporal(tmp_path_factory.mktemp("tls"), api_key=API_KEY) as running:
        yield running


def _mtls_env(
    temporal: TlsTemporal, state: Path, *, cert: Path | None = None, key: Path | None = None
) -> dict[str, str]:
    certificates = temporal.certificates
    return cli_env(
        TEMPORAL_ADDRESS=temporal.mtls_address,
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(certificates.ca),
        TEMPORAL_TLS_CLIENT_CERT_PATH=str(cert or certificates.client_cert),
        TEMPORAL_TLS_CLIENT_KEY_PATH=str(key or certificates.client_key),
        TEMPOCONF_DATA_DIR=str(state),
        TEMPOCONF_TASK_QUEUE=f"tempoconf-tls-{uuid.uuid4().hex[:8]}",
    )


def _without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in names}


class Component:
    """`tempoconf worker` or `tempoconf api` in a subprocess, its output in a file."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path, ready: str) -> None:
        self.output = cwd / f"{args[0]}-{uuid.uuid4().hex[:6]}.out"
        with open(self.output, "wb") as sink:
            self.process = subprocess.Popen(
                [str(TEMPOCONF), *args], env=env, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT
            )
        try:
            wait_for_output(self.output, ready, self.process, STARTUP_TIMEOUT_SECONDS)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _create_store(env: dict[str, str], cwd: Path) -> None:
    """The store the worker and the API refuse to create: `tempoconf db upgrade` makes it."""
    upgraded = run_cli("db", "upgrade", env=env, cwd=cwd)
    assert upgraded.returncode == 0, upgraded.stderr


def _request(tmp_path: Path, name: str, request: dict[str, Any]) -> Path:
    file = tmp_path / f"{name}.json"
    file.write_text(json.dumps(request))
    return file


def _status(path: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    result = run_cli("rollout", "status", path, "--json", env=env, cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(json.loads(result.stdout))


def _wait_for(
    path: str,
    env: dict[str, str],
    cwd: Path,
    *,
    state: str | None = None,
    outcome: str | None = None,
) -> dict[str, Any]:
    def reached() -> dict[str, Any]:
        status = _status(path, env, cwd)
        if state is not None:
            assert status["state"] == state, f"{status['state']} ({status['phase']})"
        if outcome is not None:
            assert status.get("outcome") == outcome, status
        return status

    return eventually_sync(
        reached, what=f"{path}: state {state}, outcome {outcome}", timeout=60, interval=0.5
    )


def test_mtls_worker_cli_api_and_temporal_hints(temporal: TlsTemporal, tmp_path: Path) -> None:
    env = _mtls_env(temporal, tmp_path / "state")
    _create_store(env, tmp_path)
    metrics_address = f"127.0.0.1:{free_port()}"
    worker = Component(
        ["worker"],
        {**env, "TEMPOCONF_SDK_METRICS_ADDRESS": metrics_address},
        tmp_path,
        ready="polling task queue",
    )
    try:
        path = unique_path("tls")
        staged = _request(
            tmp_path,
            "staged",
            {
                "path": path,
                "value": VALUE,
                "stages": [
                    {"channel": "canary", "cooldown": "1h"},
                    {"percentile": 10, "cooldown": "1h"},
                ],
                "message": "over mTLS",
            },
        )

        # No TLS settings: a clear refusal that says which variables a TLS server needs.
        plain = run_cli(
            "rollout", "start", staged, cwd=tmp_path,
            env=_without(env, "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_PATH",
                         "TEMPORAL_TLS_CLIENT_KEY_PATH"),
        )  # fmt: skip
        assert plain.returncode == 1, plain.stdout + plain.stderr
        assert (
            f"cannot reach Temporal at {temporal.mtls_address} (namespace default, no TLS): "
            in plain.stderr
        )
        # Which of the two the SDK reports depends on when nginx closes the plain connection.
        assert "TLS server" in plain.stderr and "not use TLS" in plain.stderr, plain.stderr
        assert "TEMPORAL_TLS_SERVER_CA_CERT_PATH" in plain.stderr
        assert "TEMPORAL_TLS_CLIENT_CERT_PATH" in plain.stderr

        # TLS but no client certificate, or one of another CA: refused by the server.
        no_cert = run_cli(
            "rollout", "start", staged, cwd=tmp_path,
            env=_without(env, "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"),
        )  # fmt: skip
        assert no_cert.returncode == 1, no_cert.stdout + no_cert.stderr
        assert f"cannot reach Temporal at {temporal.mtls_address} (namespace default, TLS): " in (
            no_cert.stderr
        )
        assert (
            "if it requires a client certificate (mTLS), set TEMPORAL_TLS_CLIENT_CERT_PATH and "
            "TEMPORAL_TLS_CLIENT_KEY_PATH" in no_cert.stderr
        )
        stranger = run_cli(
            "rollout", "start", staged, cwd=tmp_path,
            env=_mtls_env(temporal, tmp_path / "state", cert=temporal.certificates.stranger_cert,
                          key=temporal.certificates.stranger_key),
        )  # fmt: skip
        assert stranger.returncode == 1, stranger.stdout + stranger.stderr
        assert (
            "(namespace default, TLS, client certificate): the server refused the client "
            "certificate" in stranger.stderr
        )
        unreadable = run_cli(
            "rollout", "start", staged, cwd=tmp_path,
            env={**env, "TEMPORAL_TLS_CLIENT_KEY_PATH": str(tmp_path / "missing.key")},
        )  # fmt: skip
        assert unreadable.returncode == 2
        assert (
            f"cannot read TEMPORAL_TLS_CLIENT_KEY_PATH {tmp_path / 'missing.key'}: "
            "No such file or directory" in unreadable.stderr
        )
        nothing = run_cli("rollout", "status", path, env=env, cwd=tmp_path)
        assert "no rollout of default/" in nothing.stderr  # none of them started anything

        # With the certificate: start, status, a steering verb, and the Temporal CLI's hint.
        started = run_cli("rollout", "start", staged, env=env, cwd=tmp_path)
        assert started.returncode == 0, started.stdout + started.stderr
        _wait_for(path, env, tmp_path, state="holding")
        advanced = run_cli(
            "rollout", "advance", path, "--reason", "canaries fine", env=env, cwd=tmp_path
        )
        assert advanced.returncode == 0, advanced.stdout + advanced.stderr
        assert "  stage   2/2 10%" in advanced.stdout
        view = run_cli("rollout", "status", path, env=env, cwd=tmp_path)
        assert view.returncode == 0, view.stdout + view.stderr
        bypass_hint = next(
            line.strip()
            for line in view.stdout.splitlines()
            if "workflow signal" in line and "--name bypass" in line
        )
        hinted = bash(bypass_hint.replace("'...'", "'via the temporal CLI'"), cwd=tmp_path, env=env)
        assert hinted.returncode == 0, hinted.stdout + hinted.stderr
        _wait_for(path, env, tmp_path, outcome="bypassed")

        # The worker's SDK metrics: the Temporal SDK's own series, on the address given.
        def sdk_series() -> str:
            text = httpx.get(f"http://{metrics_address}/metrics", timeout=5).text
            assert "temporal_workflow_completed" in text, text[:2000]
            return text

        metrics = eventually_sync(sdk_series, what="the SDK's workflow_completed counter")
        assert "temporal_request" in metrics
        # The labels deploy/prometheus/alerts.yml selects the SDK's failure counters by (there
        # task_queue="tempoconf", the compose file's queue; here this test's own).
        lines = metrics.splitlines()
        queue = f'task_queue="{env["TEMPOCONF_TASK_QUEUE"]}"'
        assert any(
            line.startswith("temporal_workflow_completed{")
            and all(
                label in line
                for label in (
                    'namespace="default"',
                    queue,
                    'workflow_type="ConfigRollout"',
                )
            )
            for line in lines
        ), [line for line in lines if line.startswith("temporal_workflow_")]
        assert any(
            line.startswith("temporal_activity_execution_latency")
            and queue in line
            and 'activity_type="' in line
            for line in lines
        ), [line for line in lines if line.startswith("temporal_activity_")]

        # The API over the same TLS settings: an admin route that asks the workflow, and a halt.
        api_port = free_port()
        api = Component(
            ["api", "--port", str(api_port)],
            {**env, "TEMPOCONF_ADMIN_TOKEN": ADMIN_TOKEN},
            tmp_path,
            ready="API: listening",
        )
        try:
            held = unique_path("tls-api")
            admin = httpx.Client(
                base_url=f"http://127.0.0.1:{api_port}",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                timeout=30,
            )
            created = admin.post(
                "/v1/admin/rollouts",
                json={
                    "path": held,
                    "value": VALUE,
                    "stages": [{"channel": "canary", "cooldown": "1h"}],
                },
            )
            assert created.status_code in (200, 201, 202), created.text

            def holding() -> dict[str, Any]:
                answer = admin.get(f"/v1/admin/rollouts/{quote(held)}")
                assert answer.status_code == 200, answer.text
                body = dict(answer.json())
                assert body["workflow"]["status"]["state"] == "holding", body
                return body

            eventually_sync(
                holding, what="the API to see the rollout holding", timeout=60, interval=0.5
            )
            halted = admin.post(
                f"/v1/admin/rollouts/{quote(held)}:halt", json={"reason": "over TLS"}
            )
            assert halted.status_code == 200, halted.text
            _wait_for(held, env, tmp_path, state="halted")

            # A halted rollout fails its workflow: the counter TempoconfRolloutsFailing reads.
            def failed_series() -> list[str]:
                text = httpx.get(f"http://{metrics_address}/metrics", timeout=5).text
                failed = [
                    line
                    for line in text.splitlines()
                    if line.startswith("temporal_workflow_failed{")
                    and queue in line
                    and 'workflow_type="ConfigRollout"' in line
                    and 'namespace="default"' in line
                ]
                assert failed, [line for line in text.splitlines() if "workflow_failed" in line]
                return failed

            eventually_sync(failed_series, what="the SDK's workflow_failed counter")
        finally:
            api.stop()
    finally:
        worker.stop()


def test_api_key_worker_and_cli(temporal: TlsTemporal, tmp_path: Path) -> None:
    env = cli_env(
        TEMPORAL_ADDRESS=temporal.api_key_address,
        TEMPORAL_API_KEY=temporal.api_key,
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(temporal.certificates.ca),
        TEMPOCONF_DATA_DIR=str(tmp_path / "state"),
        TEMPOCONF_TASK_QUEUE=f"tempoconf-tls-{uuid.uuid4().hex[:8]}",
    )
    _create_store(env, tmp_path)
    worker = Component(["worker"], env, tmp_path, ready="polling task queue")
    try:
        path = unique_path("key")
        request = _request(tmp_path, "stable", {"path": path, "value": VALUE})

        missing = run_cli(
            "rollout", "start", request, env=_without(env, "TEMPORAL_API_KEY"), cwd=tmp_path
        )
        assert missing.returncode == 1, missing.stdout + missing.stderr
        assert (
            f"cannot reach Temporal at {temporal.api_key_address} (namespace default, TLS): "
            in missing.stderr
        )
        assert "the server refused the credentials: check TEMPORAL_API_KEY" in missing.stderr
        wrong_key = f"wrong-{uuid.uuid4().hex}"
        wrong = run_cli(
            "rollout", "start", request, env={**env, "TEMPORAL_API_KEY": wrong_key}, cwd=tmp_path
        )
        assert wrong.returncode == 1, wrong.stdout + wrong.stderr
        assert "(namespace default, TLS, API key): the server refused the credentials" in (
            wrong.stderr
        )
        assert wrong_key not in wrong.stdout + wrong.stderr

        started = run_cli("rollout", "start", request, "--wait", env=env, cwd=tmp_path)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "outcome: promoted" in started.stdout
        assert temporal.api_key not in started.stdout + started.stderr

        # The Temporal CLI reads the same variables: describe the workflow tempoconf started.
        described = subprocess.run(
            [str(temporal_cli_path()), "workflow", "describe", "-w", f"rollout:default/{path}"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert described.returncode == 0, described.stdout + described.stderr
        assert "promoted directly" in described.stdout  # the result of the run
    finally:
        worker.stop()


def test_unusable_settings_stop_the_api_and_the_worker_at_once(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    env = cli_env(
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(missing), TEMPOCONF_DATA_DIR=str(tmp_path / "state")
    )
    api = run_cli("api", "--port", str(free_port()), env=env, cwd=tmp_path)
    assert api.returncode == 2, api.stdout + api.stderr
    assert (
        f"tempoconf api: cannot read TEMPORAL_TLS_SERVER_CA_CERT_PATH {missing}: "
        "No such file or directory" in api.stderr
    )
    worker = run_cli(
        "worker", "--sdk-metrics-address", "localhost:9465", env=cli_env(), cwd=tmp_path
    )
    assert worker.returncode == 2, worker.stdout + worker.stderr
    assert (
        "tempoconf worker: SDK metrics address 'localhost:9465' (TEMPOCONF_SDK_METRICS_ADDRESS"
        in (worker.stderr)
    )


def test_the_dev_stack_ignores_tls_settings_meant_for_another_cluster() -> None:
    shell = Settings.from_env({"TEMPORAL_API_KEY": "for-the-cloud", "TEMPORAL_TLS": "true"})
    assert temporal_connection(DevStack(shell).settings).tls is False


def test_a_temporal_cli_profile_serves_tempoconf_and_the_cli_alike(
    temporal: TlsTemporal, tmp_path: Path
) -> None:
    """`temporal config set` writes a profile of the mTLS server (address, certificates); with
    only TEMPORAL_PROFILE set, tempoconf reaches the server over mTLS, as the CLI does."""
    file = tmp_path / "temporal.toml"
    certificates = temporal.certificates
    base = cli_env(TEMPOCONF_DATA_DIR=str(tmp_path / "state"), TEMPORAL_CONFIG_FILE=str(file))
    temporal_config_set(
        file,
        "mtls",
        {
            "address": temporal.mtls_address,
            "tls.server_ca_cert_path": str(certificates.ca),
            "tls.client_cert_path": str(certificates.client_cert),
            "tls.client_key_path": str(certificates.client_key),
        },
    )
    _create_store(base, tmp_path)
    path = unique_path("profile")
    env = {**base, "TEMPORAL_PROFILE": "mtls"}

    status = run_cli("rollout", "status", path, env=env, cwd=tmp_path)
    # It asked the server (over mTLS, with the certificate): there is no such rollout.
    assert f"no rollout of default/{path}" in status.stderr, status.stdout + status.stderr
    assert "cannot reach" not in status.stderr
    listed = subprocess.run(
        [str(temporal_cli_path()), "workflow", "list", "--limit", "1"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr

    # A profile without the client certificate is refused: the profile's is what let it in.
    temporal_config_set(
        file,
        "nocert",
        {"address": temporal.mtls_address, "tls.server_ca_cert_path": str(certificates.ca)},
    )
    without = run_cli(
        "rollout", "status", path, env={**base, "TEMPORAL_PROFILE": "nocert"}, cwd=tmp_path
    )
    assert f"cannot reach Temporal at {temporal.mtls_address} (namespace default, TLS)" in (
        without.stderr
    ), without.stdout + without.stderr
    # And `tempoconf dev` keeps to its own server whatever the profile says.
    profiled = Settings.from_env(env)
    assert profiled.resolved_temporal_address == temporal.mtls_address
    assert temporal_connection(DevStack(profiled).settings).tls is False
