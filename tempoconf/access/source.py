"""The policy file, followed: reloaded when it changes (its mtime, looked at once a second at
most) or when told (SIGHUP). A file that no longer loads leaves the last good policy in force:
a typo must not lock every operator out, nor open the door. What is in force, since when, and
why the file's latest content is not, is said without a secret (`stale_reason`): `/readyz` and
`/metrics` show it."""

from __future__ import annotations

import logging
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from time import monotonic

from tempoconf.access.policy import AccessPolicy, PolicyError, load_policy

__all__ = ["PolicySource", "public_problems"]

logger = logging.getLogger(__name__)

CHECK_EVERY = 1.0
"""Seconds between two looks at the file's mtime."""


class PolicySource:
    """The policy in `path`, loaded now (PolicyError when it cannot be) and kept current."""

    def __init__(self, path: Path, *, check_every: float = CHECK_EVERY) -> None:
        self.path = path
        self._check_every = check_every
        self._stamp = self._stat()
        self.policy: AccessPolicy = load_policy(path)
        self.loaded_at = datetime.now(UTC)
        """When the policy in force was read from the file."""
        self.error: PolicyError | None = None
        """Why the file's latest content is not in force (None: it is)."""
        self.failing_since: datetime | None = None
        """When the file first failed to load since the policy in force was (None: it loads)."""
        self.failed_reloads = 0
        self._checked = monotonic()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def current(self) -> AccessPolicy:
        """The policy in force, reloaded first when the file changed (looked at once a second)."""
        now = monotonic()
        if now - self._checked >= self._check_every:
            self._checked = now
            stamp = self._stat()
            if stamp != self._stamp:
                self._stamp = stamp
                self.reload()
        return self.policy

    def reload(self) -> bool:
        """Load the file again (SIGHUP, or it changed); False, logged, when it does not load."""
        try:
            policy = load_policy(self.path)
        except PolicyError as error:
            if self.error is None:
                self.failing_since = datetime.now(UTC)
            self.error = error
            self.failed_reloads += 1
            logger.error("%s; the policy loaded before stays in force", error)
            return False
        self.policy = policy
        self.loaded_at = datetime.now(UTC)
        self.error = None
        self.failing_since = None
        logger.info("access policy reloaded from %s", self.path)
        return True


# A quoted value in a problem's message is the file's (a name, a pattern that did not match, a
# secret pasted where its digest belongs): never shown outside the log.
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def public_problems(error: PolicyError) -> str:
    """`error`'s problems, each with its place in the file, every quoted value of the file left
    out: for answers anyone may read (`/readyz`), where the log has them whole."""
    return "; ".join(_QUOTED.sub("…", problem) for problem in error.problems)
