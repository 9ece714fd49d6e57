"""The Temporal connection settings: the Temporal CLI's variables, read as the CLI reads them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from temporalio.service import TLSConfig

from tempoconf.settings import Settings
from tempoconf.temporal.connection import (
    TemporalConnection,
    TemporalSettingsError,
    sdk_metrics_runtime,
    temporal_connection,
)

SECRET = "tc-api-key-do-not-print-0123456789"


def _connection(**env: str) -> TemporalConnection:
    return temporal_connection(Settings.from_env(env))


def test_no_tls_variables_is_a_plain_connection_to_the_address_and_namespace() -> None:
    connection = _connection(TEMPORAL_ADDRESS="temporal:7233", TEMPORAL_NAMESPACE="prod")
    assert (connection.target_host, connection.namespace) == ("temporal:7233", "prod")
    assert connection.tls is False and connection.api_key is None
    assert connection.where == "Temporal at temporal:7233 (namespace prod, no TLS)"


def test_flags_win_over_the_environment_for_address_and_namespace() -> None:
    settings = Settings.from_env(
        {
            "TEMPORAL_ADDRESS": "env:7233",
            "TEMPORAL_NAMESPACE": "env-ns",
            "TEMPORAL_API_KEY": SECRET,
        },
        temporal_address="flag:7233",
        temporal_namespace="flag-ns",
    )
    connection = temporal_connection(settings)
    assert (connection.target_host, connection.namespace) == ("flag:7233", "flag-ns")
    assert connection.api_key == SECRET


def test_an_api_key_turns_tls_on_unless_tls_is_set_false() -> None:
    with_key = _connection(TEMPORAL_API_KEY=SECRET)
    assert with_key.tls is True and with_key.api_key == SECRET
    assert with_key.security == "TLS, API key"
    without_tls = _connection(TEMPORAL_API_KEY=SECRET, TEMPORAL_TLS="false")
    assert without_tls.tls is False and without_tls.security == "no TLS, API key"


def test_the_secret_is_in_no_repr_and_no_description() -> None:
    settings = Settings.from_env({"TEMPORAL_API_KEY": SECRET})
    connection = temporal_connection(settings)
    for text in (repr(settings), repr(connection), connection.where):
        assert SECRET not in text
    assert connection.redact(f"refused {SECRET}!") == "refused ***!"


def test_certificate_paths_are_read_into_the_tls_config(tmp_path: Path) -> None:
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text(f"PEM of {name}")
    connection = _connection(
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(tmp_path / "ca.pem"),
        TEMPORAL_TLS_CLIENT_CERT_PATH=str(tmp_path / "client.pem"),
        TEMPORAL_TLS_CLIENT_KEY_PATH=str(tmp_path / "client.key"),
        TEMPORAL_TLS_SERVER_NAME="temporal.internal",
    )
    assert connection.tls == TLSConfig(
        server_root_ca_cert=b"PEM of ca.pem",
        client_cert=b"PEM of client.pem",
        client_private_key=b"PEM of client.key",
        domain="temporal.internal",
    )
    assert connection.security == "TLS, client certificate"


def test_inline_certificate_data_works_as_the_paths_do() -> None:
    connection = _connection(
        TEMPORAL_TLS_SERVER_CA_CERT_DATA="ca data",
        TEMPORAL_TLS_CLIENT_CERT_DATA="cert data",
        TEMPORAL_TLS_CLIENT_KEY_DATA="key data",
    )
    assert isinstance(connection.tls, TLSConfig)
    assert (connection.tls.server_root_ca_cert, connection.tls.client_private_key) == (
        b"ca data",
        b"key data",
    )


def test_a_missing_certificate_file_names_the_variable_and_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(TemporalSettingsError) as raised:
        _connection(TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(missing))
    assert str(raised.value) == (
        f"cannot read TEMPORAL_TLS_SERVER_CA_CERT_PATH {missing}: No such file or directory"
    )


def test_a_client_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "client.pem").write_text("PEM")
    with pytest.raises(TemporalSettingsError, match="TEMPORAL_TLS_CLIENT_CERT_PATH .* is set but "
                       "TEMPORAL_TLS_CLIENT_KEY_PATH"):  # fmt: skip
        _connection(TEMPORAL_TLS_CLIENT_CERT_PATH=str(tmp_path / "client.pem"))


def test_disabling_host_verification_is_refused_with_the_alternative() -> None:
    with pytest.raises(TemporalSettingsError, match="TEMPORAL_TLS_SERVER_NAME"):
        _connection(TEMPORAL_TLS="true", TEMPORAL_TLS_DISABLE_HOST_VERIFICATION="true")


def test_a_tls_switch_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(TemporalSettingsError) as raised:
        _connection(TEMPORAL_TLS="maybe", TEMPORAL_API_KEY=SECRET)
    assert str(raised.value) == "TEMPORAL_TLS is 'maybe': give true or false"
    assert _connection(TEMPORAL_TLS="").tls is False  # empty is unset, as every other setting


def test_grpc_metadata_variables_become_request_metadata() -> None:
    connection = _connection(TEMPORAL_GRPC_META_X_TENANT="blue")
    assert dict(connection.rpc_metadata) == {"x-tenant": "blue"}


def test_a_bad_sdk_metrics_address_names_the_setting() -> None:
    with pytest.raises(TemporalSettingsError, match="TEMPOCONF_SDK_METRICS_ADDRESS") as raised:
        sdk_metrics_runtime("localhost")
    assert "'localhost'" in str(raised.value)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        with pytest.raises(TemporalSettingsError, match="Address already in use"):
            sdk_metrics_runtime(address)
