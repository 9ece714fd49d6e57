"""The canary's lease as clients see it, sampled through a fault: what the API served the canary,
with the stage's `expires_at`, so a test can say that the lease never lapsed while the rollout was
alive and when a renewal first showed after the fault."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from tests.faults.rollouts import CANARY, PollingThread
from tests.faults.stack import Stack


@dataclass(frozen=True)
class CanaryAnswer:
    answered_at: float
    """Wall clock (epoch seconds) when the answer arrived."""
    version: str
    expires_at: float | None
    """The lease of the stage that served it (None: stable)."""


@dataclass
class LeaseWatch(PollingThread):
    """Polls the API as the canary every 200 ms in a thread, recording each answer (an API that
    does not answer is skipped: other tests judge the API's availability)."""

    stack: Stack
    path: str
    answers: list[CanaryAnswer] = field(default_factory=list)

    def _run(self) -> None:
        client, channel = CANARY
        with httpx.Client(timeout=5) as http:
            while not self._stop.is_set():
                try:
                    answer = http.get(
                        f"{self.stack.api_url}/v1/configs/{self.path}",
                        params={"client": client, "channel": channel},
                    )
                except httpx.HTTPError:
                    answer = None
                if answer is not None and answer.status_code == 200:
                    body = answer.json()
                    expires = body.get("expires_at")
                    self.answers.append(
                        CanaryAnswer(
                            time.time(),
                            str(body["version"]),
                            datetime.fromisoformat(expires).timestamp() if expires else None,
                        )
                    )
                time.sleep(0.2)

    def renewed_after(self, moment: float) -> float | None:
        """When an answer first showed a lease later than every lease seen before `moment`."""
        before = [a.expires_at for a in self.answers if a.answered_at < moment and a.expires_at]
        if not before:
            return None
        latest = max(before)
        for answer in self.answers:
            if answer.answered_at >= moment and (answer.expires_at or 0) > latest:
                return answer.answered_at
        return None

    def assert_never_lapsed(self, new: str) -> float:
        """Once the canary got `new` it kept it (never back to stable: its lease never lapsed)
        until the watch ended after the promotion; the smallest lease margin seen, in seconds."""
        versions = [answer.version for answer in self.answers]
        assert new in versions, f"the canary never got {new}: {Counter(versions)}"
        after = self.answers[versions.index(new) :]
        lost = [answer for answer in after if answer.version != new]
        assert not lost, f"the canary lost {new} (its lease lapsed): first {lost[0]}"
        margins = [a.expires_at - a.answered_at for a in after if a.expires_at is not None]
        assert margins, "no answer carried the stage's lease"
        return min(margins)
