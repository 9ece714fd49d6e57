"""The distribution as a user installs it: one top-level package, and a wheel that runs the demo
from an empty folder (the examples ship inside the package).

Built from the tracked files only (what a clean clone has), installed into a new venv with its
dependencies from the package registry (pip's cache makes that quick after `make test`'s setup).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_SECONDS = 600.0
DEMO_TIMEOUT_SECONDS = 240.0


def _run(*args: str | Path, cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} exited {result.returncode}\n"
        f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from the files git tracks, as in a clean clone."""
    source = tmp_path_factory.mktemp("clone")
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, tracked):
        origin = REPO / name
        if origin.is_file():
            target = source / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(origin.read_bytes())
    dist = tmp_path_factory.mktemp("dist")
    _run(
        sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dist, source,
        cwd=source, timeout=INSTALL_TIMEOUT_SECONDS,
    )  # fmt: skip
    (built,) = dist.glob("tempoconf-*.whl")
    return built


def test_the_wheel_installs_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [name for name in names if name.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["tempoconf"]
    roots = {
        name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")
    }
    assert roots == {"tempoconf"}
    for shipped in [
        "tempoconf/cli/main.py",
        "tempoconf/workflows/rollout/__init__.py",
        "tempoconf/workflows/rollout/_workflow.py",
        "tempoconf/activities/health.py",
        "tempoconf/api/app.py",
        "tempoconf/examples/rollout.json",
        "tempoconf/examples/rollout-first.json",
        "tempoconf/examples/server_config.schema.json",
        "tempoconf/store/migrations/versions/0001_initial.py",
    ]:
        assert shipped in names, f"{shipped} is missing from the wheel"


def test_the_installed_wheel_runs_the_demo_from_an_empty_folder(
    wheel: Path, tmp_path: Path
) -> None:
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    _run(
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        wheel,
        cwd=tmp_path,
        timeout=INSTALL_TIMEOUT_SECONDS,
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "TEMPOCONF_", "PYTHONPATH", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{environment / 'bin'}:{env.get('PATH', '')}"
    output = _run(
        environment / "bin" / "tempoconf", "demo", "--exit-after-rollout", "--clients", "20",
        "--cooldown", "1s", "--data-dir", empty / ".tempoconf", "--temporal-port", "0",
        "--ui-port", "0", "--api-port", "0",
        cwd=empty, env=env, timeout=DEMO_TIMEOUT_SECONDS,
    )  # fmt: skip
    assert "rollout ended: promoted" in output
    # Nothing was read from the checkout: the installed package is the one that ran.
    imported = _run(
        python, "-c", "import tempoconf.cli.main as m; print(m.__file__)", cwd=empty, timeout=60.0
    )
    assert imported.strip().startswith(str(environment))
    assert sorted(path.name for path in empty.iterdir()) == [".tempoconf"]
