"""`tempoconf dev` under an access policy: its banner says so (what the policy holds, counted;
how tempoconf in another shell meets it), never a secret; and a real `tempoconf dev` takes
SIGHUP as the API's reload, not as the end of the stack."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx

from tempoconf.cli.devstack import DevStack
from tempoconf.settings import Settings
from tests.cli.conftest import start_dev
from tests.fixtures.access import write_policy
from tests.fixtures.waiting import eventually_sync

ISSUER = "https://login.example.test/realms/ops"


def test_the_banner_says_the_policy_is_on_and_what_it_holds_never_a_secret(
    tmp_path: Path,
) -> None:
    policy = write_policy(
        tmp_path,
        tokens={
            "alice": ("alice-secret", [(["*"], ["admin"])]),
            "bob": ("bob-secret", [(["team-a"], ["approver"])]),
        },
        clients={"fleet-a": ("fleet-a-secret", ["team-a"])},
        oidc={"issuer": ISSUER, "audience": "tempoconf"},
    )
    banner = DevStack(Settings(access_file=policy)).banner()
    assert (
        f"Access policy on ({policy}): 2 operator token(s), 1 client(s), OpenID issuer {ISSUER};"
        in banner
    ), banner
    assert (
        "goes through the API with TEMPOCONF_API_TOKEN=<token> (or TEMPOCONF_API_TOKEN_COMMAND)"
        in banner
    )
    assert (
        "with the export line alone it reads the store and Temporal directly, outside the policy"
        in banner
    )
    assert "approvals go through the API (they are signed)" in banner
    assert "Admin tokens are on" not in banner
    digests = [entry["secret_sha256"] for entry in json.loads(policy.read_text())["tokens"]]
    for secret in ("alice-secret", "bob-secret", "fleet-a-secret", *digests):
        assert secret not in banner
    assert "signing.pem" not in banner
    assert banner.index("Access policy on") < banner.index("Ctrl-C stops")

    # without an OpenID provider, none is named; a file broken since start is said to be so
    clients_only = write_policy(tmp_path / "b", clients={"fleet-a": ("s", ["team-a"])})
    plain = DevStack(Settings(access_file=clients_only)).banner()
    assert "0 operator token(s), 1 client(s);" in plain, plain
    assert "OpenID" not in plain
    clients_only.write_text("{")
    broken = DevStack(Settings(access_file=clients_only)).banner()
    assert "its file does not load now (1 problem(s))" in broken, broken


def test_dev_under_a_policy_prints_it_and_reloads_on_sighup(tmp_path: Path) -> None:
    folder = tmp_path / "policy"
    policy = write_policy(folder, clients={"fleet-a": ("fleet-a-secret", ["team-a"])})
    rotated = write_policy(
        tmp_path / "rotated", clients={"fleet-a": ("fleet-a-rotated", ["team-a"])}
    )
    dev = start_dev(tmp_path, variables={"TEMPOCONF_ACCESS_FILE": str(policy)})
    try:
        output = dev.output.read_text()
        assert (
            f"Access policy on ({policy.relative_to(tmp_path)}): 0 operator token(s), 1 client(s);"
            in output
        ), output

        def status(secret: str) -> int:
            return httpx.get(
                f"{dev.api_url}/v1/configs/app/missing",
                params={"namespace": "team-a"},
                headers={"Authorization": f"Bearer {secret}"},
                timeout=10,
            ).status_code

        assert status("fleet-a-secret") == 404  # known, may read team-a: the config is unknown
        assert status("fleet-a-rotated") == 401
        # Rotated in place with the stamp kept (mtime, size, inode): only SIGHUP can reload it.
        before = os.stat(policy)
        with open(policy, "r+b") as file:
            file.write(rotated.read_bytes())
        os.utime(policy, ns=(before.st_atime_ns, before.st_mtime_ns))
        time.sleep(1.5)
        assert status("fleet-a-secret") == 404

        dev.process.send_signal(signal.SIGHUP)
        eventually_sync(lambda: status("fleet-a-rotated") == 404, what="the reload", timeout=3)
        assert status("fleet-a-secret") == 401
        assert dev.process.poll() is None, dev.output.read_text()
    finally:
        assert dev.stop() == 0, dev.output.read_text()


def test_dev_without_a_policy_outlives_sighup(tmp_path: Path) -> None:
    """SIGHUP's default action would end the stack (a terminal's hangup goes to the foreground
    process group: it is the API's reload signal here, and only noted without a policy)."""
    dev = start_dev(tmp_path)
    try:
        dev.process.send_signal(signal.SIGHUP)
        eventually_sync(
            lambda: "SIGHUP: no access policy is being served" in dev.output.read_text(),
            what="the SIGHUP noted",
            timeout=10,
        )
        assert dev.process.poll() is None, dev.output.read_text()
        assert httpx.get(f"{dev.api_url}/healthz", timeout=10).status_code == 200
    finally:
        assert dev.stop() == 0, dev.output.read_text()
