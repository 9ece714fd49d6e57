"""As a user sees it on a `tempoconf dev` stack: `rollout start` into a freeze or outside every
change window says it starts but waits, and why; a halt of such a rollout says nothing was
published; the Web UI links open the run's Current Details, a page the bundled Web UI has."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from tests.cli.conftest import RunningDev
from tests.fixtures.waiting import eventually_sync

VALUE = {"is_debug": False, "max_connections": 2000}
# The route of the Web UI's page that shows a run's Current Details, as its app bundle lists them.
CURRENT_DETAILS_ROUTE = "/(app)/namespaces/[namespace]/workflows/[workflow]/[run]/user-metadata"


def _request(namespace: str, **fields: Any) -> dict[str, Any]:
    return {
        "path": f"myproject/waits_{uuid.uuid4().hex[:8]}",
        "namespace": namespace,
        "value": VALUE,
        "stages": [{"channel": "canary", "cooldown": "1s"}],
        "author": "alice@example.com",
        **fields,
    }


def _start(dev: RunningDev, request: dict[str, Any], *flags: str) -> str:
    file = dev.workdir / f"{request['path'].rsplit('/', 1)[1]}.json"
    file.write_text(json.dumps(request))
    started = dev.cli("rollout", "start", file, *flags)
    assert started.returncode == 0, started.stdout + started.stderr
    return started.stdout


def _state(dev: RunningDev, request: dict[str, Any], state: str) -> dict[str, Any]:
    def reached() -> dict[str, Any]:
        shown = dev.cli(
            "rollout", "status", request["path"], "--namespace", request["namespace"], "--json"
        )
        progress: dict[str, Any] = json.loads(shown.stdout)
        assert progress["state"] == state, progress["phase"]
        return progress

    return eventually_sync(reached, what=f"{request['path']} {state}", timeout=30, interval=0.3)


def test_a_start_into_a_freeze_says_it_waits_and_its_halt_that_nothing_was_published(
    dev: RunningDev,
) -> None:
    namespace = f"frozen-{uuid.uuid4().hex[:6]}"
    frozen = dev.cli(
        "freeze", "start", "--namespace", namespace, "--reason", "release night", "--until", "2h"
    )
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    request = _request(namespace)
    try:
        started = _start(dev, request)
        waits = re.search(
            rf"^  waits        for the freeze to end: namespace {namespace} frozen by (\S+) since "
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: release night, until "
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC; no client gets the version until it ends$",
            started,
            re.MULTILINE,
        )
        assert waits is not None, started
        _state(dev, request, "frozen")

        # A request that passes freezes starts and says so, and why.
        passing = _request(namespace, override_freeze={"reason": "security fix"})
        started = _start(dev, passing)
        assert f"  freeze       passed (override_freeze: security fix): namespace {namespace}" in (
            started
        ), started

        halted = dev.cli(
            "rollout", "halt", request["path"], "--namespace", namespace, "--reason", "not tonight"
        )
        nothing = "the config has no stable version: clients get 404, as before"
        assert halted.returncode == 0, halted.stdout + halted.stderr
        assert halted.stdout.startswith(
            f"halt: accepted by rollout:{namespace}/{request['path']}: "
            f"halted: nothing was published; {nothing}\n"
            f"  state   halted: Halted before anything was published ({nothing}): not tonight\n"
        ), halted.stdout
        view = dev.cli("rollout", "status", request["path"], "--namespace", namespace).stdout
        assert "live stages" not in view and "back to" not in view, view
    finally:
        dev.cli("freeze", "end", "--namespace", namespace, "--reason", "test over")


def test_a_start_outside_its_change_windows_says_when_it_goes_on(dev: RunningDev) -> None:
    opens = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=3)
    closes = opens + timedelta(hours=1)
    window = {
        "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
        "from": opens.strftime("%H:%M"),
        "to": closes.strftime("%H:%M"),
        "timezone": "UTC",
    }
    request = _request("default", windows=[window])
    started = _start(dev, request)
    assert re.search(
        rf"^  waits        for its change window: no client gets the version before "
        rf"{opens.strftime('%a %H:%M')} UTC \(in (2h5\dm|3h00m)\)$",
        started,
        re.MULTILINE,
    ), started
    _state(dev, request, "waiting_for_window")
    halted = dev.cli("rollout", "halt", request["path"], "--reason", "wrong window")
    assert "halted: nothing was published" in halted.stdout, halted.stdout


def test_the_links_open_the_runs_current_details_in_the_bundled_web_ui(dev: RunningDev) -> None:
    request = _request("default")
    started = _start(dev, request, "--ui-port", str(dev.ui_port))
    workflow_id = f"rollout:default/{request['path']}"
    run_id = re.search(r"^  run id       (\S+)$", started, re.MULTILINE)
    assert run_id is not None, started
    link = (
        f"http://127.0.0.1:{dev.ui_port}/namespaces/default/workflows/"
        f"{quote(workflow_id, safe='')}/{run_id.group(1)}/user-metadata"
    )
    assert f"  Web UI       {link}\n" in started, started
    status = dev.cli("rollout", "status", request["path"], "--ui-port", str(dev.ui_port)).stdout
    assert f"  Web UI     {link}" in status, status

    # The Web UI the dev server serves has that page: its app bundle lists the route, and the
    # route's page shows the run's Current Details.
    ui = f"http://127.0.0.1:{dev.ui_port}"
    page = httpx.get(link, timeout=10)
    assert page.status_code == 200, page.text
    app = re.search(r'import\("(/_app/immutable/entry/app\.[\w-]+\.js)"\)', page.text)
    assert app is not None, page.text
    bundle = httpx.get(ui + app.group(1), timeout=10).text
    node = re.search(re.escape(f'"{CURRENT_DETAILS_ROUTE}":[') + r"(\d+),", bundle)
    assert node is not None, "the bundled Web UI has no Current Details page for a run"
    component = re.search(rf"\.\./nodes/{node.group(1)}\.[\w-]+\.js", bundle)
    assert component is not None
    code = httpx.get(f"{ui}/_app/immutable/{component.group(0)[3:]}", timeout=10).text
    assert "workflows.current-details" in code and "currentDetails" in code
