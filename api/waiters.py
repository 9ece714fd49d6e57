"""Long-polls waiting on one config, grouped by the answer they hold, woken only when it changes.

A waiter is a few references (no task, no closure; a future only where a coroutine awaits it):
10,000 open long-polls must be cheap to hold. Waiters are grouped by the ETag of the answer they
hold (stable, or the stage whose cohort they are in). When the config's snapshot is prepared
anew, each group is checked once: a group whose answer cannot have changed (same stage rules up
to its stage, same ETag) is left asleep without looking at its members; the members of the other
groups are resolved again (a memoised lookup per distinct query) and only those whose answer
changed are woken, each with the prepared answer to write. A lease's end re-resolves only the
groups of the stages that ended.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from tempoconf.api.distribution import ConfigQuery, PreparedAnswer, PreparedConfig
from tempoconf.api.etag import if_none_match
from tempoconf.resolution import STABLE

__all__ = ["DEADLINE", "RECHECK", "ConfigWaiters", "Deadlines", "Wakes", "Waiter"]

LEASE_SLACK = 0.002
"""Re-resolve this long after a lease ends, so the answer computed then no longer includes it."""
DEADLINE_TICK = 0.05
"""Long-polls' deadlines are rounded up to this (seconds): one timer per tick, not per waiter."""


class _Recheck:
    """A waiter's wake-up that carries no answer: resolve again (shutdown, the config deleted or
    left without an answer for some clients)."""

    __slots__ = ()


RECHECK = _Recheck()


class _Deadline:
    """A waiter's wake-up at its deadline: answer what it resolves to now (304 if unchanged)."""

    __slots__ = ()


DEADLINE = _Deadline()

_Rule = tuple[int, str, str | None, float | None, tuple[tuple[str, str], ...], str | None]


class Waiter:
    """One waiting long-poll: what it asked, the If-None-Match it sent, and the future that its
    answer (or RECHECK) is set on (a subclass may wake otherwise: `wake`, `woken`, `rearm`)."""

    __slots__ = ("query", "key", "if_none", "held", "future", "gone", "deadline", "tick", "unwatch")

    def __init__(
        self,
        query: ConfigQuery,
        key: bytes,
        if_none: str | None,
        held: PreparedAnswer,
        future: asyncio.Future[object] | None,
        deadline: float,
    ) -> None:
        self.query = query
        self.key = key
        """The raw query string: the key of `PreparedConfig.answer_for`'s memory."""
        self.if_none = if_none
        self.held = held
        """The answer it holds now (its group's): what a 304 at its deadline carries."""
        self.future = future
        self.gone = False
        """The client disconnected (set by the disconnect watch before it wakes the waiter)."""
        self.deadline = deadline
        """Loop time at which it answers 304 if nothing changed."""
        self.tick = 0
        """Its deadline's tick in Deadlines."""
        self.unwatch: Callable[[None], None] | asyncio.Task[None] | None = None
        """What stops the disconnect watch: the protocol's setter, or the task awaiting it."""

    def wake(self, result: object) -> None:
        """Set `result` on the future (once: a later wake-up in the same loop pass is dropped)."""
        future = self.future
        if future is not None and not future.done():
            future.set_result(result)

    def woken(self) -> bool:
        """Woken since it last began to wait (its answer is on the way)."""
        return self.future is None or self.future.done()

    def rearm(self, loop: asyncio.AbstractEventLoop) -> None:
        """It waits again (woken by a change that left its answer as it was)."""
        self.future = loop.create_future()

    def disconnected(self) -> None:
        """The client went away: wake at once, so the waiter leaves its group now."""
        self.gone = True
        self.wake(RECHECK)


class ConfigWaiters:
    """The waiters of one config, grouped by the ETag of the answer they hold."""

    __slots__ = ("prepared", "_groups", "_timer", "_leaseless", "_on_wake", "_count")

    def __init__(self, prepared: PreparedConfig, on_wake: Callable[[int], None]) -> None:
        self.prepared = prepared
        """The prepared config every held answer comes from."""
        self._groups: dict[str, dict[Waiter, None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._leaseless = False
        """`prepared` has no lease running: no timer to arm (checked once, not per waiter)."""
        self._on_wake = on_wake
        """Called with the number of waiters each update wakes (a metric)."""
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, waiter: Waiter) -> None:
        """`waiter` holds `waiter.held`, an answer of `self.prepared`."""
        etag = waiter.held.etag
        group = self._groups.get(etag)
        if group is None:
            group = self._groups[etag] = {}
        group[waiter] = None
        self._count += 1
        if self._timer is None and not self._leaseless:
            self._arm()

    def discard(self, waiter: Waiter) -> None:
        etag = waiter.held.etag
        group = self._groups.get(etag)
        if group is None or group.pop(waiter, False) is False:
            return
        self._count -= 1
        if not group:
            del self._groups[etag]
        if not self._count and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def wake_all(self, result: object = RECHECK) -> None:
        """Wake every waiter with `result` (shutdown; the config deleted)."""
        woken = 0
        for group in self._groups.values():
            for waiter in group:
                waiter.wake(result)
                woken += 1
        self._on_wake(woken)

    def update(self, prepared: PreparedConfig) -> None:
        """The config's snapshot changed and `prepared` serves it now: wake the waiters whose
        answer changed, with that answer, and leave the others asleep."""
        old = self.prepared
        self.prepared = prepared
        now = datetime.now(UTC)
        old_rules = _rules(old, now)
        new_rules = _rules(prepared, now)
        old_stages = {name: index for index, (name, _) in enumerate(old_rules)}
        new_answers = _answers_by_stage(prepared)
        affected: list[str] = []
        for etag in self._groups:
            stage = _stage_of(old, etag)
            if stage is None:
                affected.append(etag)
                continue
            # Clients that resolved to this stage matched it first: with the same rules up to it
            # they still do (stable: with the same rules, all of them), and get the same answer
            # if its ETag holds.
            if stage == STABLE:
                same = old_rules == new_rules
            else:
                end = old_stages.get(stage, -1) + 1
                same = end > 0 and old_rules[:end] == new_rules[:end]
            answer = new_answers.get(stage)
            if not same or answer is None or answer.etag != etag:
                affected.append(etag)
        self._resolve_again(affected, now)
        self._rearm()

    def _resolve_again(self, etags: list[str], now: datetime) -> None:
        """Resolve the members of these groups against `self.prepared` at `now`: wake those
        whose answer changed, move the others to the group of the answer they hold now."""
        prepared = self.prepared
        woken = 0
        moved: list[Waiter] = []
        for etag in etags:
            group = self._groups.pop(etag, None)
            if group is None:
                continue
            self._count -= len(group)
            for waiter in group:
                answer = prepared.answer_for(waiter.key, waiter.query, now)
                if answer is None:
                    waiter.wake(RECHECK)  # nothing to serve it now: its poll says why (404)
                    woken += 1
                elif answer.etag != etag and not if_none_match(waiter.if_none, answer.etag):
                    waiter.wake(answer)
                    woken += 1
                else:
                    waiter.held = answer
                    moved.append(waiter)
        for waiter in moved:
            if not waiter.woken():
                self.add(waiter)
        if woken:
            self._on_wake(woken)

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        now = datetime.now(UTC)
        expiry = self.prepared.next_expiry(now)
        self._leaseless = expiry is None
        if expiry is not None:
            delay = (expiry - now).total_seconds() + LEASE_SLACK
            self._timer = loop.call_later(delay, self._lease_ended)

    def _rearm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._leaseless = False
        if self._count:
            self._arm()

    def _lease_ended(self) -> None:
        """A stage's lease ended: only its cohort's answer changes (to a later stage or stable)."""
        self._timer = None
        now = datetime.now(UTC)
        ended = {answer.etag for stage, answer in self.prepared.stages if stage.expires_at <= now}
        self._resolve_again([etag for etag in self._groups if etag in ended], now)
        self._rearm()


class Wakes(Protocol):
    """A waiting long-poll as `Deadlines` sees it (a `Waiter`, or a bundle's waiter)."""

    def wake(self, result: object) -> None: ...


class Deadlines:
    """Every waiting long-poll's deadline, rounded up to DEADLINE_TICK: one timer per tick in
    use, where a timeout per waiter would cost a timer handle and a Timeout object each."""

    __slots__ = ("_ticks",)

    def __init__(self) -> None:
        self._ticks: dict[int, dict[Wakes, None]] = {}

    def add(self, waiter: Wakes, deadline: float) -> int:
        """Wake `waiter` with DEADLINE at `deadline` (loop time) or up to a tick later; returns
        the tick, for `discard`."""
        tick = math.ceil(deadline / DEADLINE_TICK)
        waiters = self._ticks.get(tick)
        if waiters is None:
            waiters = self._ticks[tick] = {}
            asyncio.get_running_loop().call_at(tick * DEADLINE_TICK, self._expire, tick)
        waiters[waiter] = None
        return tick

    def discard(self, waiter: Wakes, tick: int) -> None:
        waiters = self._ticks.get(tick)
        if waiters is not None:
            waiters.pop(waiter, None)

    def _expire(self, tick: int) -> None:
        for waiter in self._ticks.pop(tick, ()):
            waiter.wake(DEADLINE)


def _rules(prepared: PreparedConfig, now: datetime) -> list[tuple[str, _Rule]]:
    """The live stages' matching rules, in evaluation order (what decides who gets which stage;
    a lease's end is not a rule: a renewed lease changes nobody's answer)."""
    return [
        (
            stage.name,
            (
                stage.index,
                stage.name,
                stage.channel,
                stage.percentile,
                tuple(sorted(stage.labels.items())),
                stage.bucket_key,
            ),
        )
        for stage, _ in prepared.stages
        if stage.expires_at > now
    ]


def _answers_by_stage(prepared: PreparedConfig) -> dict[str, PreparedAnswer]:
    answers = {stage.name: answer for stage, answer in prepared.stages}
    if prepared.stable is not None:
        answers[STABLE] = prepared.stable
    return answers


def _stage_of(prepared: PreparedConfig, etag: str) -> str | None:
    if prepared.stable is not None and prepared.stable.etag == etag:
        return STABLE
    for stage, answer in prepared.stages:
        if answer.etag == etag:
            return stage.name
    return None
