"""Build the installed shape of the package as a tree of symlinks, for the tools that find modules
on disk rather than through the editable install's import hook (mypy, lint-imports).

The component folders install as subpackages (setuptools package-dir: `tempoconf.workflows` is the
folder `workflows/`). `python .ci/layout.py DEST` makes DEST/tempoconf/ with a link to each of the
domain's own files and folders and one per mapped folder (DEST/tempoconf/workflows -> workflows/).

`python .ci/layout.py DEST COMMAND...` then runs COMMAND and prints its output with each path into
the tree shown as the file it links to (`workflows/rollout/_workflow.py`, not `DEST/tempoconf/workflows/...`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "tempoconf"


def build(dest: Path) -> None:
    """(Re)build the tree under `dest`; links point into this checkout, so edits show at once."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(dest, ignore_errors=True)  # removes the links, never what they point to
    package = dest / PACKAGE
    package.mkdir(parents=True)
    for entry in sorted((ROOT / PACKAGE).iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        parent, _, leaf = name.rpartition(".")
        if parent != PACKAGE:
            sys.exit(
                f"pyproject.toml: package-dir maps {name!r}, which is not a {PACKAGE} subpackage"
            )
        (package / leaf).symlink_to(ROOT / folder)


def run(dest: Path, command: list[str]) -> int:
    """Run `command`; its output's paths into `dest` name the checkout's files. Its exit status."""
    prefixes = sorted({str(dest), os.path.relpath(dest)}, key=len, reverse=True)
    into_tree = re.compile("|".join(re.escape(prefix) for prefix in prefixes) + r"/[^\s:\"']+")

    def real(match: re.Match[str]) -> str:
        return os.path.relpath(os.path.realpath(match.group()))

    done = subprocess.run(command, capture_output=True, text=True, check=False)
    sys.stdout.write(into_tree.sub(real, done.stdout))
    sys.stderr.write(into_tree.sub(real, done.stderr))
    return done.returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python .ci/layout.py DEST [COMMAND...]")
    tree = Path(sys.argv[1]).resolve()
    build(tree)
    if len(sys.argv) > 2:
        sys.exit(run(tree, sys.argv[2:]))
