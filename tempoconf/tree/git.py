"""The commit a tree was taken from: `HEAD` of the git repository that holds it, read with the
`git` command (the user's own, with its configuration), so a rollout names the commit in its
history, its workflow's details and the agent's metric labels."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HeadCommit", "head_commit"]

GIT_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class HeadCommit:
    sha: str
    author: str  # the author's email, as an identity (four eyes compares it with approvers')
    subject: str
    dirty: bool  # files below the tree differ from the commit (edited, added, deleted)

    @property
    def commit(self) -> str:
        """The commit as a rollout records it: `-dirty` marks a tree that is not the commit's."""
        return self.sha + ("-dirty" if self.dirty else "")


def head_commit(tree: Path) -> HeadCommit | None:
    """HEAD of the repository holding `tree`; None when there is none (no git, not a repository,
    a repository without commits)."""
    git = shutil.which("git")
    if git is None:
        return None

    def run(*args: str) -> str | None:
        try:
            done = subprocess.run(
                [git, "-C", str(tree), *args],
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    shown = run("log", "-1", "--format=%H%x00%ae%x00%s")
    if not shown or shown.count("\0") != 2:
        return None
    sha, author, subject = shown.rstrip("\n").split("\0")
    status = run("status", "--porcelain", "--untracked-files=all", "--", ".")
    return HeadCommit(
        sha=sha, author=author, subject=subject, dirty=bool(status and status.strip())
    )
