"""docs/how-to/access.md, run as written in a clone: the policy made with `cp`, `openssl` and
`sha256sum`, a `tempoconf dev` started with it, each role's commands exiting and printing as the
guide says, the fleet's reads with curl, the CI token's scope, /metrics for the scraper token only
(the scrape config itself runs in tests/access/test_metrics_access.py), and the OpenID section against a
real provider (npm's oidc-provider) standing in for the guide's `https://login.example.com`."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tempoconf.access.policy import parse_policy
from tests.cli.conftest import RunningDev, bash, page, shell_blocks, start_dev
from tests.cli.howto import make_clone, quoted, run
from tests.fixtures.oidc import OidcClient, running_oidc_provider
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(300)

GUIDE_ISSUER = "https://login.example.com"
DEV = "TEMPOCONF_ACCESS_FILE=access/policy.json .venv/bin/tempoconf dev"


def test_the_guides_token_with_emails_is_a_policy_token() -> None:
    """The four-eyes section's token entry, its elisions filled in, is what the policy takes."""
    text = page("how-to/access.md")
    section = text.split("\n## Tell four eyes who is who\n", 1)[1].split("\n## ", 1)[0]
    [fragment] = re.findall(r"```json\n(.*?)```", section, re.S)
    entry = json.loads(
        fragment.replace('"…"', '"' + "0" * 64 + '"').replace(
            "[…]", '[{"namespaces": ["default"], "roles": ["approver"]}]'
        )
    )
    assert entry["emails"] == ["mallory@example.com"]
    policy = parse_policy({"tokens": [entry], "signing_key": "signing.pem"}, source=Path("p.json"))
    assert policy.tokens[0].emails == ("mallory@example.com",)


def _step(dev: RunningDev, text: str, notes: str, comment: str) -> None:
    """One command of the guide: run, its exit code as its notes say, its output as its
    comment says. An `export` line sets the variable for the commands after it."""
    if text.startswith("export "):
        name, _, value = text.removeprefix("export ").partition("=")
        [dev.env[name]] = shlex.split(value)
        return
    if "awaiting_approval" in notes:
        status = re.search(r"`(\.venv/bin/tempoconf rollout status [^`]+)`", notes)
        assert status, notes
        eventually_sync(
            lambda: "awaiting_approval" in run(dev, status.group(1)).stdout,
            what="the rollout to await approval",
            timeout=60,
        )
    done = run(dev, text)
    output = done.stdout + done.stderr
    expected = 1 if "(exit 1)" in notes else 0
    assert done.returncode == expected, f"{text}\n{output}"
    if comment:
        assert quoted(comment).search(output), f"{text}\n{output}"


def test_the_access_guide_runs_as_written(tmp_path: Path) -> None:
    text = page("how-to/access.md")
    setup, start, roles, fleet, ci, scrape, oidc = shell_blocks(text)
    clone = make_clone(tmp_path)
    for command in setup.commands:
        done = bash(command.text, cwd=clone, env={"PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, f"{command.text}\n{done.stdout}{done.stderr}"
        if command.comment:
            assert quoted(command.comment).search(done.stdout), f"{command.text}\n{done.stdout}"
    policy_file = clone / "access" / "policy.json"
    policy = json.loads(policy_file.read_text())
    digest = re.search(r"[0-9a-f]{64}", setup.commands[-1].comment)
    assert digest and policy["tokens"][0]["secret_sha256"] == digest.group(0)

    [dev_command] = start.commands
    assert dev_command.text == DEV
    dev = start_dev(clone, variables={"TEMPOCONF_ACCESS_FILE": "access/policy.json"})
    try:
        for block in (roles, fleet, ci, scrape):
            for command in block.commands:
                _step(dev, command.text, command.notes, command.comment)

        # OpenID: the guide's section added to the policy, its issuer a real provider's
        with running_oidc_provider(
            tmp_path / "oidc", clients=[OidcClient("deployer", "deployer-secret", ("sre",))]
        ) as provider:
            fragments = re.findall(r"```json\n(.*?)```", text, re.S)
            [fragment] = [found for found in fragments if found.startswith('"oidc"')]
            added = json.loads("{" + fragment.replace(GUIDE_ISSUER, provider.issuer) + "}")
            policy_file.write_text(json.dumps({**policy, **added}, indent=2))
            for command in oidc.commands:
                written = command.text.replace(GUIDE_ISSUER, provider.issuer)
                if written.startswith("export "):
                    _step(dev, written, command.notes, command.comment)
                    continue

                # the API reads the changed file within a second or so
                def signed_in(written: str = written) -> bool:
                    return run(dev, written).returncode == 0

                eventually_sync(signed_in, what="the API to take the provider's tokens")
                _step(dev, written, command.notes, command.comment)
            assert provider.requests("/token") >= 1
            shown = run(dev, ".venv/bin/tempoconf history myproject/checkout")
            history = shown.stdout + shown.stderr
            assert re.search(r"alice +rollout\.started", history), history
            assert re.search(r"bob +rollout\.command .*approved", history), history
    finally:
        dev.stop()
