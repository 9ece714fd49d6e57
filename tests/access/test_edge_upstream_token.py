"""`tempoconf edge` (a real subprocess) with an upstream token and no token of its own: it would
re-serve what that token may read to anyone, so it refuses to start (exit 2, naming the fix),
unless `--public` (or TEMPOCONF_EDGE_PUBLIC=true) says so on purpose: then it serves anonymous
callers, and logs a WARNING that says so. `--public` beside a token of the edge's own is refused
(which of the two is meant?)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.cli.conftest import cli_env, run_cli
from tests.fixtures.access import write_policy
from tests.fixtures.edge import running_edge
from tests.fixtures.services import live_api

pytestmark = pytest.mark.timeout(120)

PATH = "app/limits"
ORIGIN_TOKEN = "origin-client-secret"
# Nothing listens there: each refusal below comes before the edge reaches for its upstream.
NOWHERE = "http://127.0.0.1:9"


def edge(tmp_path: Path, *args: str, **variables: str) -> tuple[int, str]:
    done = run_cli(
        "edge",
        "--upstream",
        NOWHERE,
        "--port",
        "0",
        *args,
        env=cli_env(TEMPOCONF_DATA_DIR=str(tmp_path / "edge"), **variables),
        cwd=tmp_path,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("given", ["flag", "env"])
def test_an_upstream_token_without_a_token_of_its_own_is_refused(
    tmp_path: Path, given: str
) -> None:
    code, output = (
        edge(tmp_path, "--upstream-token", ORIGIN_TOKEN)
        if given == "flag"
        else edge(tmp_path, TEMPOCONF_UPSTREAM_TOKEN=ORIGIN_TOKEN)
    )
    assert code == 2, output
    assert "tempoconf edge: refusing to start: it sends a token upstream" in output, output
    assert "anyone reaching it would read what that token may read" in output, output
    for fix in ("TEMPOCONF_CLIENT_TOKEN", "TEMPOCONF_ACCESS_FILE", "--public"):
        assert fix in output, output
    assert ORIGIN_TOKEN not in output, output


def test_public_beside_a_token_of_its_own_is_refused(tmp_path: Path) -> None:
    code, output = edge(
        tmp_path,
        "--public",
        "--upstream-token",
        ORIGIN_TOKEN,
        TEMPOCONF_CLIENT_TOKEN="edge-secret",
    )
    assert code == 2, output
    assert "--public serves anyone, and TEMPOCONF_CLIENT_TOKEN or TEMPOCONF_ACCESS_FILE" in output
    policy = write_policy(tmp_path / "policy", clients={"fleet": ("fleet-secret", ["team-a"])})
    code, output = edge(tmp_path, TEMPOCONF_EDGE_PUBLIC="true", TEMPOCONF_ACCESS_FILE=str(policy))
    assert code == 2, output
    assert "--public serves anyone" in output, output
    code, output = edge(tmp_path, TEMPOCONF_EDGE_PUBLIC="maybe")
    assert code == 2, output
    assert "TEMPOCONF_EDGE_PUBLIC='maybe': expected true or false" in output, output


@pytest.mark.parametrize("given", ["flag", "env"])
async def test_public_serves_anonymous_callers_on_purpose_and_says_so(
    sqlite_store: Store, tmp_path: Path, given: str
) -> None:
    make_stable(sqlite_store, PATH, {"limit": 1})
    async with (
        live_api(sqlite_store, Settings(client_token=ORIGIN_TOKEN)) as origin,
        running_edge(
            origin,
            tmp_path,
            upstream_token=ORIGIN_TOKEN,
            extra=("--public",) if given == "flag" else (),
            variables={"TEMPOCONF_EDGE_PUBLIC": "true"} if given == "env" else None,
        ) as relay,
        httpx.AsyncClient(timeout=30) as http,
    ):
        # The origin asks for its token; the public edge does not.
        assert (await http.get(f"{origin}/v1/configs/{PATH}")).status_code == 401
        read = await http.get(f"{relay.url}/v1/configs/{PATH}")
        assert read.status_code == 200, read.text
        assert read.json()["value"] == {"limit": 1}
    log = relay.log()
    assert (
        "WARNING tempoconf.cli.edge: tempoconf edge: --public: serving what the upstream token "
        "may read to anyone, without a token" in log
    ), log
