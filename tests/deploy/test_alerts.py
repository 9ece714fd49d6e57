"""deploy/prometheus/alerts.yml: Prometheus's own `promtool` accepts the rules and runs their unit
test (tests/deploy/alerts_test.yml: each alert fires when it should, and not before); the
tempoconf metrics the rules read are ones a live API exports under those names. The Temporal SDK's
metric and label names they read are checked against a live worker in
tests/cli/test_temporal_tls.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx

from tempoconf.store.store import Store
from tests.fixtures.ci import missing
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
UNIT_TEST = Path(__file__).with_name("alerts_test.yml")


def promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        message = "promtool is not installed (Debian package `prometheus`; .ci/run installs it)"
        missing(message)
    return binary


def alert_names() -> set[str]:
    """The alerts the rules file defines (promtool, above, checks its structure)."""
    return set(re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.MULTILINE))


def expressions() -> list[str]:
    return re.findall(r"^\s+expr: (.+)$", RULES.read_text(), re.MULTILINE)


def test_promtool_accepts_the_rules_and_their_unit_test_passes() -> None:
    checked = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in checked.stdout
    # The compose file's Prometheus configuration loads them.
    configured = subprocess.run(
        [promtool(), "check", "config", str(RULES.with_name("prometheus.yml"))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert configured.returncode == 0, configured.stdout + configured.stderr
    assert "SUCCESS: 1 rule files found" in configured.stdout
    tested = subprocess.run(
        [promtool(), "test", "rules", str(UNIT_TEST)],
        capture_output=True, text=True, check=False, cwd=UNIT_TEST.parent,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert is tested, not only some.
    tested_names = set(re.findall(r"alertname: (\w+)", UNIT_TEST.read_text()))
    assert tested_names == alert_names()


async def test_the_tempoconf_metrics_the_rules_read_are_exported_by_a_live_api(
    sqlite_store: Store,
) -> None:
    read = {name for expr in expressions() for name in re.findall(r"\btempoconf_\w+", expr)}
    assert read, "the rules read no tempoconf metric"
    async with live_api(sqlite_store) as base_url, httpx.AsyncClient(base_url=base_url) as http:

        async def exported() -> set[str]:
            text = (await http.get("/metrics")).text
            names = {
                line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"
            }
            assert read <= names, sorted(read - names)
            return names

        await eventually(exported, what="the metrics the alert rules read")
