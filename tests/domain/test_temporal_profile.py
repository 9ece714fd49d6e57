"""The Temporal CLI's config file: profiles written by the real `temporal config set`, read into
Settings and the connection as the CLI reads them (the environment wins over the file)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tempoconf.settings import Settings
from tempoconf.settings.temporal_profile import config_file
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.connection import temporal_connection
from tests.fixtures.temporal_config import temporal_config_set


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    file = tmp_path / "ca.pem"
    file.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return file


def test_a_profile_gives_address_namespace_api_key_and_tls(tmp_path: Path, pem: Path) -> None:
    file = tmp_path / "temporal.toml"
    temporal_config_set(
        file,
        "prod",
        {
            "address": "prod.example:7233",
            "namespace": "payments",
            "api_key": "k-123",
            "tls.server_name": "frontend.prod.example",
            "tls.server_ca_cert_path": str(pem),
            "grpc_meta.x_team": "configs",
        },
    )
    temporal_config_set(file, "default", {"address": "127.0.0.1:7999"})
    env = {"TEMPORAL_CONFIG_FILE": str(file)}

    settings = Settings.from_env({**env, "TEMPORAL_PROFILE": "prod"})
    assert (settings.resolved_temporal_address, settings.temporal_namespace) == (
        "prod.example:7233",
        "payments",
    )
    connection = temporal_connection(settings)
    assert connection.where == "Temporal at prod.example:7233 (namespace payments, TLS, API key)"
    assert connection.api_key == "k-123"
    assert connection.rpc_metadata == {"x-team": "configs"}  # a gRPC header name
    assert not isinstance(connection.tls, bool)
    assert connection.tls.domain == "frontend.prod.example"
    assert connection.tls.server_root_ca_cert == pem.read_bytes()

    # No TEMPORAL_PROFILE: the profile named `default`.
    assert Settings.from_env(env).resolved_temporal_address == "127.0.0.1:7999"
    assert temporal_connection(Settings.from_env(env)).tls is False


def test_the_environment_and_flags_win_over_the_file(tmp_path: Path) -> None:
    file = tmp_path / "temporal.toml"
    temporal_config_set(
        file,
        "default",
        {"address": "file.example:7233", "namespace": "from-file", "api_key": "file-key"},
    )
    env = {
        "TEMPORAL_CONFIG_FILE": str(file),
        "TEMPORAL_ADDRESS": "env.example:7233",
        "TEMPORAL_API_KEY": "env-key",
        "TEMPORAL_TLS": "false",
    }
    settings = Settings.from_env(env, temporal_namespace="from-flag")
    assert (settings.resolved_temporal_address, settings.temporal_namespace) == (
        "env.example:7233",
        "from-flag",
    )
    connection = temporal_connection(settings)
    assert (connection.api_key, connection.tls) == ("env-key", False)
    assert Settings.from_env(env).temporal_namespace == "from-file"


def test_a_profile_that_disables_tls_keeps_an_api_key_in_the_clear(tmp_path: Path) -> None:
    file = tmp_path / "temporal.toml"
    temporal_config_set(file, "local", {"api_key": "k", "tls.disabled": "true"})
    env = {"TEMPORAL_CONFIG_FILE": str(file), "TEMPORAL_PROFILE": "local"}
    assert temporal_connection(Settings.from_env(env)).security == "no TLS, API key"


def test_a_missing_profile_or_file_is_an_error_naming_them(tmp_path: Path) -> None:
    file = tmp_path / "temporal.toml"
    temporal_config_set(file, "prod", {"address": "prod.example:7233"})
    with pytest.raises(
        ValueError, match=f"Temporal config file {file} \\(profile staging\\): .*staging"
    ):
        Settings.from_env({"TEMPORAL_CONFIG_FILE": str(file), "TEMPORAL_PROFILE": "staging"})
    nowhere = tmp_path / "none.toml"
    with pytest.raises(
        ValueError,
        match=f"TEMPORAL_PROFILE='prod', but there is no Temporal config file at {nowhere}",
    ):
        Settings.from_env({"TEMPORAL_CONFIG_FILE": str(nowhere), "TEMPORAL_PROFILE": "prod"})
    broken = tmp_path / "broken.toml"
    broken.write_text("[profile.default\naddress = 1\n")
    with pytest.raises(ValueError, match=f"Temporal config file {broken} \\(profile default\\)"):
        Settings.from_env({"TEMPORAL_CONFIG_FILE": str(broken)})


def test_without_a_file_nothing_changes_and_the_cli_s_default_place_is_used(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert Settings.from_env({"HOME": str(home)}).resolved_temporal_address == "127.0.0.1:7233"
    assert config_file({"HOME": str(home)}) == home / ".config" / "temporalio" / "temporal.toml"
    xdg = tmp_path / "xdg"
    assert config_file({"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}) == (
        xdg / "temporalio" / "temporal.toml"
    )
    # Where the Temporal CLI itself writes when told nothing but HOME and XDG_CONFIG_HOME.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "XDG_"))}
    written = subprocess.run(
        [str(temporal_cli_path()), "config", "set", "--prop", "address", "--value", "xdg.example:7233"],
        env={**env, "HOME": str(home), "XDG_CONFIG_HOME": str(xdg)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    settings = Settings.from_env({"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)})
    assert settings.resolved_temporal_address == "xdg.example:7233"
