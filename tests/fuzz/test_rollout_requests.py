"""hypothesis over the rollout request, through the workflow: a real dev server, a real worker and
a real store on both backends (docs/contract.md, The rollout request).

Malformed requests (wrong types, missing fields, bad durations and stages, unknown keys, huge,
NUL and invalid-Unicode strings, values nested too deep, no input or two) are started as a
`ConfigRollout` under the config's own workflow id. Each must fail fast as a non-retryable
InvalidRolloutRequest, in one attempt, with nothing published or stored and no lock left, and
the workflow id free again: a valid rollout of the same config under the same id is promoted
right after. Valid requests drawn the same way pass validation, the domain's and the workflow's.
HYPOTHESIS_SEED=N replays a run (each test prints its seed).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tempoconf.problems import InvalidRequestError
from tempoconf.rollout.activity_io import INVALID_REQUEST_ERROR
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.rollout.stages import StageSpec, unwidening_stages
from tempoconf.rollout.strategy import StrategySpec
from tempoconf.storable import MAX_JSON_DEPTH
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE
from tests.fixtures.temporal import rollout_result
from tests.store.helpers import snapshot_of

pytestmark = pytest.mark.fuzz

NAMESPACE = "default"
PATH = "<path>"
"""Stands for the example's own config path (a fresh one per example)."""
FAST = 10.0
"""Seconds a refused request may take to fail (generous: it is one activity attempt)."""
EXAMPLES = int(os.environ.get("TEMPOCONF_FUZZ_EXAMPLES", "5")) * 6
SEED = int(os.environ.get("HYPOTHESIS_SEED", random.SystemRandom().randrange(2**32)))


@pytest_asyncio.fixture(params=["sqlite", "postgresql"])
async def harness(
    request: pytest.FixtureRequest, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> AsyncIterator[tuple[Client, Store, str]]:
    """A worker on its own task queue over a fresh store of each backend; workflows skip time."""
    from tempoconf.cli.worker import build_worker

    url = str(
        request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgresql_url")
    )
    store = Store(url, migrate=True)
    task_queue = f"tempoconf-requests-{uuid.uuid4().hex[:8]}"
    try:
        async with build_worker(temporal_env.client, store, task_queue=task_queue):
            yield temporal_env.client, store, task_queue
    finally:
        store.close()


# -- strategies -----------------------------------------------------------------------------------
def _base() -> dict[str, Any]:
    return {
        "path": PATH,
        "value": {"workers": 4, "debug": False},
        "stages": [{"channel": "canary", "cooldown": "1s"}, {"percentile": 50}],
        "message": "fuzzed",
    }


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


_NOT_A_STRING = st.one_of(
    st.integers(), st.booleans(), st.none(), st.lists(st.integers(), max_size=2)
)
_STORABLE = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
"""Any character the store can keep (no NUL, no lone surrogate)."""
_BAD_DURATION = st.one_of(
    st.sampled_from(
        ["five minutes", "-5s", "5", "1h30", "", " ", "1e400", "9999999999h", "5 m", "P5M", "∞"]
    ).filter(lambda text: text != "5"),
    # (`{}` is no bad duration: an empty protobuf Duration is zero, as the contract says)
    st.sampled_from([-1, -0.5, 1e300, True, [], {"seconds": "x"}, {"seconds": -1}, {"minutes": 5}]),
    st.integers(max_value=-1),
)
_BAD_TEXT = st.one_of(
    st.text(min_size=1, max_size=20).map(lambda text: text + "\x00"),
    st.just("\ud800 lone surrogate"),
    st.integers(min_value=201, max_value=20_000).map(lambda size: "x" * size),
)
_BAD_STAGE = st.one_of(
    st.just({}),
    st.just({"cooldown": "5s"}),
    st.floats(min_value=100.01, max_value=1e9).map(lambda p: {"percentile": p}),
    st.floats(max_value=-0.01, min_value=-1e9).map(lambda p: {"percentile": p}),
    st.sampled_from(["50", True, None, [50]]).map(lambda p: {"percentile": p}),
    st.just({"percentile": 10.001}),
    st.just({"channel": ""}),
    st.just({"channel": "x" * 101}),
    st.just({"channel": "can\x00ary"}),
    st.just({"channel": "canary", "cooldwon": "1s"}),
    st.just({"channel": "canary", "expiration": "0s"}),
    st.just({"labels": {"region": 5}}),
    _BAD_DURATION.map(lambda d: {"channel": "canary", "cooldown": d}),
    _NOT_A_STRING.filter(lambda v: v is not None).map(lambda v: {"channel": v}),
    st.just("canary"),
    st.just(["canary"]),
    st.just({"percentile": 10, "health": [{"kind": "nope"}]}),
    st.just({"percentile": 10, "health": [{"kind": "reports"}]}),
)
_KNOWN = set(_base()) | {
    "namespace",
    "version",
    "strategy",
    "webhooks",
    "default_cooldown_time",
    "default_expiration_time",
    "health",
    "author",
    "commit",
}


def _set(key: str, value: Any) -> Any:
    return lambda request: {**request, key: value}


def _without(*keys: str) -> Any:
    return lambda request: {k: v for k, v in request.items() if k not in keys}


_MUTATIONS = st.one_of(
    # wrong types
    _NOT_A_STRING.map(lambda v: ("path is not a string", _set("path", v))),
    st.sampled_from([5, None, "canary", {"channel": "canary"}]).map(
        lambda v: ("stages is not a list", _set("stages", v))
    ),
    _NOT_A_STRING.filter(lambda v: v is not None).map(lambda v: ("author", _set("author", v))),
    st.sampled_from(
        ["fast", 5, [], {"linear": {"step": "10"}}, {"linear": {}, "exponential": {}}]
    ).map(lambda v: ("strategy", _set("strategy", v))),
    st.sampled_from(["http://x", ["ftp://x"], [5], ["http://x"] * 11]).map(
        lambda v: ("webhooks", _set("webhooks", v))
    ),
    st.sampled_from(["Prod", "", "a" * 64, "..", 5]).map(
        lambda v: ("namespace", _set("namespace", v))
    ),
    st.sampled_from(["not-a-version", "0123456789ABCDEF", 5]).map(
        lambda v: ("version and value", _set("version", v))
    ),
    # missing fields
    st.just(("no path", _without("path"))),
    st.just(("neither value nor version", _without("value"))),
    # bad paths
    st.sampled_from(["a/../b", "/a", "a//b", "A/b", "a" * 256, "a/./b", "é/x", "a b"]).map(
        lambda v: ("bad path", _set("path", v))
    ),
    # bad durations
    _BAD_DURATION.map(lambda v: ("default_cooldown_time", _set("default_cooldown_time", v))),
    _BAD_DURATION.map(lambda v: ("default_expiration_time", _set("default_expiration_time", v))),
    st.just(("zero expiration", _set("default_expiration_time", "0s"))),
    # bad stages
    st.lists(_BAD_STAGE, min_size=1, max_size=3).map(
        lambda stages: ("bad stages", _set("stages", [{"channel": "canary"}, *stages]))
    ),
    st.just(("repeated stage", _set("stages", [{"channel": "a"}, {"channel": "a"}]))),
    st.just(("101 stages", _set("stages", [{"channel": f"c{i}"} for i in range(101)]))),
    # unknown keys
    st.text(min_size=1, max_size=12)
    .filter(lambda key: key not in _KNOWN)
    .map(lambda key: ("unknown key", _set(key, 1))),
    # huge, NUL and invalid-Unicode strings
    _BAD_TEXT.map(lambda text: ("bad message", _set("message", text + "x" * 2000))),
    _BAD_TEXT.map(lambda text: ("bad author", _set("author", text))),
    _BAD_TEXT.map(lambda text: ("bad commit", _set("commit", text))),
    st.just(("NUL in the value", _set("value", {"name": "a\x00b"}))),
    st.just(("NUL in a value's key", _set("value", {"a\x00b": 1}))),
    st.just(("value nested too deep", _set("value", _nested(MAX_JSON_DEPTH + 1)))),
)


@st.composite
def malformed_requests(draw: st.DrawFn) -> tuple[list[str], dict[str, Any]]:
    """A valid request with one to three things made wrong (named, for the failure message)."""
    request = _base()
    names = []
    for name, mutate in draw(st.lists(_MUTATIONS, min_size=1, max_size=3)):
        names.append(name)
        request = mutate(request)
    return names, request


_DURATION = st.one_of(
    st.integers(min_value=1, max_value=600),
    st.sampled_from(["1s", "250ms", "2m", "1h30m", {"seconds": 5}, "5"]),
)
_TARGET = st.one_of(
    st.builds(lambda c: {"channel": c}, st.text("abcxyz-", min_size=1, max_size=8)),
    st.builds(
        lambda p: {"percentile": p},
        st.integers(min_value=0, max_value=100) | st.sampled_from([0.5, 12.25]),
    ),
    st.builds(lambda v: {"labels": {"region": v}}, st.sampled_from(["eu", "us", "ap"])),
)


def _valid_stage(*, expirations: bool) -> st.SearchStrategy[dict[str, Any]]:
    optional = {"cooldown": _DURATION, **({"expiration": _DURATION} if expirations else {})}
    return _TARGET.flatmap(
        lambda stage: st.fixed_dictionaries({}, optional=optional).map(
            lambda extra: {**stage, **extra}
        )
    )


@st.composite
def valid_requests(draw: st.DrawFn, *, for_skipped_time: bool = False) -> dict[str, Any]:
    """Valid requests; `for_skipped_time`: without health checks (a check's watch is an activity
    that lasts the hold, and time does not skip while an activity runs) nor expirations (a short
    lease renewed over a long hold is more timers than the test server skips)."""
    full = not for_skipped_time
    # Only stages that widen the ones before them (docs/contract.md, Stages): the rest are dropped.
    stages: list[dict[str, Any]] = []
    for stage in draw(st.lists(_valid_stage(expirations=full), max_size=4)):
        if not unwidening_stages([StageSpec.model_validate(s) for s in [*stages, stage]]):
            stages.append(stage)
    request: dict[str, Any] = {
        "path": PATH,
        "value": draw(
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(_STORABLE, max_size=10),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(_STORABLE, max_size=5), inner, max_size=3)
                ),
                max_leaves=8,
            )
        ),
        # Distinct names: a strategy and an explicit stage of the same percentile collide.
        "stages": [{**stage, "name": f"s{index}"} for index, stage in enumerate(stages)],
    }
    optional = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "default_cooldown_time": _DURATION,
                **({"default_expiration_time": _DURATION} if full else {}),
                "strategy": st.sampled_from(
                    [{"linear": {"step": 50}}, {"exponential": {"start": 10, "factor": 3}}]
                ),
                "author": st.text(_STORABLE, max_size=20),
                "message": st.text(_STORABLE, max_size=50),
                **(
                    {
                        "health": st.just(
                            [{"kind": "reports", "max_error_ratio": 0.1, "on_no_data": "pass"}]
                        )
                    }
                    if full
                    else {}
                ),
            },
        )
    )
    if "strategy" in optional:
        explicit = [StageSpec.model_validate(stage) for stage in request["stages"]]
        expanded = StrategySpec.model_validate(optional["strategy"]).expand()
        if unwidening_stages([*explicit, *expanded]):
            del optional["strategy"]  # an explicit stage reaches one of its points already
    return {**request, **optional}


def _for(request: dict[str, Any], path: str) -> dict[str, Any]:
    return {**request, "path": path} if request.get("path") == PATH else request


# -- checks ---------------------------------------------------------------------------------------
async def _assert_refused(
    client: Client, store: Store, task_queue: str, args: list[Any], path: str, what: str
) -> float:
    """Start with `args` under the config's workflow id: refused fast, once, leaving nothing."""
    workflow_id = f"rollout:{NAMESPACE}/{path}"
    started = time.perf_counter()
    handle = await client.start_workflow(
        WORKFLOW_TYPE, args=args, id=workflow_id, task_queue=task_queue
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), timeout=FAST * 3)
    took = time.perf_counter() - started
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError), f"{what}: {cause!r}"
    assert cause.type == INVALID_REQUEST_ERROR, f"{what}: {cause.type}: {cause.message}"
    assert cause.non_retryable, what
    assert took < FAST, f"{what}: failed after {took:.1f}s"
    history = [event async for event in handle.fetch_history_events()]
    attempts = [
        event.activity_task_started_event_attributes.attempt
        for event in history
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert all(attempt == 1 for attempt in attempts), f"{what}: retried ({attempts})"
    task_failures = [
        event.workflow_task_failed_event_attributes.failure.message
        for event in history
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert not task_failures, f"{what}: workflow task failed: {task_failures}"
    # Nothing published, stored or locked.
    assert store.get_lock(NAMESPACE, path) is None, what
    assert store.get_rollout(NAMESPACE, path) is None, what
    assert store.list_versions(NAMESPACE, path) == [], what
    assert snapshot_of(store, NAMESPACE, path) is None, what
    # The config's workflow id is free again: a valid rollout of it is promoted right after.
    valid = await client.start_workflow(
        WORKFLOW_TYPE, {"path": path, "value": 1}, id=workflow_id, task_queue=task_queue
    )
    result = await asyncio.wait_for(rollout_result(valid), timeout=FAST * 3)
    assert result["outcome"] == "promoted", f"{what}: then {result}"
    return took


async def _in_a_thread(test: Any) -> None:
    """Run a hypothesis test (sync: hypothesis runs no coroutines) in a thread, while this loop
    keeps serving the worker and the client its examples use through `on_loop`."""
    await asyncio.to_thread(test)


def on_loop(loop: asyncio.AbstractEventLoop, coroutine: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=120)


def _settings(examples: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return hypothesis.settings(
        max_examples=examples,
        deadline=None,
        database=None,
        # Shrinking restarts workflows over and over: the seed printed replays a failure instead.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


async def test_malformed_requests_fail_fast_and_leave_nothing(
    harness: tuple[Client, Store, str],
) -> None:
    client, store, task_queue = harness
    times: list[float] = []
    loop = asyncio.get_running_loop()

    @hypothesis.seed(SEED)
    @_settings(EXAMPLES)
    @given(drawn=malformed_requests())
    def check(drawn: tuple[list[str], dict[str, Any]]) -> None:
        names, request = drawn
        path = f"fuzz/requests-{uuid.uuid4().hex[:10]}"
        what = f"{' + '.join(names)}: {str(request)[:300]}"
        # The domain refuses it too (the API and the CLI validate with the same function).
        try:
            parse_rollout_request(_for(request, path))
        except InvalidRequestError:
            pass
        else:
            raise AssertionError(f"accepted by the domain: {what}")
        refusal = _assert_refused(client, store, task_queue, [_for(request, path)], path, what)
        times.append(on_loop(loop, refusal))

    await _in_a_thread(check)
    print(
        f"\nmalformed requests on {store.dialect}: seed {SEED}, {len(times)} refused through the "
        f"workflow, slowest {max(times):.2f}s, mean {sum(times) / len(times):.2f}s"
    )


@pytest.mark.parametrize(
    "args",
    [[], [_base(), _base()], ["not an object"], [[1, 2]], [None]],
    ids=["no input", "two inputs", "a string", "an array", "null"],
)
async def test_no_input_two_inputs_or_not_an_object_fail_fast(
    harness: tuple[Client, Store, str], args: list[Any]
) -> None:
    client, store, task_queue = harness
    path = f"fuzz/requests-{uuid.uuid4().hex[:10]}"
    await _assert_refused(
        client,
        store,
        task_queue,
        [_for(arg, path) if isinstance(arg, dict) else arg for arg in args],
        path,
        repr(args)[:200],
    )


@hypothesis.seed(SEED)
@_settings(EXAMPLES * 3)
@given(request=valid_requests())
def test_valid_requests_pass_validation(request: dict[str, Any]) -> None:
    parsed = parse_rollout_request(_for(request, "fuzz/valid"))
    assert parsed.path == "fuzz/valid"


async def test_valid_requests_pass_the_workflows_validation(
    harness: tuple[Client, Store, str],
) -> None:
    client, store, task_queue = harness
    outcomes: dict[str, int] = {}
    loop = asyncio.get_running_loop()

    async def run(request: dict[str, Any], path: str) -> Any:
        handle = await client.start_workflow(
            WORKFLOW_TYPE,
            _for(request, path),
            id=f"rollout:{NAMESPACE}/{path}",
            task_queue=task_queue,
        )
        # Time skips: holds end at once.
        try:
            return await asyncio.wait_for(rollout_result(handle), timeout=60)
        except TimeoutError:
            raise AssertionError(f"still running after 60 s: {request}") from None

    @hypothesis.seed(SEED)
    @_settings(max(2, EXAMPLES // 10))
    @given(request=valid_requests(for_skipped_time=True))
    def check(request: dict[str, Any]) -> None:
        path = f"fuzz/valid-{uuid.uuid4().hex[:10]}"
        result = on_loop(loop, run(request, path))
        assert result["outcome"] == "promoted", f"{request}: {result}"
        assert store.get_stable(NAMESPACE, path) is not None
        assert store.get_lock(NAMESPACE, path) is None
        outcomes[result["outcome"]] = outcomes.get(result["outcome"], 0) + 1

    await _in_a_thread(check)
    print(f"\nvalid requests on {store.dialect}: seed {SEED}, outcomes {outcomes}")
