"""One settings object, from flags then environment (docs/contract.md, Settings)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tempoconf.settings.temporal_profile import with_temporal_profile

__all__ = ["Settings"]

# Settings fields of their own (flags win over them); every other TEMPORAL_* goes to temporal_env.
_ADDRESS_VARIABLES = ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE")


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path(".tempoconf")
    host: str = "127.0.0.1"
    temporal_port: int = 7233
    ui_port: int = 8233
    api_port: int = 8080
    temporal_address: str | None = None
    """`TEMPORAL_ADDRESS`; None means the local dev server at host:temporal_port."""
    temporal_namespace: str = "default"
    task_queue: str = "tempoconf"
    database_url: str | None = None
    """`TEMPOCONF_DATABASE_URL`; None means SQLite in the data dir."""
    api_url: str | None = None
    """`TEMPOCONF_API_URL`; None means http://host:api_port."""
    admin_token: str | None = None
    api_token: str | None = field(default=None, repr=False)
    """`TEMPOCONF_API_TOKEN`: the bearer token the operator commands send the admin API as is (a
    static token or an OIDC access token); wins over `admin_token` (cli/_api_token.py)."""
    api_token_command: str | None = field(default=None, repr=False)
    """`TEMPOCONF_API_TOKEN_COMMAND`: a shell command that prints that token (as kubectl's exec
    credential plugins do), run once per command that needs it; wins over `api_token`."""
    admin_tokens: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """`TEMPOCONF_ADMIN_TOKENS` (`alice:secret1,bob:secret2`): named admin tokens (name, token).
    The API acts as the name of the token a request carries (who approves, docs/contract.md)."""
    client_token: str | None = None
    access_file: Path | None = None
    """`TEMPOCONF_ACCESS_FILE`: the access policy (tempoconf.access.policy); None is the
    single-team mode, where the admin and client tokens above guard everything."""
    ui_url: str | None = None
    """`TEMPOCONF_UI_URL`, the Temporal Web UI for links; None means http://host:ui_port."""
    deployment_name: str | None = None
    """`TEMPOCONF_DEPLOYMENT_NAME`: the worker's Worker Deployment; None means an unversioned worker."""
    build_id: str | None = None
    """`TEMPOCONF_BUILD_ID`, the worker's build within its deployment; None means one derived
    from the package's version and code (only used with a deployment name)."""
    sdk_metrics_address: str | None = None
    """`TEMPOCONF_SDK_METRICS_ADDRESS`: where the worker serves the Temporal SDK's own metrics
    (IP:PORT, `/metrics`); None means not at all."""
    temporal_env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """The other `TEMPORAL_*` variables (TLS, client certificate, API key: the Temporal CLI's
    names), read by `tempoconf.temporal.connection`; kept out of repr, they hold secrets."""
    api_header_timeout: float = 10.0
    """`TEMPOCONF_API_HEADER_TIMEOUT`: seconds a client may take to send a request's head."""
    api_body_timeout: float = 10.0
    """`TEMPOCONF_API_BODY_TIMEOUT`: seconds a client may take to send a request's body."""
    api_keep_alive_timeout: float = 75.0
    """`TEMPOCONF_API_KEEP_ALIVE_TIMEOUT`: seconds an idle keep-alive connection stays open. Longer
    than clients' own idle limits (httpx 5 s, load balancers' 60 s), so that a client, never the
    server, closes an idle connection: a request sent on a connection the server is closing at
    that instant fails on the client with no answer."""
    sweep_interval: float = 5.0
    """`TEMPOCONF_SWEEP_INTERVAL`: seconds between the worker's sweeps for rollouts whose workflow
    ended without its own end (terminated, timed out): their final audit entry and lock release
    follow within about this long."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Environment first, then any non-None override (flags win over environment). The
        Temporal CLI's config file fills in the `TEMPORAL_*` variables the environment leaves
        unset (`tempoconf.settings.temporal_profile`)."""
        env = with_temporal_profile(os.environ if environ is None else environ)
        settings = cls(
            data_dir=Path(env.get("TEMPOCONF_DATA_DIR", ".tempoconf")),
            temporal_address=env.get("TEMPORAL_ADDRESS") or None,
            temporal_namespace=env.get("TEMPORAL_NAMESPACE") or "default",
            task_queue=env.get("TEMPOCONF_TASK_QUEUE") or "tempoconf",
            database_url=env.get("TEMPOCONF_DATABASE_URL") or None,
            api_url=env.get("TEMPOCONF_API_URL") or None,
            admin_token=env.get("TEMPOCONF_ADMIN_TOKEN") or None,
            api_token=env.get("TEMPOCONF_API_TOKEN", "").strip() or None,
            api_token_command=env.get("TEMPOCONF_API_TOKEN_COMMAND", "").strip() or None,
            admin_tokens=_named_tokens(env, "TEMPOCONF_ADMIN_TOKENS"),
            client_token=env.get("TEMPOCONF_CLIENT_TOKEN") or None,
            access_file=Path(env["TEMPOCONF_ACCESS_FILE"])
            if env.get("TEMPOCONF_ACCESS_FILE")
            else None,
            ui_url=env.get("TEMPOCONF_UI_URL") or None,
            deployment_name=env.get("TEMPOCONF_DEPLOYMENT_NAME") or None,
            build_id=env.get("TEMPOCONF_BUILD_ID") or None,
            sdk_metrics_address=env.get("TEMPOCONF_SDK_METRICS_ADDRESS") or None,
            temporal_env=tuple(
                sorted(
                    (name, value)
                    for name, value in env.items()
                    if name.startswith("TEMPORAL_") and name not in _ADDRESS_VARIABLES and value
                )
            ),
            api_header_timeout=_seconds(env, "TEMPOCONF_API_HEADER_TIMEOUT", 10.0),
            api_body_timeout=_seconds(env, "TEMPOCONF_API_BODY_TIMEOUT", 10.0),
            api_keep_alive_timeout=_seconds(env, "TEMPOCONF_API_KEEP_ALIVE_TIMEOUT", 75.0),
            sweep_interval=_seconds(env, "TEMPOCONF_SWEEP_INTERVAL", 5.0),
        )
        given = {key: value for key, value in overrides.items() if value is not None}
        if "data_dir" in given:
            given["data_dir"] = Path(given["data_dir"])
        return replace(settings, **given)

    @property
    def resolved_temporal_address(self) -> str:
        return self.temporal_address or f"{self.host}:{self.temporal_port}"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'tempoconf.db').resolve()}"

    @property
    def resolved_ui_url(self) -> str:
        return (self.ui_url or f"http://{self.host}:{self.ui_port}").rstrip("/")

    @property
    def resolved_api_url(self) -> str:
        return (self.api_url or f"http://{self.host}:{self.api_port}").rstrip("/")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive number of seconds from the environment, or ValueError naming the variable."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise ValueError(f"{name}={raw!r}: expected a number of seconds greater than 0")
    return seconds


def _named_tokens(env: Mapping[str, str], name: str) -> tuple[tuple[str, str], ...]:
    """`name:token` pairs, comma-separated, or ValueError naming the variable (never the
    tokens): names unique, tokens unique (one token, one identity)."""
    raw = env.get(name, "").strip()
    if not raw:
        return ()
    pairs: list[tuple[str, str]] = []
    for position, item in enumerate(raw.split(","), start=1):
        who, colon, token = item.strip().partition(":")
        who, token = who.strip(), token.strip()
        if not colon or not who or not token:
            raise ValueError(
                f"{name}: entry {position} is not NAME:TOKEN (expected e.g. alice:s3cret,bob:t0ken)"
            )
        if any(who == known for known, _ in pairs):
            raise ValueError(f"{name}: the name {who!r} is given twice")
        if any(token == known for _, known in pairs):
            raise ValueError(f"{name}: entry {position} repeats the token of another name")
        pairs.append((who, token))
    return tuple(pairs)
