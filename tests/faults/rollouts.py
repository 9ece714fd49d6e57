"""What the fault tests roll out, and what they check after every fault: the rollout ended as it
should, each stage was published once, one promotion, no lock left, canaries served throughout."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Self

import httpx

from tempoconf.rollout.activity_io import PREPARE_ACTIVITY, PROMOTE_ACTIVITY, PUBLISH_STAGE_ACTIVITY
from tempoconf.store.store import Store
from tests.faults.stack import Stack, audit, completed_activities, wait_until
from tests.fixtures.temporal import rollout_result

ROLLOUT_TIMEOUT_SECONDS = 150.0
"""A bound, not a goal: a worker SIGKILLed inside a store activity is noticed within the
activity's 10 s heartbeat timeout (workflows/rollout/_activities.py STORE_HEARTBEAT_TIMEOUT; at its 30 s
start-to-close timeout before), and everything else recovers in seconds too."""
CANARY = ("canary-1", "canary")
HOST = ("host-1", None)


def first_value(path: str) -> dict[str, Any]:
    """A rollout without stages: promoted at once, the config's stable value."""
    return {"path": path, "value": {"generation": 1}, "message": "stable before the fault"}


def staged(path: str, *, cooldown: str = "3s", **extra: Any) -> dict[str, Any]:
    """Canaries, then every host, each held `cooldown` on the real clock."""
    return {
        "path": path,
        "value": {"generation": 2},
        "stages": [{"channel": "canary"}, {"percentile": 100}],
        "default_cooldown_time": cooldown,
        "health": [{"kind": "reports", "max_error_ratio": 0.5, "on_no_data": "pass"}],
        "message": "rolled out under a fault",
        **extra,
    }


async def establish_stable(stack: Stack, path: str) -> str:
    """Promote a first value; its version."""
    handle = await stack.start_rollout(first_value(path))
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted", result
    return str(result["version"])


class PollingThread:
    """Runs `_run` in a thread from `with` to its end; `_run` loops until `_stop` is set."""

    _stop: threading.Event
    _thread: threading.Thread

    def __enter__(self) -> Self:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        raise NotImplementedError


@dataclass
class CanaryWatch(PollingThread):
    """Polls the API as a canary (and as a host outside the canaries) every 100 ms in a thread,
    recording each version served; an API that does not answer is recorded as None."""

    stack: Stack
    path: str
    canary: list[str | None] = field(default_factory=list)
    host: list[str | None] = field(default_factory=list)

    def _run(self) -> None:
        while not self._stop.is_set():
            for (client, channel), seen in ((CANARY, self.canary), (HOST, self.host)):
                try:
                    seen.append(self.stack.served(self.path, client=client, channel=channel))
                except (httpx.HTTPError, AssertionError):
                    seen.append(None)
            time.sleep(0.1)

    def assert_canary_kept(self, new: str, stable: str) -> None:
        """Once a canary got the new version it never went back to stable (nor to anything else)."""
        served = [version for version in self.canary if version is not None]
        assert new in served, f"the canary never got {new}: {Counter(served)}"
        after = served[served.index(new) :]
        assert set(after) == {new}, f"the canary went back: {Counter(after)} (stable {stable})"


async def assert_ended_cleanly(
    stack: Stack, store: Store, path: str, result: dict[str, Any], *, stages: int = 2
) -> None:
    """Promoted; each stage published once (audit and history), one promotion, no lock left, and
    every client served the new version."""
    assert result["outcome"] == "promoted", result
    version = str(result["version"])
    entries = [entry for entry in audit(store, path) if entry.version == version]
    published = Counter(
        entry.details.get("index") for entry in entries if entry.action == "stage.published"
    )
    assert published == Counter(range(stages)), f"stage.published per stage index: {published}"
    promoted = [entry for entry in entries if entry.action == "rollout.promoted"]
    assert len(promoted) == 1, [entry.action for entry in entries]
    handle = (await stack.client()).get_workflow_handle(f"rollout:default/{path}")
    completed = Counter(await completed_activities(handle))
    assert completed[PREPARE_ACTIVITY] == 1, completed
    assert completed[PUBLISH_STAGE_ACTIVITY] == stages, completed
    assert completed[PROMOTE_ACTIVITY] == 1, completed
    assert store.get_lock("default", path) is None, "the rollout left its lock"
    wait_until(
        lambda: stack.served(path, client=HOST[0]) == version,
        what=f"every host to get {version}",
        timeout=15,
    )
