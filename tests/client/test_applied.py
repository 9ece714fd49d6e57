"""The SDK reports the version it applied once the subscribers returned (an exception reports the
error), to the live API; `report_applied=False` leaves it to the program."""

from __future__ import annotations

from tempoconf.client import ConfigClient, ConfigValue
from tests.client.helpers import PATH, stable_served
from tests.client.live_api import LiveApi
from tests.fixtures.waiting import eventually_sync

# The API writes apply reports every 5 s.
FLUSH_TIMEOUT = 20.0


def test_the_sdk_reports_applied_after_the_callback_and_the_error_when_it_raised(
    live_api: LiveApi,
) -> None:
    first = stable_served(live_api, {"workers": 4})
    applied: list[str] = []

    def apply(value: ConfigValue) -> None:
        if value.value == {"workers": 8}:
            raise ValueError("workers above the CPU count\nsecond line")
        applied.append(value.version)

    client = ConfigClient(live_api.url, PATH, client_id="h1", channel="canary")
    quiet = ConfigClient(live_api.url, PATH, client_id="h2", report_applied=False)
    client.subscribe(apply)
    quiet.subscribe(lambda value: None)
    try:
        assert client.get().version == first.version and quiet.get().version == first.version
        assert applied == [first.version]

        def states() -> dict[str, object]:
            return {s.client: s for s in live_api.store.applied_states("default", PATH)}

        state = eventually_sync(
            lambda: states().get("h1"), what="h1's apply report", timeout=FLUSH_TIMEOUT
        )
        assert (state.version, state.error, state.channel) == (first.version, None, "canary")

        second = stable_served(live_api, {"workers": 8})
        assert client.get().version == second.version
        failed = eventually_sync(
            lambda: (s := states().get("h1")) and s.error is not None and s,
            what="h1's failed apply",
            timeout=FLUSH_TIMEOUT,
        )
        assert failed.error == "ValueError: workers above the CPU count"
        assert (failed.version, failed.error_version) == (first.version, second.version)
        # h2 turned it off: nothing was sent for it (h1's reports since were flushed) ...
        assert "h2" not in states()
        # ... until the program sends its own, once it has applied
        quiet.report_applied(first.version)
        eventually_sync(lambda: "h2" in states(), what="h2's own report", timeout=FLUSH_TIMEOUT)
        assert states()["h2"].version == first.version
    finally:
        client.close()
        quiet.close()
