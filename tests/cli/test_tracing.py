"""Traces (docs/how-to/tracing.md): real rollouts on `tempoconf dev` traced with the console
exporter, their span trees read back from the processes' output: the guide run as written; a
revert; a start by the `temporal` CLI; the API's admin route continuing a caller's trace into the
rollout and on to a webhook; a hold across a killed worker. OTLP to a stand-in collector; the
switch and its errors; and, with no OTEL_* variable, no OpenTelemetry at all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tempoconf.cli.trace import Span, read_spans, render_trace, rollout_traces
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.tracing import TracingSettingsError, tracing_config
from tests.cli.conftest import (
    ROOT,
    TEMPOCONF,
    RunningDev,
    bash,
    cli_env,
    page,
    shell_blocks,
    start_dev,
    wait_for_output,
)
from tests.fixtures.waiting import eventually_sync

pytestmark = pytest.mark.timeout(300)

TRACED = {"OTEL_TRACES_EXPORTER": "console"}


def section_text() -> str:
    return page("how-to/tracing.md")


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDev]:
    """`tempoconf dev` traced to its output (dev.out, also dev.log as the guide names it), in a
    folder shaped like a clone (.venv, examples)."""
    clone = tmp_path_factory.mktemp("tracing") / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(Path(sys.prefix))
    shutil.copytree(ROOT / "examples", clone / "examples")
    (clone / "dev.log").symlink_to("dev.out")
    running = start_dev(clone.resolve(), default_data_dir=True, variables=TRACED)
    try:
        yield running
    finally:
        running.stop()


def children(span: Span) -> list[str]:
    return [child.name for child in span.children]


def walk(spans: list[Span]) -> Iterator[Span]:
    for span in spans:
        yield span
        yield from walk(span.children)


def named(roots: list[Span], name: str) -> list[Span]:
    return [span for span in walk(roots) if span.name == name]


# -- the switch ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("environ", "exporters"),
    [
        ({}, ()),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"}, ()),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ("otlp", "console")),
        ({"OTEL_TRACES_EXPORTER": "none"}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ()),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, ()),
    ],
)
def test_the_standard_variables_switch_tracing_on(
    environ: dict[str, str], exporters: tuple[str, ...]
) -> None:
    assert tracing_config(environ).exporters == exporters


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER is 'jaeger': give console"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc': tempoconf exports OTLP over HTTP only",
        ),
    ],
)
def test_unusable_variables_are_refused_naming_them(
    environ: dict[str, str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(TracingSettingsError, match=re.escape(message)):
        tracing_config(environ)
    # And the command says so, exit code 2, before doing anything.
    done = bash(
        ".venv/bin/tempoconf versions some/config",
        cwd=_venv_folder(tmp_path),
        env=cli_env(TEMPOCONF_DATA_DIR=str(tmp_path / "state"), **environ),
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


_WITHOUT_OTEL = """
import sys

class NoOpenTelemetry:  # as an install without the otel extra
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
from tempoconf.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_traces_asked_for_without_the_otel_extra_are_refused_saying_how_to_get_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "without_otel.py"
    script.write_text(_WITHOUT_OTEL)
    env = cli_env(TEMPOCONF_DATA_DIR=str(tmp_path / "state"))
    asked = bash(
        f"{sys.executable} {script} versions some/config",
        cwd=tmp_path,
        env={**env, "OTEL_TRACES_EXPORTER": "console"},
    )
    assert asked.returncode == 2, asked.stdout + asked.stderr
    assert (
        "OTEL_TRACES_EXPORTER=console asks for traces, but OpenTelemetry is not installed"
        in asked.stderr
    )
    assert "pip install 'tempoconf[otel]'" in asked.stderr
    # Without the variables, the same install runs its commands: this one to its own end.
    (tmp_path / "spans.log").write_text("no spans here\n")
    plain = bash(f"{sys.executable} {script} trace spans.log", cwd=tmp_path, env=env)
    assert plain.returncode == 1
    assert plain.stderr.startswith("tempoconf: no rollout trace in spans.log (0 span(s) read)")


def _venv_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "clone"
    folder.mkdir(exist_ok=True)
    if not (folder / ".venv").exists():
        (folder / ".venv").symlink_to(Path(sys.prefix))
    return folder


# -- one rollout, one trace ---------------------------------------------------------------------
def test_the_guide_runs_as_written_and_prints_the_rollouts_trace(dev: RunningDev) -> None:
    (block,) = shell_blocks(section_text())
    serve, start, show = block.commands
    # The fixture runs the first as start_dev does (free ports), its output in dev.log.
    assert serve.text == "OTEL_TRACES_EXPORTER=console .venv/bin/tempoconf dev > dev.log"
    assert start.text == (
        "OTEL_TRACES_EXPORTER=console .venv/bin/tempoconf rollout start "
        "examples/rollout-traced.json --wait > start.log"
    )
    started = bash(start.text, cwd=dev.workdir, env=dev.env, timeout=120)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "promoted" in (dev.workdir / "start.log").read_text()

    # The worker wrote the run's spans as it went: the last, RunWorkflow's, when it ended.
    def rollout_trace() -> list[list[Span]]:
        return rollout_traces(
            read_spans(
                (dev.workdir / "dev.log").read_text() + (dev.workdir / "start.log").read_text()
            ),
            "rollout:default/myproject/traced",
        )

    (roots,) = eventually_sync(rollout_trace, what="the rollout's trace", timeout=30)
    shown = bash(show.text, cwd=dev.workdir, env=dev.env)
    assert shown.returncode == 0, shown.stderr
    expected = section_text().split(show.text, 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    assert _shape(shown.stdout) == _shape(expected), shown.stdout

    # One trace, rooted in the CLI's StartWorkflow; the run below it, in the dev stack.
    (root,) = roots
    assert (root.name, root.service) == ("StartWorkflow:ConfigRollout", "tempoconf-cli")
    (run,) = root.children
    assert (run.name, run.service) == ("RunWorkflow:ConfigRollout", "tempoconf-dev")
    assert {span.trace_id for span in walk(roots)} == {root.trace_id}
    # The steps, in order, each stage's publish, hold and check.
    steps = [
        (child.name, child.attributes.get("tempoconf.stage"))
        for child in run.children
        if not child.name.startswith("StartActivity:")
    ]
    assert steps == [
        ("prepare", None),
        ("publish", "channel:canary"),
        ("hold", "channel:canary"),
        ("check", "channel:canary"),
        ("publish", "50%"),
        ("hold", "50%"),
        ("check", "50%"),
        ("promote", None),
    ]
    # A hold is one span, though its timer spans workflow tasks, and ends at least a cooldown
    # (2 s) after its stage's publish step began. Not the hold span's own length: a loaded CI run
    # once recorded one just under 2 s (cause not found; the span's start is the tracer's reading
    # of workflow time, the hold's deadline the workflow's own), and what an operator relies on is
    # that the stage was out for its whole cooldown.
    holds = named(roots, "hold")
    published = {span.attributes["tempoconf.stage"]: span for span in named(roots, "publish")}
    assert [hold.attributes["tempoconf.stage"] for hold in holds] == ["channel:canary", "50%"]
    for hold in holds:
        publish = published[hold.attributes["tempoconf.stage"]]
        assert (hold.end - publish.start).total_seconds() >= 2.0, render_trace(roots)
    # Activities under their steps, with the store's statements below each.
    (prepare,) = named(roots, "prepare")
    assert children(prepare) == ["StartActivity:prepare_rollout"]
    assert children(prepare.children[0]) == ["RunActivity:prepare_rollout"]
    for step, activity in (
        ("publish", "publish_stage"),
        ("check", "check_stage_health"),
        ("promote", "promote_version"),
    ):
        for span in named(roots, step):
            runs = [
                grandchild
                for child in span.children
                for grandchild in child.children
                if grandchild.name == f"RunActivity:{activity}"
            ]
            assert len(runs) == 1, render_trace(roots)
            store = [child for child in runs[0].children if "db.system.name" in child.attributes]
            assert store and all(s.attributes["db.system.name"] == "sqlite" for s in store)
            assert {s.name for s in store} >= {"SELECT"}
    # Everything the run did is inside the run's time.
    assert all(run.start <= span.start and span.end <= run.end for span in walk(run.children))


def _shape(tree: str) -> list[str]:
    """The tree's lines without what changes from run to run: durations, and which statements."""
    shape = []
    for line in tree.strip().splitlines():
        line = re.sub(r"  \d+(\.\d+)?(ms|s)\b", "  T", line)
        shape.append(re.sub(r"\d+ statements?: .*?  T", "statements  T", line).rstrip())
    return shape


def _trace_of(dev: RunningDev, workflow_id: str, *files: Path, timeout: float = 60) -> list[Span]:
    """The roots of the rollout's trace, once its run ended (the RunWorkflow span is its last)."""

    def found() -> list[list[Span]]:
        text = "".join(path.read_text() for path in (dev.output, *files))
        return rollout_traces(read_spans(text), workflow_id)

    (roots,) = eventually_sync(found, what=f"the trace of {workflow_id}", timeout=timeout)
    return roots


def test_an_unhealthy_stage_is_traced_to_its_revert(dev: RunningDev) -> None:
    path = f"myproject/traced-revert-{uuid.uuid4().hex[:6]}"
    request = json.loads((ROOT / "examples" / "rollout-traced.json").read_text())
    # No client reports, and no data fails the check: the canary stage reverts.
    request.update(
        path=path,
        stages=[{"channel": "canary", "cooldown": "1s"}],
        health=[
            {"kind": "reports", "max_error_ratio": 0.05, "min_clients": 1, "on_no_data": "fail"}
        ],
    )
    (dev.workdir / "revert.json").write_text(json.dumps(request))
    started = bash(
        "OTEL_TRACES_EXPORTER=console .venv/bin/tempoconf rollout start revert.json --wait "
        "> revert.log",
        cwd=dev.workdir,
        env=dev.env,
    )
    assert "reverted" in (dev.workdir / "revert.log").read_text(), started.stderr
    roots = _trace_of(dev, f"rollout:default/{path}", dev.workdir / "revert.log")
    (run,) = named(roots, "RunWorkflow:ConfigRollout")
    steps = [c for c in run.children if not c.name.startswith("StartActivity:")]
    assert [step.name for step in steps] == ["prepare", "publish", "hold", "check", "revert"]
    check, revert = steps[-2:]
    assert check.error is not None and "unhealthy" in check.error
    assert revert.error is None
    assert revert.attributes["tempoconf.outcome"] == "reverted"
    assert "RunActivity:revert_rollout" in [
        grandchild.name for child in revert.children for grandchild in child.children
    ]


def test_a_rollout_started_with_the_temporal_cli_is_a_trace_rooted_in_its_run(
    dev: RunningDev,
) -> None:
    """No span of the starter to continue: the run is the root, and still one trace."""
    workflow_id = f"traced-temporal-cli-{uuid.uuid4().hex[:6]}"
    request = {
        "path": f"myproject/{workflow_id}",
        "value": {"a": 1},
        "stages": [{"channel": "c", "cooldown": "1s"}],
    }
    started = subprocess.run(
        [
            str(temporal_cli_path()), "workflow", "start", "--type", "ConfigRollout",
            "--task-queue", "tempoconf", "--workflow-id", workflow_id,
            "--input", json.dumps(request), "--fail-existing",
            "--address", dev.temporal_address,
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    (root,) = _trace_of(dev, workflow_id)
    assert root.name == "RunWorkflow:ConfigRollout" and root.parent_id is None
    assert [c.name for c in root.children if not c.name.startswith("StartActivity:")] == [
        "prepare",
        "publish",
        "hold",
        "check",
        "promote",
    ]
    assert {span.trace_id for span in walk([root])} == {root.trace_id}


def test_a_hold_across_a_killed_worker_is_still_one_trace(dev: RunningDev) -> None:
    """The worker SIGKILLed during a hold, another started: the second replays the run and ends
    its spans with the ids the first gave them (the workflow's deterministic random), so the
    spans of both processes make one tree, the hold one span."""
    queue = f"traced-{uuid.uuid4().hex[:6]}"
    env = {**dev.env, "TEMPOCONF_TASK_QUEUE": queue, **TRACED}
    outputs = [dev.workdir / f"{queue}-worker-{n}.out" for n in (1, 2)]

    def worker(output: Path) -> subprocess.Popen[bytes]:
        with open(output, "wb") as sink:
            return subprocess.Popen(
                [str(TEMPOCONF), "worker"], cwd=dev.workdir, env=env, stdout=sink, stderr=sink
            )

    path = f"myproject/{queue}"
    request = {"path": path, "value": {"a": 1}, "stages": [{"channel": "c", "cooldown": "4s"}]}
    (dev.workdir / f"{queue}.json").write_text(json.dumps(request))
    first = worker(outputs[0])
    second = None
    try:
        wait_for_output(outputs[0], "polling task queue", first, 30)
        started = bash(f".venv/bin/tempoconf rollout start {queue}.json", cwd=dev.workdir, env=env)
        assert started.returncode == 0, started.stderr
        (dev.workdir / f"{queue}-start.out").write_text(started.stdout)

        def holding() -> bool:
            """The hold begun and its audit written: only its timer is pending (a kill during
            an activity would wait out the activity's timeout)."""
            spans = read_spans(outputs[0].read_text())
            published = [s.end for s in spans if s.name == "publish"]
            return bool(published) and any(
                s.name == "RunActivity:record_transition" and s.start > published[0] for s in spans
            )

        eventually_sync(holding, what="the hold begun, its audit written", timeout=30)
        first.kill()
        first.wait()
        second = worker(outputs[1])
        # A workflow task the killed worker had polled for waits out its timeout (10 s) first.
        start = dev.workdir / f"{queue}-start.out"
        roots = _trace_of(dev, f"rollout:default/{path}", *outputs, start, timeout=120)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
    (root,) = roots
    assert root.name == "StartWorkflow:ConfigRollout"
    (run,) = root.children
    steps = [c for c in run.children if not c.name.startswith("StartActivity:")]
    assert [step.name for step in steps] == ["prepare", "publish", "hold", "check", "promote"]
    by_worker = [{s.span_id for s in read_spans(output.read_text())} for output in outputs]
    prepare, _, hold, *_ = steps
    assert prepare.span_id in by_worker[0] and hold.span_id in by_worker[1]
    assert run.span_id in by_worker[1]
    assert hold.seconds >= 4.0


# -- the admin route, the caller's trace, a webhook ------------------------------------------------
class _Hook(BaseHTTPRequestHandler):
    traceparents: list[str | None]

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.traceparents.append(self.headers.get("traceparent"))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[str, list[str | None]]]:
    traceparents: list[str | None] = []
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Hook", (_Hook,), {"traceparents": traceparents})
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", traceparents
    finally:
        server.shutdown()
        server.server_close()


def test_a_rollout_started_through_the_api_continues_the_callers_trace(
    dev: RunningDev, hook: tuple[str, list[str | None]]
) -> None:
    url, traceparents = hook
    trace_id, caller = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    path = f"myproject/traced-api-{uuid.uuid4().hex[:6]}"
    request = json.loads((ROOT / "examples" / "rollout-traced.json").read_text())
    request.update(path=path, stages=[{"channel": "canary", "cooldown": "1s"}], webhooks=[url])
    answer = httpx.post(
        f"{dev.api_url}/v1/admin/rollouts",
        json=request,
        headers={"traceparent": f"00-{trace_id}-{caller}-01"},
        timeout=30,
    )
    assert answer.status_code in (200, 201, 202), answer.text

    def trace() -> list[Span]:
        spans = [
            span for span in read_spans(dev.output.read_text()) if span.trace_id == f"0x{trace_id}"
        ]
        ended = any(span.name.startswith("RunWorkflow:") for span in spans)
        webhooks = len([s for s in spans if s.name == "RunActivity:notify_webhook"])
        return spans if ended and webhooks >= 1 else []

    spans = eventually_sync(trace, what="the rollout's trace, its webhooks sent", timeout=60)
    (roots,) = rollout_traces(spans)
    # The admin request continues the caller's span (not in any file: the caller is this test).
    (root,) = roots
    assert root.name == "POST /v1/admin/rollouts"
    assert root.parent_id == f"0x{caller}"
    assert root.attributes["http.response.status_code"] == answer.status_code
    assert "StartWorkflow:ConfigRollout" in children(root)
    (run,) = named(roots, "RunWorkflow:ConfigRollout")
    assert [c.name for c in run.children if not c.name.startswith("StartActivity:")] == [
        "prepare",
        "publish",
        "hold",
        "check",
        "promote",
    ]
    # The webhook's POST is a span of its activity, and carries the trace on to the receiver.
    notify = named(roots, "RunActivity:notify_webhook")
    posts = [child for span in notify for child in span.children if child.name == "POST"]
    # (The instrumentation's attribute names: url.full once it moves to the stable conventions.)
    assert posts and all(
        post.attributes.get("url.full", post.attributes.get("http.url")) == url for post in posts
    )
    assert traceparents and all(
        header is not None and header.split("-")[1] == trace_id for header in traceparents
    )
    # Polls and reports stay untraced: once the admin request made after them has its span,
    # theirs would be written too.
    poll = httpx.get(f"{dev.api_url}/v1/configs/{path}", timeout=10)
    assert poll.status_code == 200
    report = {"path": path, "client": "c1", "version": poll.json()["version"], "ok": 1, "failed": 0}
    assert httpx.post(f"{dev.api_url}/v1/reports", json=report, timeout=10).is_success
    assert httpx.get(f"{dev.api_url}/v1/admin/rollouts/{path}", timeout=10).status_code == 200

    def after_the_admin_read() -> list[Span]:
        spans = read_spans(dev.output.read_text())
        admin_read = [s for s in spans if s.name == "GET /v1/admin/rollouts/{path}"]
        return spans if admin_read else []

    spans = eventually_sync(after_the_admin_read, what="the admin read's span", timeout=30)
    paths = {str(s.attributes.get("url.path", "")) for s in spans}
    assert not {p for p in paths if p.startswith(("/v1/configs", "/v1/reports"))}


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]]

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        self.received.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_otlp_endpoint_alone_exports_the_commands_spans_before_it_exits(
    dev: RunningDev,
) -> None:
    """OTLP over HTTP to a collector (here a stand-in that decodes what it gets): the CLI's
    batched spans are sent at its exit, which skips the interpreter's own teardown."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[tuple[str, bytes]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("C", (_Collector,), {"received": received}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = f"myproject/traced-otlp-{uuid.uuid4().hex[:6]}"
        (dev.workdir / "otlp.json").write_text(json.dumps({"path": path, "value": {"a": 1}}))
        started = bash(
            ".venv/bin/tempoconf rollout start otlp.json",
            cwd=dev.workdir,
            env={
                **dev.env,
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
                "OTEL_SERVICE_NAME": "release-bot",
            },
        )
        assert started.returncode == 0, started.stderr
    finally:
        server.shutdown()
        server.server_close()
    spans = []
    for where, body in received:
        assert where == "/v1/traces"
        export = ExportTraceServiceRequest.FromString(body)
        for resource in export.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                spans += [(service["service.name"], span.name) for span in scope.spans]
    assert ("release-bot", "StartWorkflow:ConfigRollout") in spans
    assert not read_spans(started.stdout)  # nothing on the console: otlp only


# -- off ------------------------------------------------------------------------------------------
_UNTRACED_WORKER = """
import asyncio, json, sys, uuid
from tempoconf.cli.main import _start_tracing
from tempoconf.cli.worker import build_worker
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tempoconf.temporal.connection import temporal_connection

async def main() -> None:
    _start_tracing("worker")
    settings = Settings.from_env()
    client = await temporal_connection(settings).connect()
    store = Store(sys.argv[1], migrate=True)
    queue = f"untraced-{uuid.uuid4().hex[:8]}"
    worker = build_worker(client, store, task_queue=queue)
    async with worker:
        result = await client.execute_workflow(
            "ConfigRollout",
            {"path": "untraced/config", "value": {"a": 1}},
            id=f"untraced-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
    print(json.dumps({
        "outcome": result["outcome"],
        "client_plugins": len(client.config()["plugins"]),
        "client_interceptors": len(client.config()["interceptors"]),
        "worker_interceptors": [type(i).__name__ for i in worker.config()["interceptors"]],
        "opentelemetry": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
    }))

asyncio.run(main())
"""


def test_without_otel_variables_nothing_of_opentelemetry_runs(
    dev: RunningDev, tmp_path: Path
) -> None:
    """A worker process with no OTEL_* variable runs a real rollout: no plugin, no tracing
    interceptor, OpenTelemetry not even imported, and no span written."""
    script = tmp_path / "untraced_worker.py"
    script.write_text(_UNTRACED_WORKER)
    done = bash(
        f"{sys.executable} {script} sqlite:///{tmp_path / 'store.db'}",
        cwd=tmp_path,
        env={**dev.env, "OTEL_SERVICE_NAME": "ignored-without-an-exporter"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "outcome": "promoted",
        "client_plugins": 0,
        "client_interceptors": 0,
        "worker_interceptors": ["ShortFailures", "StoreHeartbeats"],
        "opentelemetry": [],
    }
    assert read_spans(done.stdout + done.stderr) == []
