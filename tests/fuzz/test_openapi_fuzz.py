"""schemathesis against the live API's own `/openapi.json`, over real HTTP on loopback.

Every operation of the document, on both store backends, with valid admin and client tokens and
a store holding data (a schema, a stable version, a rollout holding at its canary stage, a report,
a client seen), so the authorised paths are exercised and not everything is a 404. Each operation
is fuzzed with a fixed seed, then with a random one that is printed (HYPOTHESIS_SEED=N replays it
as the fixed run's seed): no 5xx, and every answer conforms to the document (status code, content
type, headers, body schema). Failures are collected over every operation, then reported together.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import hypothesis.errors
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from temporalio.testing import WorkflowEnvironment

from tempoconf.api.distribution import MAX_WAIT
from tempoconf.canonical import version_id
from tests.fixtures.waiting import eventually_sync
from tests.fuzz.abuse_stack import BACKENDS, Stack, database_for, live_stack, temporal_target

pytestmark = pytest.mark.fuzz

FIXED_SEED = 20261130
EXAMPLES = int(os.environ.get("TEMPOCONF_FUZZ_EXAMPLES", "5"))
"""Per operation, generation mode and seed: bounded for CI; more with the variable."""
KNOWN_PATH = "fuzz/app"
STABLE_VALUE = {"workers": 4, "debug": False}
STAGED_VALUE = {"workers": 8, "debug": False}
SCHEMA = {
    "type": "object",
    "properties": {"workers": {"type": "integer", "minimum": 1}, "debug": {"type": "boolean"}},
}
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
"""The keys of an OpenAPI path item that are operations (the others: parameters, summary, ...)."""
UNREACHABLE = "http://127.0.0.1:9/"
"""Where generated webhook and check URLs are sent instead: loopback's discard port, refused."""


def no_undocumented_server_error(
    ctx: Any, response: Any, case: schemathesis.Case[Any]
) -> bool | None:
    """No 500 ever; another 5xx only where the operation documents it (503: Temporal or the
    snapshots unavailable, /readyz past `max_age`)."""
    status = response.status_code
    documented = str(status) in case.operation.definition.raw.get("responses", {})
    if status >= 500 and (status == 500 or not documented):
        raise AssertionError(f"server error {status}: {response.text[:500]}")
    return None


CHECKS = [
    no_undocumented_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
NOT_NEGATED_CHECKS = [check for check in CHECKS if check is not negative_data_rejection]
NOT_NEGATED = "Positive test case"
"""What schemathesis (4.32) says of a negative-mode draw in which nothing was negated (an optional
body left out, every parameter valid), which it would still judge as negative data: seed
1800815637 sent a valid `POST /v1/admin/freezes/{namespace}:end` and called its 200 a failure."""


@pytest.fixture(scope="module", params=BACKENDS)
def stack(
    request: pytest.FixtureRequest,
    temporal_env: WorkflowEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    tmp: Path = tmp_path_factory.mktemp(f"openapi-{request.param}")
    with database_for(request.param, tmp) as url:
        with live_stack(url, temporal_target(temporal_env), tmp) as running:
            _seed(running)
            yield running


def _seed(stack: Stack) -> None:
    """A schema, a stable version, a rollout holding at its canary stage, a report, a client seen:
    all through the API, as an operator and a client would."""
    with httpx.Client(base_url=stack.url, timeout=30) as http:
        put = http.put(
            f"/v1/admin/schemas/{KNOWN_PATH}", json={"schema": SCHEMA}, headers=stack.admin
        )
        assert put.status_code == 200, put.text
        start = {"path": KNOWN_PATH, "value": STABLE_VALUE, "message": "first"}
        started = http.post("/v1/admin/rollouts", json=start, headers=stack.admin)
        assert started.status_code == 202, started.text

        def stable() -> bool:
            answer = http.get(f"/v1/admin/stable/{KNOWN_PATH}", headers=stack.admin)
            return answer.status_code == 200

        eventually_sync(stable, what="the first rollout to be promoted", timeout=30)
        staged = {
            "path": KNOWN_PATH,
            "value": STAGED_VALUE,
            "stages": [{"channel": "canary", "cooldown": "1h"}, {"percentile": 50}],
            "author": "fuzz@example.com",
        }

        def staged_started() -> httpx.Response:
            # The first value is stable a moment before its workflow has ended (audit,
            # notifications): until then a start is refused with 409.
            answer = http.post("/v1/admin/rollouts", json=staged, headers=stack.admin)
            assert answer.status_code != 409, answer.text
            return answer

        started = eventually_sync(staged_started, what="the staged start", timeout=30)
        assert started.status_code == 202, started.text

        def canary_served() -> bool:
            answer = http.get(
                f"/v1/configs/{KNOWN_PATH}",
                params={"client": "host-1", "channel": "canary"},
                headers=stack.client_auth,
            )
            return answer.status_code == 200 and answer.json()["version"] == version_id(
                STAGED_VALUE
            )

        eventually_sync(canary_served, what="the canary stage to be published", timeout=30)
        report = {
            "path": KNOWN_PATH,
            "client": "host-1",
            "channel": "canary",
            "version": version_id(STAGED_VALUE),
            "ok": 10,
            "failed": 0,
        }
        posted = http.post("/v1/reports", json=report, headers=stack.client_auth)
        assert posted.status_code == 202, posted.text


def _loopback_urls(value: Any, *, top: bool = True) -> Any:
    """`value` with every http(s) URL replaced by UNREACHABLE and no webhooks: a generated rollout
    that starts must not call out to the hosts hypothesis made up (nor log each refused call)."""
    if isinstance(value, dict):
        return {
            key: _loopback_urls(item, top=False)
            for key, item in value.items()
            if not (top and key == "webhooks")
        }
    if isinstance(value, list):
        return [_loopback_urls(item, top=False) for item in value]
    if isinstance(value, str) and value.lower().startswith(("http://", "https://")):
        return UNREACHABLE
    return value


def _with_known_data(case: schemathesis.Case[Any]) -> schemathesis.Case[Any]:
    """Point a generated report at the seeded config and version, so it can be stored."""
    if isinstance(case.body, dict) and case.operation.path == "/v1/reports":
        case.body = {**case.body, "path": KNOWN_PATH, "version": version_id(STAGED_VALUE)}
    return case


def _strategy(operation: Any, mode: GenerationMode) -> st.SearchStrategy[schemathesis.Case[Any]]:
    strategies = [operation.as_strategy(generation_mode=mode)]
    if mode is GenerationMode.POSITIVE:
        if operation.path_parameters.get("path") is not None:
            strategies.append(
                operation.as_strategy(generation_mode=mode, path_parameters={"path": KNOWN_PATH})
            )
        if operation.path_parameters.get("key") is not None:  # an OFREP flag key: a path
            strategies.append(
                operation.as_strategy(generation_mode=mode, path_parameters={"key": KNOWN_PATH})
            )
        if operation.path == "/v1/reports":
            strategies.append(operation.as_strategy(generation_mode=mode).map(_with_known_data))
    return st.one_of(strategies)


def _headers(operation: Any, stack: Stack) -> dict[str, str]:
    security = operation.definition.raw.get("security") or []
    schemes = {name for requirement in security for name in requirement}
    if "adminToken" in schemes:
        return stack.admin
    if "clientToken" in schemes:
        return stack.client_auth
    return {}


def _fuzz_operation(
    stack: Stack,
    session: requests.Session,
    operation: Any,
    mode: GenerationMode,
    seed: int,
    counts: dict[str, int],
    called: set[str],
) -> None:
    headers = _headers(operation, stack)

    @hypothesis.seed(seed)
    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=False,
        # Shrinking replays a failure many times over: the seed printed reproduces it instead.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=_strategy(operation, mode))
    def check(case: schemathesis.Case[Any]) -> None:
        if case.body is not None and not isinstance(case.body, bytes | str):
            case.body = _loopback_urls(case.body)
        # A documented long-poll (`wait` up to MAX_WAIT with a matching If-None-Match) holds the
        # request that long: a shorter read timeout would call a correct answer a failure
        # (seed 3814576553: a 304 after a 60 s hold).
        response = case.call(
            base_url=stack.url, session=session, headers=headers, timeout=MAX_WAIT + 15
        )
        counts[str(response.status_code)] = counts.get(str(response.status_code), 0) + 1
        called.add(f"{case.operation.method.upper()} {case.operation.path}")
        phase = case.meta.phase.data if case.meta is not None else None
        negated = getattr(phase, "description", None) != NOT_NEGATED
        case.validate_response(
            response, checks=CHECKS if negated else NOT_NEGATED_CHECKS, headers=headers
        )

    check()


def test_every_operation_answers_as_documented(stack: Stack) -> None:
    document = httpx.get(f"{stack.url}/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(document)
    random_seed = random.SystemRandom().randrange(2**32)
    seeds = [int(os.environ.get("HYPOTHESIS_SEED", FIXED_SEED)), random_seed]
    print(
        f"\nschemathesis on {stack.store.dialect}: seeds {seeds} "
        f"(HYPOTHESIS_SEED={random_seed} replays the random one), {EXAMPLES} examples each"
    )
    failures: list[str] = []
    counts: dict[str, int] = {}
    called: set[str] = set()
    timings: dict[str, float] = {}
    started = time.perf_counter()
    operations = 0
    with requests.Session() as session:
        for result in schema.get_all_operations():
            # Our own document must load whole: an operation schemathesis cannot read is a failure.
            assert isinstance(result, Ok), result.err()
            operation = result.ok()
            operations += 1
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                for seed in seeds:
                    began = time.perf_counter()
                    try:
                        _fuzz_operation(stack, session, operation, mode, seed, counts, called)
                    except hypothesis.errors.Unsatisfiable:
                        # No parameter and no body (GET /healthz): nothing to make invalid.
                        assert mode is GenerationMode.NEGATIVE, operation.label
                    except (Exception, BaseExceptionGroup) as error:  # every operation is tried
                        failures.append(
                            f"{operation.label} ({mode.value}, seed {seed}): "
                            f"{type(error).__name__}: {error}"
                        )
                    timings[f"{operation.label} {mode.value}"] = timings.get(
                        f"{operation.label} {mode.value}", 0.0
                    ) + (time.perf_counter() - began)
    print(
        f"  {len(called)} of {operations} operations called, {sum(counts.values())} requests in "
        f"{time.perf_counter() - started:.1f}s; statuses {dict(sorted(counts.items()))}"
    )
    slowest = sorted(timings.items(), key=lambda item: -item[1])[:5]
    print("  slowest: " + ", ".join(f"{label} {seconds:.1f}s" for label, seconds in slowest))
    assert not failures, "\n\n".join(failures)
    # Every operation of the document got requests: a run that sent none (an operation the
    # loader skipped, a strategy that draws nothing) would otherwise pass without testing it.
    documented = {
        f"{method.upper()} {path}"
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }
    assert documented, "the document has no operations"
    missing = sorted(documented - called)
    assert not missing, f"{len(missing)} operation(s) never called: {', '.join(missing)}"
