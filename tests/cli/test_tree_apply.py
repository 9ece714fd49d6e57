"""`tempoconf diff` and `tempoconf apply` on a real git repository made here, against a live
`tempoconf dev`, in both CLI modes: direct (the store and Temporal) and through the admin API with
only its URL and a token, as a CI job holds them."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tempoconf.canonical import version_id
from tests.cli.conftest import TEMPOCONF, RunningDev, run_cli, start_dev
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(300)

TOKEN = "ci-secret"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Alice",
    "GIT_AUTHOR_EMAIL": "alice@example.com",
    "GIT_COMMITTER_NAME": "Alice",
    "GIT_COMMITTER_EMAIL": "alice@example.com",
}
QUICK = {"stages": [{"percentile": 50}], "default_cooldown_time": "1s"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    running = start_dev(
        tmp_path_factory.mktemp("dev"), variables={"TEMPOCONF_ADMIN_TOKENS": f"ci:{TOKEN}"}
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(params=["direct", "api"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Repo:
    """A git repository of configs, and the tempoconf commands run on it in one CLI mode."""

    def __init__(self, dev: RunningDev, root: Path, mode: str) -> None:
        self.dev = dev
        self.root = root
        self.env = {**dev.env, **GIT_IDENTITY}
        if mode == "api":
            self.env["TEMPOCONF_ADMIN_TOKEN"] = TOKEN
        root.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.root), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def write(self, relpath: str, document: Any) -> None:
        file = self.root / relpath
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(document if isinstance(document, str) else json.dumps(document, indent=2))

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()

    def tempoconf(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env, cwd=self.dev.workdir, timeout=timeout)

    def diff(self, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.tempoconf("diff", str(self.root), *flags)

    def apply(self, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.tempoconf("apply", str(self.root), *flags)

    def ok(self, *args: str) -> str:
        done = self.tempoconf(*args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def stable(self, namespace: str, path: str) -> Any:
        done = self.tempoconf("get", path, "--namespace", namespace, "--stable")
        return json.loads(done.stdout)["value"] if done.returncode == 0 else None


def started_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("started: ")]


def test_a_tree_applies_once_then_only_what_changed(
    stack: RunningDev, mode: str, tmp_path: Path
) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    repo = Repo(stack, tmp_path / "configs", mode)
    repo.write(f"{ns}/rollout.json", QUICK)
    repo.write(f"{ns}/app/server.json", {"is_debug": False, "max_connections": 2000})
    repo.write(
        f"{ns}/app/server.schema.json",
        {"type": "object", "properties": {"max_connections": {"type": "integer"}}},
    )
    repo.write(f"{ns}/app/limits.json", {"rps": 100})
    repo.write(f"{ns}/web/rollout.json", {**QUICK, "changeset": "web-v2"})
    repo.write(f"{ns}/web/frontend.json", {"api": "v2"})
    repo.write(f"{ns}/web/backend.json", {"accepts": ["v1", "v2"]})
    sha = repo.commit("first configs")

    # -- a fresh tree: everything to do
    first = repo.diff()
    assert first.returncode == 2, first.stdout + first.stderr
    for path in ("app/server", "app/limits", "web/frontend", "web/backend"):
        assert re.search(rf"^  start +{ns}/{path} ", first.stdout, re.M), first.stdout
    assert re.search(rf"^  schema +{ns}/app/server ", first.stdout, re.M), first.stdout

    applied = repo.apply("--wait")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert len(started_lines(applied.stdout)) == 3, applied.stdout  # two configs, one changeset
    assert f"started: changeset web-v2 ({ns}/web/backend, {ns}/web/frontend)" in applied.stdout
    assert "applied: 3 of 3 rollout(s) promoted, 0 refused" in applied.stdout, applied.stdout
    assert repo.stable(ns, "app/limits") == {"rps": 100}
    assert repo.stable(ns, "web/frontend") == {"api": "v2"}
    assert json.loads(repo.ok("schema", "get", "app/server", "--namespace", ns))["properties"]
    history = json.loads(repo.ok("history", "app/server", "--namespace", ns, "--json"))
    started = [entry for entry in history if entry["action"] == "rollout.started"]
    assert started and started[0]["details"]["commit"] == sha, history
    assert started[0]["details"]["author"] == "alice@example.com", history
    changeset = json.loads(repo.ok("history", "web/backend", "--namespace", ns, "--json"))
    assert {e["workflow_id"] for e in changeset if e["action"] == "rollout.started"} == {
        next(e["workflow_id"] for e in changeset if e["workflow_id"])
    }
    assert next(e["workflow_id"] for e in changeset if e["workflow_id"]).startswith("changeset:")

    # -- the same tree again: nothing
    again = repo.apply()
    assert again.returncode == 0, again.stdout + again.stderr
    assert started_lines(again.stdout) == [] and "nothing to apply." in again.stdout
    assert repo.diff().returncode == 0

    # -- one file changed: only it
    repo.write(f"{ns}/app/limits.json", {"rps": 250})
    repo.commit("more rps")
    changed = repo.diff("--json")
    assert changed.returncode == 2, changed.stdout + changed.stderr
    document = json.loads(changed.stdout)
    todo = [c for c in document["configs"] if c["action"] != "unchanged"]
    assert [(c["path"], c["action"]) for c in todo] == [("app/limits", "start")], todo
    assert '-  "rps": 100' in todo[0]["value_diff"] and '+  "rps": 250' in todo[0]["value_diff"]
    one = repo.apply("--wait")
    assert one.returncode == 0, one.stdout + one.stderr
    assert [line.split()[1] for line in started_lines(one.stdout)] == [f"{ns}/app/limits"]

    # -- a bad file anywhere: nothing starts, every problem named by file and pointer
    repo.write(f"{ns}/app/limits.json", {"rps": 500})
    repo.write(f"{ns}/app/server.json", {"is_debug": False, "max_connections": "many"})
    repo.write(f"{ns}/web/rollout.json", {**QUICK, "stages": [{"percentile": 101}]})
    repo.commit("broken")
    refused = repo.apply("--wait")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert started_lines(refused.stdout) == []
    assert f"{ns}/app/server.json /max_connections: " in refused.stderr, refused.stderr
    assert f"{ns}/web/rollout.json /stages/0/percentile: " in refused.stderr, refused.stderr
    assert "nothing was applied." in refused.stderr
    assert repo.stable(ns, "app/limits") == {"rps": 250}
    versions = json.loads(repo.ok("versions", "app/limits", "--namespace", ns, "--json"))
    assert version_id({"rps": 500}) not in {v["version"] for v in versions}
    markdown = repo.diff("--format", "markdown")
    assert markdown.returncode == 1
    assert "problem(s): apply would start nothing" in markdown.stdout


def test_a_config_another_version_rolls_out_is_refused(
    stack: RunningDev, mode: str, tmp_path: Path
) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    repo = Repo(stack, tmp_path / "configs", mode)
    request = tmp_path / "held.json"
    request.write_text(
        json.dumps(
            {
                "namespace": ns,
                "path": "app/held",
                "value": {"owner": "someone else"},
                "stages": [{"channel": "canary", "cooldown": "600s"}],
            }
        )
    )
    repo.ok("rollout", "start", str(request))
    repo.write(f"{ns}/app/held.json", {"owner": "the tree"})
    repo.write(f"{ns}/app/free.json", {"owner": "the tree"})
    repo.commit("both")
    try:
        diff = repo.diff()
        assert diff.returncode == 2
        assert re.search(rf"^  blocked +{ns}/app/held  a rollout of version ", diff.stdout, re.M)
        applied = repo.apply()
        assert applied.returncode == 1, applied.stdout + applied.stderr
        assert [line.split()[1] for line in started_lines(applied.stdout)] == [f"{ns}/app/free"]
        assert re.search(
            rf"^refused: {ns}/app/held: a rollout of version {version_id({'owner': 'someone else'})}"
            r" is running \(workflow rollout:",
            applied.stdout,
            re.M,
        ), applied.stdout
    finally:
        repo.ok("rollout", "halt", "app/held", "--namespace", ns, "--reason", "test over")


def test_an_interrupted_apply_halts_its_rollouts_back_to_stable(
    stack: RunningDev, mode: str, tmp_path: Path
) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    repo = Repo(stack, tmp_path / "configs", mode)
    repo.write(f"{ns}/app/server.json", {"max_connections": 2000})
    repo.commit("stable value")
    assert repo.apply("--wait").returncode == 0  # no rollout.json: promoted at once
    repo.write(f"{ns}/rollout.json", {"stages": [{"channel": "canary", "cooldown": "600s"}]})
    repo.write(f"{ns}/app/server.json", {"max_connections": 9000})
    repo.commit("canary first")

    def canary_value() -> Any:
        done = repo.tempoconf("get", "app/server", "--namespace", ns, "--channel", "canary")
        return json.loads(done.stdout)["value"] if done.returncode == 0 else None

    output = tmp_path / "apply.out"
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            [str(TEMPOCONF), "apply", str(repo.root), "--wait", "--halt-on-interrupt"],
            env=repo.env,
            cwd=stack.workdir,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually_sync(
            lambda: canary_value() == {"max_connections": 9000},
            what="the canary served the tree's value",
            timeout=60,
        )
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    printed = output.read_text()
    assert code == 128 + signal.SIGTERM, printed
    assert "SIGTERM: halting the 1 rollout(s) this apply started" in printed, printed
    assert re.search(rf"^  halted  {ns}/app/server", printed, re.M), printed
    assert canary_value() == {"max_connections": 2000}
    assert repo.stable(ns, "app/server") == {"max_connections": 2000}


def test_a_protoconf_repository_applies_as_it_is(
    stack: RunningDev, mode: str, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    repo = Repo(stack, tmp_path / "protoconf", mode)
    repo.write(f"src/{prefix}/crawler.pconf", "def main():\n    return CrawlerService()\n")
    repo.write(
        f"materialized_config/{prefix}/crawler.materialized_JSON",
        {
            "protoFile": "crawler/crawler.proto",
            "value": {
                "@type": "type.googleapis.com/CrawlerService",
                "crawlers": [{"userAgent": "Linux/", "httpTimeout": 30}],
                "logLevel": 2,
            },
            "rolloutConfig": {
                "defaultCooldownTime": "1s",
                "stages": [{"channel": "alpha"}, {"percentile": 50, "cooldown": "0.500s"}],
            },
        },
    )
    repo.write(
        f"materialized_config/{prefix}/flags.materialized_JSON",
        {"protoFile": "flags.proto", "value": {"@type": "type.googleapis.com/Flags", "on": True}},
    )
    repo.commit("materialized")
    applied = repo.apply("--wait")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "(a protoconf repository)" in applied.stdout
    assert repo.stable("default", f"{prefix}/crawler") == {
        "crawlers": [{"userAgent": "Linux/", "httpTimeout": 30}],
        "logLevel": 2,
    }
    assert repo.stable("default", f"{prefix}/flags") == {"on": True}
    assert repo.apply().returncode == 0
