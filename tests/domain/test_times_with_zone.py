"""Every time tempoconf prints to a person says its zone: `2026-12-04 13:55:04 UTC` in running
text, or a table column under a header that ends in `(UTC)`."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from tempoconf.cli._format import utc_text, zoned_text
from tempoconf.cli.status import format_view
from tempoconf.gates.freezes import Freeze, describe_freeze
from tempoconf.operations.view import RolloutSnapshot, StoreContext
from tempoconf.rollout.progress import HealthReport, RolloutState
from tempoconf.settings import Settings
from tests.domain.test_approve_hints import FOUR_EYES, awaiting_approval

NOW = datetime(2026, 12, 4, 13, 55, 4, tzinfo=UTC)
# A clock time with no zone after it (an ISO 8601 `T...+00:00` carries its offset).
NAKED_TIME = re.compile(r"(?<![\dT:])\d\d:\d\d:\d\d(?![\d.:]| UTC)")


def test_zoned_text() -> None:
    assert zoned_text("2026-12-04T13:55:04.5+00:00") == "2026-12-04 13:55:04 UTC"
    assert zoned_text(datetime(2026, 12, 4, 14, 55, 4, tzinfo=UTC)) == "2026-12-04 14:55:04 UTC"
    assert zoned_text("2026-12-04T14:55:04+01:00", date=False) == "13:55:04 UTC"
    assert zoned_text(None) == "-"
    assert utc_text("2026-12-04T13:55:04+00:00") == "2026-12-04 13:55:04"


def test_the_status_view_gives_every_time_its_zone() -> None:
    state = awaiting_approval(FOUR_EYES)
    progress = state.progress
    progress.stage_started_at = (NOW - timedelta(minutes=3)).isoformat()
    progress.stages[0].published_at = progress.stage_started_at
    progress.hold_deadline = (NOW + timedelta(minutes=2)).isoformat()
    progress.state = RolloutState.HOLDING
    progress.last_health = HealthReport(healthy=True, summary="fine", checked_at=NOW.isoformat())
    snapshot = RolloutSnapshot(
        workflow_id="w",
        run_id="r",
        execution="Running",
        running=True,
        progress=json.loads(json.dumps(asdict(progress))),
    )
    context = StoreContext(started_by="alice@example.com", started_at=NOW - timedelta(minutes=4))
    view = format_view(
        snapshot,
        namespace="default",
        path="myproject/payment_limits",
        context=context,
        settings=Settings(),
        now=NOW,
    )
    assert "started    by alice@example.com at 2026-12-04 13:51:04 UTC" in view, view
    assert "stage      1/1 channel:canary, since 2026-12-04 13:52:04 UTC" in view, view
    assert "hold       ends in 2m (2026-12-04 13:57:04 UTC)" in view, view
    assert "health     healthy at 2026-12-04 13:55:04 UTC" in view, view
    assert "    2026-12-04 13:55:04 UTC  preparing → awaiting_approval" in view, view
    header = next(line for line in view.splitlines() if "STAGE" in line)
    assert "PUBLISHED (UTC)" in header, view
    # The table's rows say their zone in the header; every other line says it after the time.
    running_text = [line for line in view.splitlines() if not re.match(r"\s+\d+\s{2}\S", line)]
    assert [line for line in running_text if NAKED_TIME.search(line)] == [], view


def test_a_freeze_says_its_times_in_the_one_format() -> None:
    freeze = Freeze(
        id=1,
        namespace="default",
        reason="release night",
        by="alice",
        started_at=datetime(2026, 12, 4, 13, 55, 4, tzinfo=UTC),
        until=datetime(2026, 12, 4, 15, 55, 4, tzinfo=UTC),
    )
    assert describe_freeze(freeze) == (
        "namespace default frozen by alice since 2026-12-04 13:55:04 UTC: release night, "
        "until 2026-12-04 15:55:04 UTC"
    )


def test_log_lines_say_their_time_in_utc() -> None:
    import logging

    from tempoconf.cli.main import UTC_LOG_FORMATTER

    record = logging.LogRecord("tempoconf.worker", logging.WARNING, "", 0, "slow store", (), None)
    record.created = datetime(2026, 12, 4, 13, 55, 4, 123000, tzinfo=UTC).timestamp()
    record.msecs = 123.0
    assert UTC_LOG_FORMATTER.format(record) == (
        "2026-12-04 13:55:04.123 UTC WARNING tempoconf.worker: slow store"
    )
