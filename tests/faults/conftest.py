"""Fixtures of the fault suite: a whole deployment per test (see stack.py), on each store backend.

Each test's processes are its own (Temporal server, worker, API, agents, database), so modules run
in parallel (`make test-faults`). Their logs are printed when a test fails. Recovery figures a
test measures are recorded with `figure(...)` and printed at the end of the run, under
"fault suite figures", with or without xdist.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tempoconf.store.store import Store
from tests.faults.stack import Stack, TcpProxy

FIGURE = "fault-figure"


_STACK = pytest.StashKey[Stack]()

LONG_FIRST = ("test_temporal_link_cut.py",)
"""Files whose tests mostly wait out a minute-long cut: handed out first (`--dist load` hands out
tests in collection order), since started last they would end the leg alone."""


@pytest.hookimpl(trylast=True)  # after tests/conftest.py's order of folders
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    items.sort(key=lambda item: not (item.path.parent == here and item.path.name in LONG_FIRST))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    running = item.stash.get(_STACK, None)
    if report.failed and running is not None:
        # Each process's log, in the failure's report (a teardown's output would be hidden).
        for name, text in running.logs():
            report.sections.append((f"log of {name}", text))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [
        f"{report.nodeid}: {value}"
        for reports in terminalreporter.stats.values()
        for report in reports
        for key, value in getattr(report, "user_properties", [])
        if key == FIGURE and getattr(report, "when", "call") == "call"
    ]
    if lines:
        terminalreporter.section("fault suite figures")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record (and print) one measured figure for the run's summary."""

    def record(text: str) -> None:
        print(text)
        request.node.user_properties.append((FIGURE, text))

    return record


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stack(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[Stack]:
    """A fresh database (migrated by `tempoconf db upgrade`) and a Temporal dev server; the test
    starts the worker, API and agents it needs. On PostgreSQL the worker reaches the database
    through `stack.proxy`, which the test may cut."""
    database_url = str(
        request.getfixturevalue("sqlite_url" if backend == "sqlite" else "postgresql_url")
    )
    proxy = None
    worker_url = database_url
    if backend == "postgresql":
        url = make_url(database_url)
        proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
        worker_url = url.set(host="127.0.0.1", port=proxy.port).render_as_string(
            hide_password=False
        )
    running = Stack(tmp=tmp_path, database_url=database_url, worker_database_url=worker_url)
    running.proxy = proxy
    request.node.stash[_STACK] = running
    try:
        running.upgrade_store()
        running.start_temporal()
        yield running
    finally:
        running.stop()
        if proxy is not None:
            proxy.close()


@pytest.fixture
def store(stack: Stack) -> Iterator[Store]:
    """The test's store, read directly (never through the proxy)."""
    opened = Store(stack.database_url)
    try:
        yield opened
    finally:
        opened.close()
