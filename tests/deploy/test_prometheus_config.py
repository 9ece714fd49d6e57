"""deploy/prometheus/prometheus.yml under an access policy: its commented `authorization` lines,
uncommented as the file says, make a configuration `promtool` accepts, whose API job sends the
scraper token from the file the access guide names (tests/access/test_metrics_access.py scrapes
a live API under a policy with the guide's config). As shipped, the compose stack runs no policy:
the file loads without them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.deploy.test_alerts import RULES, promtool

CONFIG = RULES.with_name("prometheus.yml")
TOKEN_FILE = "/etc/prometheus/tempoconf-scraper-token"


def uncommented(text: str) -> str:
    """The file with its `# authorization:` block uncommented, as its comment says to."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == "# authorization:")
    for i in (start, start + 1):
        lines[i] = re.sub(r"^(\s*)# ", r"\1", lines[i])
    return "".join(lines)


def test_the_shipped_config_carries_the_scraper_token_once_uncommented(tmp_path: Path) -> None:
    shipped = yaml.safe_load(CONFIG.read_text())
    assert "authorization" not in shipped["scrape_configs"][0]  # compose: no policy, as shipped
    token = tmp_path / "tempoconf-scraper-token"
    token.write_text("prometheus-secret\n")
    text = uncommented(CONFIG.read_text())
    jobs = {job["job_name"]: job for job in yaml.safe_load(text)["scrape_configs"]}
    assert jobs["tempoconf-api"]["authorization"] == {"credentials_file": TOKEN_FILE}
    assert "authorization" not in jobs["tempoconf-worker-sdk"]  # the SDK's metrics: no policy
    # The same file the access guide's scrape config names.
    guide = (Path(__file__).parents[2] / "docs" / "how-to" / "access.md").read_text()
    assert f"credentials_file: {TOKEN_FILE}" in guide
    config = tmp_path / "prometheus.yml"
    config.write_text(text.replace(TOKEN_FILE, str(token)))
    (tmp_path / "alerts.yml").write_text(RULES.read_text())
    checked = subprocess.run(
        [promtool(), "check", "config", str(config)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "is valid prometheus config file syntax" in checked.stdout, checked.stdout
