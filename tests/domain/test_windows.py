"""Change windows (tempoconf.gates.windows): openings across weekends, overnight windows and daylight
saving time in Europe/Berlin and America/New_York (2026: Berlin springs forward on 29 March and
falls back on 25 October; New York on 8 March and 1 November)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tempoconf.gates.windows import ChangeWindow, is_open, next_opening
from tempoconf.problems import InvalidRequestError
from tempoconf.rollout.request import parse_rollout_request

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
WEEKDAYS = ["mon", "tue", "wed", "thu", "fri"]


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def office(zone: str = BERLIN) -> list[ChangeWindow]:
    return [ChangeWindow(days=WEEKDAYS, start="09:00", end="17:00", timezone=zone)]


def test_no_windows_means_always_open_and_nothing_to_wait_for() -> None:
    assert is_open([], utc(2026, 3, 29, 1, 0))
    assert next_opening([], utc(2026, 3, 29, 1, 0)) is None


def test_office_hours_open_and_close_on_local_time() -> None:
    # Wednesday 2026-01-14: Berlin is UTC+1.
    assert not is_open(office(), utc(2026, 1, 14, 7, 59))
    assert is_open(office(), utc(2026, 1, 14, 8, 0))
    assert is_open(office(), utc(2026, 1, 14, 15, 59))
    assert not is_open(office(), utc(2026, 1, 14, 16, 0))  # 17:00 local: closed ([from, to))
    opening = next_opening(office(), utc(2026, 1, 14, 16, 0))
    assert opening is not None
    assert opening.at == utc(2026, 1, 15, 8, 0)
    assert opening.label() == "Thu 09:00 Europe/Berlin"


def test_open_now_opens_now() -> None:
    now = utc(2026, 1, 14, 10, 30)
    opening = next_opening(office(), now)
    assert opening is not None and opening.at == now


def test_the_weekend_that_springs_forward_in_berlin() -> None:
    # Friday 2026-03-27 17:00 CET is 16:00 UTC; the next opening is Monday 09:00 CEST, 07:00 UTC.
    friday_evening = utc(2026, 3, 27, 16, 0)
    assert not is_open(office(), friday_evening)
    opening = next_opening(office(), friday_evening)
    assert opening is not None
    assert opening.at == utc(2026, 3, 30, 7, 0)
    assert opening.label() == "Mon 09:00 Europe/Berlin"


def test_the_weekend_that_falls_back_in_new_york() -> None:
    # Friday 2026-10-30 17:00 EDT is 21:00 UTC; Monday 09:00 EST is 14:00 UTC.
    opening = next_opening(office(NEW_YORK), utc(2026, 10, 30, 21, 0))
    assert opening is not None
    assert opening.at == utc(2026, 11, 2, 14, 0)
    assert opening.label() == "Mon 09:00 America/New_York"


def test_a_skipped_local_time_is_shifted_forward_by_the_gap() -> None:
    # Berlin 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist and means 03:30 CEST.
    windows = [ChangeWindow(days=["sun"], start="02:30", end="04:00", timezone=BERLIN)]
    assert not is_open(windows, utc(2026, 3, 29, 1, 15))  # 03:15 CEST
    assert is_open(windows, utc(2026, 3, 29, 1, 30))  # 03:30 CEST
    assert is_open(windows, utc(2026, 3, 29, 1, 59))
    assert not is_open(windows, utc(2026, 3, 29, 2, 0))  # 04:00 CEST
    opening = next_opening(windows, utc(2026, 3, 29, 0, 0))
    assert opening is not None
    assert opening.at == utc(2026, 3, 29, 1, 30)
    assert opening.label() == "Sun 03:30 Europe/Berlin"


def test_a_window_inside_the_skipped_hour_is_empty_that_day() -> None:
    # 02:00-03:00 on the spring-forward Sunday has no instant: the next is a week later, in CEST.
    windows = [ChangeWindow(days=["sun"], start="02:00", end="03:00", timezone=BERLIN)]
    for minute in (0, 30, 59):
        assert not is_open(windows, utc(2026, 3, 29, 0, minute))
        assert not is_open(windows, utc(2026, 3, 29, 1, minute))
    opening = next_opening(windows, utc(2026, 3, 28, 12, 0))
    assert opening is not None
    assert opening.at == utc(2026, 4, 5, 0, 0)
    assert opening.label() == "Sun 02:00 Europe/Berlin"


def test_new_york_springs_forward_too() -> None:
    # 2026-03-08: 02:00 EST becomes 03:00 EDT; 02:15 means 03:15 EDT, 07:15 UTC.
    windows = [ChangeWindow(days=["sun"], start="02:15", end="05:00", timezone=NEW_YORK)]
    opening = next_opening(windows, utc(2026, 3, 8, 5, 0))
    assert opening is not None
    assert opening.at == utc(2026, 3, 8, 7, 15)
    assert not is_open(windows, utc(2026, 3, 8, 7, 14))
    assert is_open(windows, utc(2026, 3, 8, 8, 59))  # 04:59 EDT
    assert not is_open(windows, utc(2026, 3, 8, 9, 0))  # 05:00 EDT


def test_a_repeated_local_time_means_its_first_occurrence() -> None:
    # Berlin 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30-02:45 is the first pass, in CEST.
    windows = [ChangeWindow(days=["sun"], start="02:30", end="02:45", timezone=BERLIN)]
    assert is_open(windows, utc(2026, 10, 25, 0, 30))  # 02:30 CEST
    assert not is_open(windows, utc(2026, 10, 25, 0, 45))
    assert not is_open(windows, utc(2026, 10, 25, 1, 35))  # 02:35 CET: the second pass
    opening = next_opening(windows, utc(2026, 10, 24, 22, 0))
    assert opening is not None and opening.at == utc(2026, 10, 25, 0, 30)


def test_a_window_across_the_repeated_hour_lasts_an_hour_longer() -> None:
    # New York 2026-11-01: 01:30 EDT (05:30 UTC) to 02:30 EST (07:30 UTC): two hours long.
    windows = [ChangeWindow(days=["sun"], start="01:30", end="02:30", timezone=NEW_YORK)]
    assert not is_open(windows, utc(2026, 11, 1, 5, 29))
    assert is_open(windows, utc(2026, 11, 1, 5, 30))
    assert is_open(windows, utc(2026, 11, 1, 6, 45))  # 01:45 EST: the repeated hour
    assert is_open(windows, utc(2026, 11, 1, 7, 29))
    assert not is_open(windows, utc(2026, 11, 1, 7, 30))


def test_an_overnight_window_belongs_to_the_day_it_opens_on() -> None:
    # Friday 22:00 to Saturday 06:00, Berlin (January: UTC+1).
    windows = [ChangeWindow(days=["fri"], start="22:00", end="06:00", timezone=BERLIN)]
    assert not is_open(windows, utc(2026, 1, 16, 20, 59))  # Fri 21:59
    assert is_open(windows, utc(2026, 1, 16, 21, 0))  # Fri 22:00
    assert is_open(windows, utc(2026, 1, 17, 4, 59))  # Sat 05:59
    assert not is_open(windows, utc(2026, 1, 17, 5, 0))  # Sat 06:00
    assert not is_open(windows, utc(2026, 1, 17, 21, 30))  # Sat 22:30: Saturday is not listed
    opening = next_opening(windows, utc(2026, 1, 17, 5, 0))
    assert opening is not None
    assert opening.at == utc(2026, 1, 23, 21, 0)
    assert opening.label() == "Fri 22:00 Europe/Berlin"


def test_an_overnight_window_across_the_spring_forward_night() -> None:
    # Saturday 2026-03-28 22:00 CET (21:00 UTC) to Sunday 06:00 CEST (04:00 UTC): 7 hours.
    windows = [ChangeWindow(days=["sat"], start="22:00", end="06:00", timezone=BERLIN)]
    assert is_open(windows, utc(2026, 3, 28, 21, 0))
    assert is_open(windows, utc(2026, 3, 29, 3, 59))
    assert not is_open(windows, utc(2026, 3, 29, 4, 0))


def test_until_midnight_and_several_windows() -> None:
    windows = [
        ChangeWindow(days=["sat"], start="20:00", end="24:00", timezone="UTC"),
        ChangeWindow(days=["mon"], start="09:00", end="10:00", timezone=NEW_YORK),
    ]
    assert is_open(windows, utc(2026, 1, 17, 23, 59))
    assert not is_open(windows, utc(2026, 1, 18, 0, 0))
    # From Sunday, the New York Monday window (14:00 UTC) comes before the next Saturday.
    opening = next_opening(windows, utc(2026, 1, 18, 0, 0))
    assert opening is not None
    assert opening.at == utc(2026, 1, 19, 14, 0)
    assert opening.label() == "Mon 09:00 America/New_York"


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        is_open(office(), datetime(2026, 1, 14, 10, 0))


def _problems(windows: object) -> dict[str, str]:
    with pytest.raises(InvalidRequestError) as raised:
        parse_rollout_request({"path": "a/b", "value": 1, "windows": windows})
    return {problem.pointer: problem.message for problem in raised.value.problems}


def test_bad_windows_are_refused_naming_the_field() -> None:
    problems = _problems(
        [
            {"days": ["mon", "someday"], "from": "9:00", "to": "24:01", "timezone": "Mars/Olympus"},
            {"days": [], "from": "09:00", "to": "09:00", "timezone": "UTC"},
            {"days": ["mon"], "from": "24:00", "to": "10:00", "timezone": "../etc/passwd"},
            {"days": ["mon"], "from": "09:00", "to": "10:00", "timezone": "UTC", "tz": "x"},
            {"days": ["mon"], "from": "09:00", "to": "10:00", "timezone": "Europe"},
        ]
    )
    assert "unknown day(s) ['someday']" in problems["/windows/0/days"]
    assert "'9:00' is not a local time HH:MM" in problems["/windows/0/from"]
    assert "'24:01' is not a local time HH:MM" in problems["/windows/0/to"]
    assert "unknown time zone 'Mars/Olympus'" in problems["/windows/0/timezone"]
    assert "/windows/1/days" in problems
    assert "unknown time zone '../etc/passwd'" in problems["/windows/2/timezone"]
    assert problems["/windows/3/tz"] == "unknown field 'tz'"
    assert "unknown time zone 'Europe'" in problems["/windows/4/timezone"]  # a folder of zones


def test_equal_from_and_to_and_a_from_of_24_are_refused() -> None:
    assert (
        "the same time"
        in _problems([{"days": ["mon"], "from": "09:00", "to": "09:00", "timezone": "UTC"}])[
            "/windows/0"
        ]
    )
    assert (
        "24:00 is only for 'to'"
        in _problems([{"days": ["mon"], "from": "24:00", "to": "09:00", "timezone": "UTC"}])[
            "/windows/0"
        ]
    )


def test_good_windows_reach_the_plan() -> None:
    from tempoconf.rollout.plan import plan_from_request

    request = parse_rollout_request(
        {
            "path": "a/b",
            "value": 1,
            "windows": [{"days": WEEKDAYS, "from": "09:00", "to": "17:00", "timezone": BERLIN}],
            "override_freeze": {"reason": "hotfix"},
        }
    )
    plan = plan_from_request(request, "0123456789abcdef")
    assert plan.windows == office()
    assert plan.windows[0].describe() == "mon-fri 09:00-17:00 Europe/Berlin"
    assert plan.override_freeze == "hotfix"
    plain = plan_from_request(parse_rollout_request({"path": "a/b", "value": 1}), "0" * 16)
    assert plain.windows == [] and plain.override_freeze is None


def test_time_zones_load_without_a_system_tz_database() -> None:
    """A slim image may have no /usr/share/zoneinfo: the `tzdata` dependency serves zoneinfo."""
    import zoneinfo

    zoneinfo.reset_tzpath(to=[])
    try:
        zone = zoneinfo.ZoneInfo.no_cache(BERLIN)
        assert datetime(2026, 7, 1, tzinfo=zone).utcoffset().total_seconds() == 7200  # type: ignore[union-attr]
    finally:
        zoneinfo.reset_tzpath()
