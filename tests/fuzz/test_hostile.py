"""The hostile set that passed by hand, kept passing: against the live API (uvicorn on loopback,
raw sockets where a client library would tidy the request up), on both store backends.

- 50 MB bodies on every route that reads one: 413 at once, declared or chunked, memory bounded;
- 10,000-deep JSON nesting: 400, never a RecursionError 500;
- `../`, unicode, NUL and overlong text in config paths, client ids, channels and labels: 400
  naming the field (or served, when it is valid), never 500, never a file;
- missing, wrong and other-role tokens on every route the app serves (from its route table, the
  roles from the OpenAPI document): 401 before anything is done;
- `wait=-1|1e9|nan|inf|abc` on the long-poll: 400 at once, never 500 or a hang.
"""

from __future__ import annotations

import base64
import http.client
import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from starlette.routing import Route
from temporalio.testing import WorkflowEnvironment

from tempoconf.api.app import create_app
from tempoconf.api.routing import template_of
from tempoconf.canonical import version_id
from tempoconf.storable import MAX_JSON_DEPTH
from tests.fixtures.waiting import eventually_sync
from tests.fuzz.abuse_stack import (
    ADMIN_TOKEN,
    BACKENDS,
    CLIENT_TOKEN,
    Stack,
    database_for,
    live_stack,
    temporal_target,
)

pytestmark = pytest.mark.fuzz

KNOWN_PATH = "hostile/app"
VALUE = {"workers": 4}
MB = 1024 * 1024
BIG = 50 * MB
CHUNK = 256 * 1024
MEMORY_SLACK = 25 * MB
"""Peak RSS may grow this much while 50 MB bodies are refused (far less than one of them)."""
QUICK = 5.0
"""Seconds an answer to a refused request may take (generous: it is immediate)."""


@pytest.fixture(scope="module", params=BACKENDS)
def stack(
    request: pytest.FixtureRequest,
    temporal_env: WorkflowEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    tmp: Path = tmp_path_factory.mktemp(f"hostile-{request.param}")
    with database_for(request.param, tmp) as url:
        with live_stack(url, temporal_target(temporal_env), tmp) as running:
            with httpx.Client(base_url=running.url, timeout=30) as http:
                start = {"path": KNOWN_PATH, "value": VALUE}
                started = http.post("/v1/admin/rollouts", json=start, headers=running.admin)
                assert started.status_code == 202, started.text

                def stable() -> bool:
                    got = http.get(f"/v1/admin/stable/{KNOWN_PATH}", headers=running.admin)
                    return got.status_code == 200

                eventually_sync(stable, what="the seeded config to be promoted", timeout=30)
            yield running


# -- raw HTTP -------------------------------------------------------------------------------------
class Answer:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes, took: float):
        self.status = status
        self.headers = headers
        self.body = body
        self.took = took

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        body = self.json()
        # OFREP's routes answer in OFREP's shape: {"errorCode", "errorDetails"}.
        message: str = body["error"] if "error" in body else body["errorDetails"]
        return message

    def __repr__(self) -> str:
        return f"{self.status} after {self.took:.2f}s: {self.body[:300]!r}"


def raw(
    stack: Stack,
    method: str,
    target: str,
    *,
    headers: dict[str, str] | None = None,
    body: Iterator[bytes] | bytes = b"",
    timeout: float = 20,
) -> Answer:
    """One request written as given (the target is not normalised or re-encoded); a body
    iterator is sent until the server answers or closes, like a client that streams."""
    address = urlsplit(stack.url)
    started = time.perf_counter()
    with socket.create_connection((address.hostname, address.port), timeout=timeout) as sock:
        head = f"{method} {target} HTTP/1.1\r\nHost: {address.netloc}\r\nConnection: close\r\n"
        headers = dict(headers or {})
        if isinstance(body, bytes) and body and "Transfer-Encoding" not in headers:
            headers.setdefault("Content-Length", str(len(body)))
        for name, value in headers.items():
            head += f"{name}: {value}\r\n"
        sock.sendall(head.encode("latin-1") + b"\r\n")
        chunks = iter([body]) if isinstance(body, bytes) else body
        try:
            for chunk in chunks:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable:
                    break  # answered (or closed) before the whole body went out
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        payload = response.read()
        return Answer(response.status, response.headers, payload, time.perf_counter() - started)


def peak_rss_reset() -> None:
    # Writing 5 to clear_refs resets the process's peak RSS (VmHWM) to its current RSS.
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def current_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


# -- the route table ------------------------------------------------------------------------------
def app_routes(stack: Stack) -> list[tuple[str, str, str]]:
    """(method, concrete path, template) of every route the app serves, from its own table."""
    app = create_app(stack.store, stack.settings)
    found = []
    for route in app.routes:
        assert isinstance(route, Route), route
        template = template_of(route.path).replace("{path:path}", "{path}")
        concrete = (
            template.replace("{path}", KNOWN_PATH)
            .replace("{namespace}", "default")
            .replace("{key}", KNOWN_PATH)  # an OFREP flag key is a config path
        )
        assert "{" not in concrete, f"a route parameter this test does not know: {route.path}"
        for method in sorted(route.methods or ()):
            found.append((method, concrete, template))
    return found


def body_routes(stack: Stack) -> list[tuple[str, str, str]]:
    return [entry for entry in app_routes(stack) if entry[0] in ("POST", "PUT", "PATCH")]


def security_of(document: dict[str, Any], method: str, template: str) -> set[str]:
    """The token an operation needs per the OpenAPI document: {'adminToken'}, {'clientToken'}
    or none. HEAD is documented by its GET."""
    operations = document["paths"].get(template)
    assert operations is not None, f"{template} is served but not documented"
    operation = operations.get(method.lower()) or operations.get("get")
    assert operation is not None, f"{method} {template} is served but not documented"
    return {name for requirement in operation.get("security", []) for name in requirement}


# -- 50 MB ----------------------------------------------------------------------------------------
def _zeros(total: int) -> Iterator[bytes]:
    block = b"0" * CHUNK
    for _ in range(total // CHUNK):
        yield block


def _chunked(total: int) -> Iterator[bytes]:
    for block in _zeros(total):
        yield f"{len(block):x}\r\n".encode() + block + b"\r\n"
    yield b"0\r\n\r\n"


def test_50_mb_bodies_are_refused_at_once_with_memory_bounded(stack: Stack) -> None:
    peak_rss_reset()
    before = current_rss()
    seen = []
    for method, path, _ in body_routes(stack):
        for framing, headers, body in (
            ("declared", {"Content-Length": str(BIG)}, _zeros(BIG)),
            ("chunked", {"Transfer-Encoding": "chunked"}, _chunked(BIG)),
        ):
            headers = {**headers, "Content-Type": "application/json", **_token_for(stack, path)}
            answer = raw(stack, method, path, headers=headers, body=body)
            seen.append(f"{method} {path} {framing}: {answer.status} in {answer.took:.2f}s")
            assert answer.status == 413, f"{method} {path} ({framing}): {answer!r}"
            assert "too large" in answer.error and "limit" in answer.error, answer.error
            assert answer.took < QUICK, f"{method} {path} ({framing}): {answer!r}"
    growth = peak_rss() - before
    print(
        f"\n50 MB bodies on {stack.store.dialect}: peak RSS +{growth / MB:.1f} MB; "
        + "; ".join(seen)
    )
    assert growth < MEMORY_SLACK, f"peak RSS grew {growth / MB:.1f} MB while refusing 50 MB bodies"


def _token_for(stack: Stack, path: str) -> dict[str, str]:
    if path.startswith("/v1/admin/"):
        return stack.admin
    return stack.client_auth


# -- deep nesting ---------------------------------------------------------------------------------
def _deep_array(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


DEEP = 10_000


@pytest.mark.parametrize(
    "shape",
    ["array", "object", "in a field"],
)
def test_10000_deep_json_is_a_400_not_a_recursion_error(stack: Stack, shape: str) -> None:
    for method, path, _ in body_routes(stack):
        if shape == "array":
            body = _deep_array(DEEP)
        elif shape == "object":
            body = _deep_object(DEEP)
        else:  # a document that would be valid but for the depth of one of its values
            body = (
                f'{{"path": "{KNOWN_PATH}", "value": {_deep_array(DEEP)}, '
                f'"schema": {_deep_array(DEEP)}}}'
            )
        headers = {"Content-Type": "application/json", **_token_for(stack, path)}
        answer = raw(stack, method, path, headers=headers, body=body.encode())
        assert answer.status == 400, f"{method} {path} ({shape}): {answer!r}"
        assert "nested too deeply" in answer.error, f"{method} {path}: {answer.error}"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 500, 990])
def test_a_value_nested_under_the_parser_limit_is_refused_or_served_never_a_500(
    stack: Stack, depth: int
) -> None:
    """Deep enough to pass the parser, then met by validation, hashing, the store, the workflow
    and every answer: refused past the documented depth, else planned, started and served."""
    headers = {"Content-Type": "application/json", **stack.admin}
    path = f"hostile/deep{depth}"
    body = f'{{"path": "{path}", "value": {_deep_array(depth)}}}'.encode()
    plan = raw(stack, "POST", "/v1/admin/plans", headers=headers, body=body)
    start = raw(stack, "POST", "/v1/admin/rollouts", headers=headers, body=body)
    if depth > MAX_JSON_DEPTH:
        for answer in (plan, start):
            # Past the parser's own limit the body is refused whole ("nested too deeply").
            assert answer.status == 400, answer
            assert "/value" in answer.error or "nested too deeply" in answer.error, answer
        return
    assert plan.status == 200, plan
    assert start.status == 202, start
    version = start.json()["version"]

    def served() -> bool:
        got = raw(stack, "GET", f"/v1/configs/{path}?client=deep", headers=stack.client_auth)
        assert got.status in (200, 404), got
        return got.status == 200 and got.json()["version"] == version

    eventually_sync(served, what=f"the value {depth} deep to be promoted and served", timeout=30)


# -- paths, clients, channels, labels -------------------------------------------------------------
HOSTILE_PATHS = [
    "../../../../etc/passwd",
    "hostile/../../etc/passwd",
    "hostile/app/..",
    "./hostile/app",
    "hostile//app",
    "/hostile/app",
    "%2e%2e/%2e%2e/etc/passwd",
    "..%2f..%2fetc%2fpasswd",
    "hostile%00app",
    "hostile/app%00",
    "Hostile/App",
    "h%C3%A9/app",  # é
    "%EF%BC%8E%EF%BC%8E/etc",  # fullwidth dots
    "hostile/%E2%80%AEppa",  # right-to-left override
    "%ED%A0%80/app",  # a lone surrogate, UTF-8 encoded
    "%FF%FE/app",  # not UTF-8 at all
    "a" * 256,
    "/".join(["a"] * 200),
    "hostile/" + "%2F" * 10 + "app",
]


def _refused_for(answer: Answer, field: str) -> None:
    assert answer.status == 400, answer
    assert field in answer.error, f"the error does not name {field!r}: {answer.error}"


def _no_file(answer: Answer) -> None:
    assert b"root:" not in answer.body, "a file's content was served"


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_hostile_config_paths_are_a_400_naming_the_path(stack: Stack, path: str) -> None:
    for method, target, template in app_routes(stack):
        if "{path}" not in template:
            continue
        url = target.replace(KNOWN_PATH, path)
        headers = _token_for(stack, target)
        body = b"{}" if method == "POST" else b""
        if body:
            headers = {**headers, "Content-Type": "application/json"}
        answer = raw(stack, method, url, headers=headers, body=body)
        _no_file(answer)
        if method == "HEAD":
            assert answer.status == 400, f"{method} {url}: {answer!r}"
            continue
        assert answer.status in (400, 404), f"{method} {url}: {answer!r}"
        if answer.status == 404:
            # Only when the path changed which route matched (a `..` segment folded away, or a
            # verb's segment lost): "no such route", never a config served from elsewhere.
            assert "no such route" in answer.error, f"{method} {url}: {answer.error}"
        else:
            assert "path" in answer.error, f"{method} {url}: {answer.error}"


HOSTILE_TEXT = {
    "NUL": "host%00one",
    "overlong": "h" * 5000,
    "dot-dot": "..%2F..%2Fetc%2Fpasswd",
    "unicode": "h%C3%B4te-%E2%98%83",
    "rtl override": "%E2%80%AEeno-tsoh",
    "lone surrogate": "%ED%A0%80",
    "not UTF-8": "%FF%FE",
    "control characters": "host%0D%0Aone",
}
MUST_REFUSE = {"NUL", "lone surrogate", "not UTF-8"}
"""The store cannot keep these (a NUL on PostgreSQL, invalid Unicode anywhere): refused at the
edge. The others are identities like any other (a client's id is its own business)."""


@pytest.mark.parametrize("kind", list(HOSTILE_TEXT))
@pytest.mark.parametrize("field", ["client", "channel", "label"])
def test_hostile_identities_in_a_poll_are_a_400_naming_the_field(
    stack: Stack, kind: str, field: str
) -> None:
    text = HOSTILE_TEXT[kind]
    value = f"k={text}" if field == "label" else text
    answer = raw(
        stack,
        "GET",
        f"/v1/configs/{KNOWN_PATH}?{field}={value}&client=host-ok",
        headers=stack.client_auth,
    )
    if field == "client":
        answer = raw(
            stack, "GET", f"/v1/configs/{KNOWN_PATH}?client={text}", headers=stack.client_auth
        )
    _no_file(answer)
    if kind in MUST_REFUSE or answer.status != 200:
        _refused_for(answer, field)
    else:
        assert answer.json()["version"] == version_id(VALUE)
    if field == "label":
        # The key too, not only the value.
        keyed = raw(
            stack, "GET", f"/v1/configs/{KNOWN_PATH}?label={text}=v", headers=stack.client_auth
        )
        if kind in MUST_REFUSE or keyed.status != 200:
            _refused_for(keyed, "label")


@pytest.mark.parametrize("kind", list(HOSTILE_TEXT))
@pytest.mark.parametrize("field", ["client", "channel", "label", "error"])
def test_hostile_text_in_a_report_is_a_400_naming_the_field(
    stack: Stack, kind: str, field: str
) -> None:
    text = unquote(HOSTILE_TEXT[kind], errors="surrogateescape")
    report: dict[str, Any] = {
        "path": KNOWN_PATH,
        "client": "host-ok",
        "version": version_id(VALUE),
        "ok": 1,
        "failed": 0,
    }
    report["labels" if field == "label" else field] = {"k": text} if field == "label" else text
    body = json.dumps(report, ensure_ascii=True).encode()
    answer = raw(
        stack,
        "POST",
        "/v1/reports",
        headers={"Content-Type": "application/json", **stack.client_auth},
        body=body,
    )
    if kind in MUST_REFUSE or kind == "overlong" or answer.status != 202:
        _refused_for(answer, "labels" if field == "label" else field)


def test_a_workflow_id_with_a_nul_is_a_400_on_every_route_that_takes_one(stack: Stack) -> None:
    document = raw(stack, "GET", "/openapi.json").json()
    takes_one = [
        (method, path)
        for method, path, template in app_routes(stack)
        if {"$ref": "#/components/parameters/WorkflowId"}
        in document["paths"][template].get(method.lower(), {}).get("parameters", [])
    ]
    assert len(takes_one) >= 3, takes_one
    for method, path in takes_one:
        body = json.dumps({"path": KNOWN_PATH, "value": 2}).encode() if method == "POST" else b""
        headers = {"Content-Type": "application/json", **stack.admin}
        answer = raw(stack, method, f"{path}?workflow_id=a%00b", headers=headers, body=body)
        _refused_for(answer, "workflow_id")


def test_hostile_polls_cost_no_legitimate_client_its_record(stack: Stack) -> None:
    """A poll with an identity the store could not keep never reaches the flush that writes the
    others (the issue's NUL on PostgreSQL lost every client of the window)."""
    for kind, text in HOSTILE_TEXT.items():
        for query in (
            f"client={text}",
            f"client=x-{kind}&channel={text}",
            f"client=y&label=k={text}",
        ):
            raw(stack, "GET", f"/v1/configs/{KNOWN_PATH}?{query}", headers=stack.client_auth)
    legit = raw(
        stack,
        "GET",
        f"/v1/configs/{KNOWN_PATH}?client=legit-host&channel=stable",
        headers=stack.client_auth,
    )
    assert legit.status == 200, legit

    def recorded() -> bool:
        answer = raw(stack, "GET", f"/v1/admin/clients/{KNOWN_PATH}", headers=stack.admin)
        assert answer.status == 200, answer
        return any(seen["client"] == "legit-host" for seen in answer.json()["clients"])

    eventually_sync(recorded, what="the legitimate client to be recorded as seen", timeout=20)


# -- tokens ---------------------------------------------------------------------------------------
def _bad_authorizations(role: str) -> dict[str, str | None]:
    other = CLIENT_TOKEN if role == "adminToken" else ADMIN_TOKEN
    own = ADMIN_TOKEN if role == "adminToken" else CLIENT_TOKEN
    return {
        "missing": None,
        "empty": "",
        "no credentials": "Bearer",
        "wrong": "Bearer not-the-token",
        "other role's": f"Bearer {other}",
        "own with a suffix": f"Bearer {own}x",
        "own as a prefix": f"Bearer {own[:-1]}",
        "basic scheme": "Basic " + base64.b64encode(f"admin:{own}".encode()).decode(),
        "not latin-1 safe": "Bearer \u00ff\u00fe",
    }


def test_every_route_refuses_bad_tokens_as_its_document_says(stack: Stack) -> None:
    document = raw(stack, "GET", "/openapi.json").json()
    checked = 0
    for method, path, template in app_routes(stack):
        # A scraper token exists only under an access policy, which this stack (one admin and
        # one client token) has none of: /metrics is open here, as its document's `{}` says.
        roles = security_of(document, method, template) - {"scraperToken"}
        body = b"{}" if method in ("POST", "PUT") else b""
        base = {"Content-Type": "application/json"} if body else {}
        if not roles:
            # Open (health, metrics, this document): answers without any token.
            answer = raw(stack, method, path, headers=base, body=body)
            assert answer.status == 200, f"{method} {path} without a token: {answer!r}"
            continue
        assert len(roles) == 1, roles
        role = next(iter(roles))
        what = "admin token" if role == "adminToken" else "client token"
        for name, authorization in _bad_authorizations(role).items():
            headers = dict(base)
            if authorization is not None:
                headers["Authorization"] = authorization
            answer = raw(stack, method, path, headers=headers, body=body)
            assert answer.status == 401, f"{method} {path} with a {name} token: {answer!r}"
            assert answer.headers["WWW-Authenticate"].startswith("Bearer"), answer.headers
            if method != "HEAD":
                assert what in answer.error or "Bearer" in answer.error, answer.error
            checked += 1
    # The route table is what was checked: it has admin routes and client routes both.
    assert checked >= 15 * len(_bad_authorizations("adminToken")), checked
    print(f"\ntokens on {stack.store.dialect}: {checked} refused requests over the route table")


# -- long-poll wait -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "wait",
    [
        "-1",
        "-0.001",
        "1e9",
        "60.001",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        "abc",
        "1e999",
        "0x10",
        "%00",
    ],
)
def test_bad_waits_on_the_long_poll_are_a_400_at_once(stack: Stack, wait: str) -> None:
    current = raw(
        stack, "GET", f"/v1/configs/{KNOWN_PATH}?client=waiter", headers=stack.client_auth
    )
    etag = current.headers["ETag"]
    answer = raw(
        stack,
        "GET",
        f"/v1/configs/{KNOWN_PATH}?client=waiter&wait={wait}",
        headers={"If-None-Match": etag, **stack.client_auth},
        timeout=QUICK * 2,
    )
    _refused_for(answer, "wait")
    assert answer.took < QUICK, answer


@pytest.mark.parametrize("wait", ["0", "-0", "0.2", "1e-9", "", "60"])
def test_valid_waits_are_served(stack: Stack, wait: str) -> None:
    """In range (the contract: 0-60 seconds): a 304 once the wait is over, or at once when the
    copy is stale. 60 s is only checked on a stale copy: answered at once, not after a minute."""
    current = raw(
        stack, "GET", f"/v1/configs/{KNOWN_PATH}?client=waiter", headers=stack.client_auth
    )
    etag = current.headers["ETag"] if wait != "60" else '"stale"'
    answer = raw(
        stack,
        "GET",
        f"/v1/configs/{KNOWN_PATH}?client=waiter&wait={wait}",
        headers={"If-None-Match": etag, **stack.client_auth},
        timeout=QUICK * 2,
    )
    assert answer.status == (200 if wait == "60" else 304), answer
    assert answer.took < QUICK, answer
