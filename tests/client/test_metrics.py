"""`tempoconf_agent_config_version`: one series for the value in use, the old one removed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from tempoconf.client import ConfigClient
from tests.api.helpers import publish, start_rollout
from tests.client.helpers import PATH, revert, stable_served, version_series
from tests.client.live_api import LiveApi


def test_the_gauge_shows_exactly_the_value_in_use(live_api: LiveApi) -> None:
    stable = stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1", channel="canary")
    try:
        assert version_series(client.registry) == []  # nothing in use yet
        client.get()
        on_stable = version_series(client.registry)

        staged = start_rollout(live_api.store, PATH, {"v": 2})
        publish(live_api.store, PATH, index=0, name="canary", channel="canary")
        live_api.wait_served(PATH, staged.version, channel="canary")
        client.get()
        on_stage = version_series(client.registry)

        revert(live_api.store)
        live_api.wait_served(PATH, stable.version, channel="canary")
        client.get()
        back = version_series(client.registry)
        exposed = generate_latest(client.registry).decode()
    finally:
        client.close()

    labels = {"config_path": PATH, "commit": "3f2a9c1", "author": "alice@example.com"}
    assert on_stable == [{**labels, "stage": "stable", "version": stable.version}]
    assert on_stage == [{**labels, "stage": "canary", "version": staged.version}]
    assert back == on_stable
    assert f'version="{stable.version}"' in exposed and staged.version not in exposed
    assert version_series(client.registry) == []  # close() removes the client's series


def test_clients_do_not_collide_and_may_share_a_registry(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": 1})
    other_path = "myproject/other"
    stable_served(live_api, {"o": 1}, path=other_path)
    # Two clients with private registries (the default) in one process...
    private = [ConfigClient(live_api.url, PATH, client_id=f"h{n}") for n in range(2)]
    # ...and two clients of different configs on one shared registry.
    shared = CollectorRegistry()
    sharing = [
        ConfigClient(live_api.url, path, client_id="h1", registry=shared)
        for path in (PATH, other_path)
    ]
    try:
        for client in private + sharing:
            client.get()
        assert all(len(version_series(client.registry)) == 1 for client in private)
        assert sorted(s["config_path"] for s in version_series(shared)) == sorted(
            [PATH, other_path]
        )
    finally:
        for client in private + sharing:
            client.close()
