"""docs/tutorials/walkthrough.md, run literally on a fresh `tempoconf dev`: every command of its
```sh blocks in order, from a copy of what a clone has, each printing what the page says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tempoconf.canonical import version_id
from tests.cli.conftest import page, start_dev
from tests.cli.page_runner import PageRunner
from tests.cli.test_walkthrough import make_clone

pytestmark = pytest.mark.timeout(600)

PAGE = "tutorials/walkthrough.md"


def test_the_walkthrough_page_runs_as_written_on_a_fresh_stack(tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    dev = start_dev(clone, default_data_dir=True)
    try:
        exports = next(
            line.strip()
            for line in dev.output.read_text().splitlines()
            if line.strip().startswith("export ")
        )
        runner = PageRunner(clone, exports, dev.api_url)
        runner.run_page(page(PAGE))
        assert len(runner.ran) >= 20, runner.ran

        # "`versions` lists the config's versions, newest first. It says which one is stable
        # now, and which ones were stable before" (the halted debug value never was).
        versions = next(out for command, out in runner.outputs.items() if " versions " in command)
        lines = [line for line in versions.splitlines() if line.strip()]
        header, rows = lines[0], lines[1:]
        stable_column = slice(header.index("STABLE"), header.index("STABLE SINCE"))
        stable = {"is_debug": False, "max_connections": 1000}
        ids = {
            "1000": version_id(stable),
            "2000": version_id({**stable, "max_connections": 2000}),
            "debug": version_id({"is_debug": True, "max_connections": 2000}),
            "2500": version_id({**stable, "max_connections": 2500}),
        }
        assert [row.split()[0] for row in rows] == [
            ids["2500"], ids["debug"], ids["2000"], ids["1000"]
        ], versions  # fmt: skip
        assert [row[stable_column].strip() for row in rows] == ["yes", "", "was", "was"], versions
        # "these ids are the same on every machine": the page's rollback ids are the values'
        text = page(PAGE)
        assert f"rollback myproject/server_config {ids['1000']} " in text
        assert f"rollback myproject/server_config {ids['2500']} " in text
    finally:
        dev.stop()
