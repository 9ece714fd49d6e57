"""Child processes that must not outlive the `tempoconf` process that started them."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
from typing import Any

__all__ = ["die_with_parent"]

_LIBC: Any = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(OSError):
        _LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child must not dlopen


def die_with_parent() -> None:
    """A `preexec_fn`: runs in the child between fork and exec. If tempoconf itself is killed
    (even SIGKILL), the kernel sends the child SIGTERM, so it never outlives us holding ports.
    Does nothing where prctl is missing (not Linux)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
