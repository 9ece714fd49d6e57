"""`tempoconf agent` reports the version it applied: only once the file is written and --exec
succeeded, and the error when --exec failed (the gate on applied versions counts these)."""

from __future__ import annotations

from pathlib import Path

from tempoconf.store import AppliedState
from tempoconf.store.store import Store
from tests.cli.test_agent import Agent, live_api, start_agent  # noqa: F401 (fixtures)
from tests.client.helpers import PATH, stable_served
from tests.client.live_api import LiveApi
from tests.fixtures.waiting import eventually_sync

# The API writes apply reports every 5 s.
FLUSH_TIMEOUT = 20.0


def host_state(store: Store) -> AppliedState | None:
    states = [state for state in store.applied_states("default", PATH) if state.client == "host-1"]
    return states[0] if states else None


def test_the_agent_reports_applied_after_exec_succeeded_and_the_error_when_it_failed(
    live_api: LiveApi,  # noqa: F811
    start_agent: type[Agent],  # noqa: F811
    tmp_path: Path,
) -> None:
    first = stable_served(live_api, {"max_connections": 100})
    code, done = tmp_path / "exit-code", tmp_path / "done-at"
    code.write_text("0")
    # The reload takes a second, then says when it finished and exits with the code in the file.
    command = f'sleep 1; date +%s.%N > {done}; exit "$(cat {code})"'
    agent = start_agent(live_api.url, "--exec", command)

    applied = eventually_sync(
        lambda: (state := host_state(live_api.store)) and state.version == first.version and state,
        what="host-1 to report the first version applied",
        timeout=FLUSH_TIMEOUT,
    )
    assert applied.error is None and applied.applied_at is not None
    # Reported after the command ended, not when the file was written.
    assert applied.applied_at.timestamp() >= float(done.read_text())

    code.write_text("3")
    second = stable_served(live_api, {"max_connections": 200})
    agent.wait_value({"max_connections": 200})
    failed = eventually_sync(
        lambda: (state := host_state(live_api.store)) and state.error is not None and state,
        what="host-1 to report the failed apply",
        timeout=FLUSH_TIMEOUT,
    )
    assert failed.error == "--exec exited with 3"
    assert (failed.version, failed.error_version) == (first.version, second.version)
    assert "reported version" in agent.output()
    assert agent.terminate() == 0
