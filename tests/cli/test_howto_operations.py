"""The operations guides run as written where this machine can: production.md's search attribute
registration against a real Temporal server and its store creation, upgrades.md's migrations on a
throwaway store, backups.md's SQLite backup and restore of a `tempoconf dev` stack; alerts.md
names every rule of deploy/prometheus/alerts.yml. The Compose blocks run in
tests/compose/test_compose.py."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import SEARCH_ATTRIBUTES
from tests.cli.conftest import ROOT, bash, cli_env, page, shell_blocks, start_dev
from tests.cli.howto import make_clone, ok, quoted, run
from tests.cli.page_runner import section
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(300)


def test_the_production_guide_registers_every_search_attribute_rollouts_use(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    text = section(page("how-to/production.md"), "Point everything at Temporal")
    (block,) = shell_blocks(text)
    namespace = f"howto-{uuid.uuid4().hex[:8]}"
    address = temporal_env.client.service_client.config.target_host
    env = cli_env(TEMPORAL_ADDRESS=address, TEMPORAL_NAMESPACE=namespace)
    clone = make_clone(tmp_path)
    subprocess.run(
        [str(temporal_cli_path()), "operator", "namespace", "create", "--namespace", namespace],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip

    def registered(command: str) -> str:
        # A namespace just created takes a moment to reach every part of the server.
        done = bash(command, cwd=clone, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    for command in block.commands:
        eventually_sync(lambda c=command.text: registered(c), what=command.text, timeout=30)
    listed = registered(".venv/bin/temporal operator search-attribute list -o json")
    types = json.loads(listed)["customAttributes"]
    for key in SEARCH_ATTRIBUTES:  # every attribute a rollout upserts, registered as its type
        assert types.get(key.name) == f"INDEXED_VALUE_TYPE_{key.indexed_value_type.name}", types
    assert types.get("TempoconfPaths") == "INDEXED_VALUE_TYPE_KEYWORD_LIST", (
        types
    )  # all of a changeset's paths


def test_the_production_guide_creates_a_store(tmp_path: Path) -> None:
    (block,) = shell_blocks(section(page("how-to/production.md"), "Create the store"))
    (create,) = block.commands
    clone = make_clone(tmp_path)
    done = bash(create.text, cwd=clone, env=cli_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.fullmatch(
        r"store sqlite:///tempoconf-production\.db is at migration \w+ \(head\)\n", done.stdout
    ), done.stdout
    again = bash(create.text, cwd=clone, env=cli_env())  # "safe to run again"
    assert again.returncode == 0 and again.stdout == done.stdout, again.stdout + again.stderr


def test_the_upgrades_guide_migrates_down_and_up_as_it_says(tmp_path: Path) -> None:
    (block,) = shell_blocks(section(page("how-to/upgrades.md"), "Go back to an earlier version"))
    clone = make_clone(tmp_path)
    assert len(block.commands) == 4, block.commands
    for command in block.commands:
        done = bash(command.text, cwd=clone, env=cli_env())
        said = quoted(command.notes)
        assert said.fullmatch((done.stdout + done.stderr).strip()), (command.notes, done)
        refused = " versions " in command.text
        assert done.returncode == (1 if refused else 0), done.stdout + done.stderr


def test_the_backups_guide_restores_the_dev_stack_as_it_was(tmp_path: Path) -> None:
    text = section(page("how-to/backups.md"), "On the dev stack: SQLite")
    backup, restore, look = shell_blocks(text)
    clone = make_clone(tmp_path)
    dev = start_dev(clone, default_data_dir=True)
    try:
        for command in backup.commands:
            ok(dev, command.text)
        # After the backup: a rollout the restore must take back, from the store and Temporal.
        later = '{"path": "myproject/after_backup", "value": {"n": 1}}'
        ok(dev, f"echo '{later}' | .venv/bin/tempoconf rollout start - --wait")
    finally:
        dev.stop()  # "stop tempoconf dev with Ctrl-C first"
    for command in restore.commands:
        done = bash(command.text, cwd=clone, env=cli_env())
        assert done.returncode == 0, done.stdout + done.stderr
    dev = start_dev(clone, default_data_dir=True)
    try:
        (versions,) = look.commands
        shown = ok(dev, versions.text)
        assert "c839a1b794e06bfb" in shown and "stable" in shown, shown
        # The store's state is the backup's: the later rollout's config is unknown.
        after = run(dev, ".venv/bin/tempoconf versions myproject/after_backup")
        assert after.returncode == 1, after.stdout + after.stderr
        assert "no versions of default/myproject/after_backup" in after.stdout.lower()
        described = run(
            dev, ".venv/bin/temporal workflow describe -w rollout:default/myproject/after_backup"
        )
        assert described.returncode != 0, described.stdout  # Temporal's state is the backup's too
    finally:
        dev.stop()


def test_the_alerts_guide_says_what_every_alert_means_and_what_to_do() -> None:
    rules = (ROOT / "deploy" / "prometheus" / "alerts.yml").read_text(encoding="utf-8")
    alerts = re.findall(r"- alert: (\w+)\n.*?severity: (\w+)", rules, re.S)
    assert len(alerts) >= 7, alerts
    guide = page("how-to/alerts.md")
    described = re.findall(r"^## (Tempoconf\w+)$", guide, re.M)
    assert sorted(described) == sorted(name for name, _ in alerts)
    for name, severity in alerts:
        text = section(guide, name)
        assert text.strip().startswith(f"Severity `{severity}`."), (name, text)
        assert "What to do:" in text, name
