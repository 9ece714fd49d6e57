"""The Temporal CLI's config file (`temporal config set`), read as the CLI reads it.

The file (`TEMPORAL_CONFIG_FILE`, else `temporal.toml` in `$XDG_CONFIG_HOME/temporalio` or
`~/.config/temporalio`) holds named profiles; `TEMPORAL_PROFILE` picks one (default `default`).
Its values become the `TEMPORAL_*` variables they stand for, wherever the environment does not set
those itself (the environment wins, as for the CLI), so everything downstream reads variables only
(`Settings`, `tempoconf.temporal.connection`). The SDK's own `temporalio.envconfig` parses the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from temporalio.envconfig import DataSource

__all__ = ["config_file", "with_temporal_profile"]

# The PEM sources of a profile's `tls` table and the variables (`_PATH` or `_DATA`) they stand for.
_PEM_VARIABLES = {
    "server_root_ca_cert": "TEMPORAL_TLS_SERVER_CA_CERT",
    "client_cert": "TEMPORAL_TLS_CLIENT_CERT",
    "client_private_key": "TEMPORAL_TLS_CLIENT_KEY",
}


def config_file(env: Mapping[str, str]) -> Path:
    """Where the Temporal CLI looks for its config file, in the environment `env`."""
    named = env.get("TEMPORAL_CONFIG_FILE", "").strip()
    if named:
        return Path(named).expanduser()
    base = env.get("XDG_CONFIG_HOME", "").strip() or str(
        Path(env.get("HOME") or Path.home()) / ".config"
    )
    return Path(base) / "temporalio" / "temporal.toml"


def with_temporal_profile(env: Mapping[str, str]) -> Mapping[str, str]:
    """`env` with the selected profile's values added as the variables they stand for, where `env`
    sets none of its own; `env` itself when there is no config file. ValueError (naming the file
    and the profile) when the file cannot be read or has no such profile."""
    path = config_file(env)
    profile_name = env.get("TEMPORAL_PROFILE", "").strip()
    if not path.is_file():
        if profile_name:
            raise ValueError(
                f"TEMPORAL_PROFILE={profile_name!r}, but there is no Temporal config file at "
                f"{path} (TEMPORAL_CONFIG_FILE, or `temporal config set` creates it)"
            )
        return env
    from temporalio.envconfig import ClientConfigProfile

    try:
        profile = ClientConfigProfile.load(
            profile=profile_name or None, config_source=path, disable_env=True
        )
    except Exception as error:  # the SDK's ConfigError: unreadable TOML, no such profile
        raise ValueError(
            f"Temporal config file {path} (profile {profile_name or 'default'}): {error}"
        ) from None
    found: dict[str, str] = {}
    if profile.address:
        found["TEMPORAL_ADDRESS"] = profile.address
    if profile.namespace:
        found["TEMPORAL_NAMESPACE"] = profile.namespace
    if profile.api_key:
        found["TEMPORAL_API_KEY"] = profile.api_key
    if profile.tls is not None:
        # A `tls` table turns TLS on unless it says `disabled = true`, as for the CLI.
        found["TEMPORAL_TLS"] = "false" if profile.tls.disabled else "true"
        if profile.tls.server_name:
            found["TEMPORAL_TLS_SERVER_NAME"] = profile.tls.server_name
        for field, variable in _PEM_VARIABLES.items():
            _add_pem(found, variable, getattr(profile.tls, field), env)
    for name, value in profile.grpc_meta.items():
        found[f"TEMPORAL_GRPC_META_{name.upper().replace('-', '_')}"] = value
    missing = {name: value for name, value in found.items() if not env.get(name)}
    return {**env, **missing} if missing else env


def _add_pem(
    found: dict[str, str], variable: str, source: DataSource | None, env: Mapping[str, str]
) -> None:
    """The profile's PEM as `<variable>_PATH` (a file) or `_DATA`, unless the environment names
    either: a certificate and its source come from one place."""
    if source is None or env.get(f"{variable}_PATH") or env.get(f"{variable}_DATA"):
        return
    if isinstance(source, Path):
        found[f"{variable}_PATH"] = str(source)
    else:
        found[f"{variable}_DATA"] = source if isinstance(source, str) else source.decode()
