"""OFREP's evaluation endpoints as a raw ASGI callable, ahead of the framework like the poll
(docs/contract.md, OFREP):

- `POST /ofrep/v1/evaluate/flags/{key}`: one config, resolved for the context's client;
- `POST /ofrep/v1/evaluate/flags`: every config of the namespace, with a weak ETag (304 on a
  matching `If-None-Match`).

Resolution is the poll's own (`PreparedConfig.answer`), so OFREP serves exactly what
`GET /v1/configs/{path}` serves. Clients repeat the same body on every call: each distinct
(namespace, body) is parsed once and remembered with its per-config queries, and a bulk answer
is kept until the snapshots change or a lease ends. So a repeated bulk call is a dict lookup and
an ETag comparison, like a 304 poll; evaluation bytes are built once per config snapshot.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

from starlette.types import Receive, Scope, Send

from tempoconf.api.distribution import (
    ConfigQuery,
    PerSnapshot,
    PreparedAnswer,
    PreparedConfig,
    prepare_config,
)
from tempoconf.api.errors import ApiError
from tempoconf.api.etag import if_none_match
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.ofrep_answers import (
    OfrepBulkError,
    OfrepFlagAnswer,
    OfrepFlagError,
    OfrepFlagMetadata,
)
from tempoconf.api.polls import ConfigPolls
from tempoconf.api.read_limits import bounded_body
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.snapshots import SnapshotsNotLoadedError
from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem
from tempoconf.resolution import ConfigSnapshot, PublishedStage, VersionRecord
from tempoconf.resolution.ofrep import (
    NAMESPACE_HEADER,
    EvaluationContext,
    OfrepError,
    OfrepErrorCode,
    evaluation,
    flag_key_problem,
    parse_request,
)
from tempoconf.settings import Settings

__all__ = [
    "BULK_ROUTE",
    "FLAG_ROUTE",
    "OFREP_BODY_LIMIT",
    "OFREP_BULK",
    "OFREP_FLAG_PREFIX",
    "OfrepEvaluations",
    "bulk_etag",
]

OFREP_BULK = "/ofrep/v1/evaluate/flags"
OFREP_FLAG_PREFIX = OFREP_BULK + "/"
BULK_ROUTE = OFREP_BULK
FLAG_ROUTE = OFREP_FLAG_PREFIX + "{key}"
OFREP_BODY_LIMIT = 64 * 1024
"""Largest evaluation request body read (an evaluation context); larger is a 413."""
REQUESTS_KEPT = 65_536
"""Distinct (namespace, body) pairs whose parsed context (and bulk answer) is remembered."""
REQUEST_BYTES_KEPT = 32 * 1024 * 1024
"""...and at most this many bytes of their bodies (the memory then starts over)."""
_FOREVER = datetime.max.replace(tzinfo=UTC)
_JSON = (b"content-type", b"application/json")
_NO_CACHE = (b"cache-control", b"no-cache")
_NAMESPACE_HEADER = NAMESPACE_HEADER.lower().encode()
_NO_ANSWER = "has no stable version yet, and no stage of its rollout applies to this client"

logger = logging.getLogger(__name__)


def bulk_etag(namespace: str, entries: list[tuple[str, str]]) -> str:
    """`W/"ofrep.<hash>"` over the namespace and each (key, config ETag) in key order: it changes
    when a config appears, or when what this client resolves to changes for any of them."""
    text = "\0".join([namespace, *(f"{key}\0{etag}" for key, etag in entries)])
    return f'W/"ofrep.{hashlib.sha256(text.encode()).hexdigest()[:24]}"'


class _Prepared:
    """One config snapshot's answers (the poll's PreparedConfig) and their OFREP bytes."""

    __slots__ = ("snapshot", "config", "bodies", "not_found")

    def __init__(self, snapshot: ConfigSnapshot) -> None:
        self.snapshot = snapshot
        self.config: PreparedConfig = prepare_config(snapshot)
        self.bodies: dict[int, bytes] = {}
        """id(PreparedAnswer) → its evaluation's JSON (the answers live as long as `config`)."""
        if self.config.stable is not None and snapshot.stable is not None:
            self.bodies[id(self.config.stable)] = _evaluation_bytes(
                snapshot.path, snapshot.stable, None
            )
        if snapshot.staged is not None:
            for stage, answer in self.config.stages:
                self.bodies[id(answer)] = _evaluation_bytes(snapshot.path, snapshot.staged, stage)
        self.not_found = _json_bytes(
            OfrepFlagError(
                key=snapshot.path,
                errorCode=OfrepErrorCode.FLAG_NOT_FOUND,
                errorDetails=f"{_where(snapshot.namespace, snapshot.path)} {_NO_ANSWER}",
            ).body()
        )
        """The bulk answer's item for a client this config has nothing for."""


class _Bulk:
    """A client's bulk answer, valid for one snapshots mapping until `valid_until`."""

    __slots__ = ("snapshots", "valid_until", "etag", "etag_bytes", "items", "seen")

    def __init__(
        self,
        snapshots: Mapping[tuple[str, str], ConfigSnapshot],
        valid_until: datetime,
        etag: str,
        items: list[bytes],
        seen: list[tuple[ConfigQuery, PreparedAnswer]],
    ) -> None:
        self.snapshots = snapshots
        self.valid_until = valid_until
        self.etag = etag
        self.etag_bytes = etag.encode()
        self.items = items
        self.seen = seen


class _Request:
    """One distinct (namespace, body): its context, parsed once; a query per config (for the
    resolution and, being the same object every time, one clients-seen entry per client)."""

    __slots__ = ("namespace", "context", "queries", "bulk")

    def __init__(self, namespace: str, context: EvaluationContext) -> None:
        self.namespace = namespace
        self.context = context
        self.queries: dict[str, ConfigQuery] = {}
        self.bulk: _Bulk | None = None

    def query(self, path: str) -> ConfigQuery:
        query = self.queries.get(path)
        if query is None:
            query = self.queries[path] = ConfigQuery(
                namespace=self.namespace,
                path=path,
                client=self.context.client,
                anonymous=self.context.anonymous,
            )
        return query


class OfrepEvaluations:
    """The ASGI callable that answers `POST /ofrep/v1/evaluate/flags[/{key}]`."""

    def __init__(
        self, cache: SnapshotSource, settings: Settings, metrics: ApiMetrics, polls: ConfigPolls
    ) -> None:
        self._cache = cache
        self._settings = settings
        self._metrics = metrics
        self._polls = polls
        self._prepared = PerSnapshot(_Prepared)
        self._requests: dict[tuple[str, bytes], _Request] = {}
        self._request_bytes = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = perf_counter()
        path: str = scope["path"]
        bulk = path == OFREP_BULK
        key = None if bulk else path[len(OFREP_FLAG_PREFIX) :]
        try:
            status = await self._serve(scope, receive, send, key)
        except OfrepError as error:
            status = error.status
            await _send_error(send, error, key)
        except ApiError as error:  # the body came too slowly (bounded_body): 408
            status = error.status
            refused = OfrepError(
                error.status, OfrepErrorCode.GENERAL, error.message, headers=error.headers
            )
            await _send_error(send, refused, key)
        except Exception:  # a bug: answer anyway, never drop the connection without a word
            logger.exception("unexpected error answering POST %s", path)
            status = 500
            await _send_error(send, OfrepError(500, OfrepErrorCode.GENERAL, "internal error"), key)
        self._metrics.ofrep[("bulk" if bulk else "flag", status)] += 1
        self._metrics.observe_request(
            "POST", BULK_ROUTE if bulk else FLAG_ROUTE, perf_counter() - started
        )

    async def _serve(self, scope: Scope, receive: Receive, send: Send, key: str | None) -> int:
        if_none: bytes | None = None
        authorization: bytes | None = None
        namespace_header: bytes | None = None
        declared: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"if-none-match":
                if_none = value if if_none is None else if_none + b", " + value
            elif name == b"authorization":
                authorization = value
            elif name == _NAMESPACE_HEADER:
                namespace_header = value
            elif name == b"content-length":
                declared = value
        route = FLAG_ROUTE if key is not None else BULK_ROUTE
        try:
            client = self._polls.access.client(authorization, route)
        except ApiError as refused:
            raise OfrepError(
                refused.status, OfrepErrorCode.GENERAL, refused.message, headers=refused.headers
            ) from None
        namespace = DEFAULT_NAMESPACE
        if namespace_header is not None:
            namespace = namespace_header.decode("latin-1")
            problem = namespace_problem(namespace)
            if problem is not None:
                raise OfrepError(
                    400, OfrepErrorCode.GENERAL, f"invalid header {NAMESPACE_HEADER}: {problem}"
                )
        if not client.reads(namespace):
            try:
                self._polls.access.client_reads(client, namespace, route)
            except ApiError as refused:
                raise OfrepError(403, OfrepErrorCode.GENERAL, refused.message) from None
        if key is not None:
            problem = flag_key_problem(key)
            if problem is not None:
                # A flag key is a config path: no flag can have this one.
                raise OfrepError(
                    404,
                    OfrepErrorCode.FLAG_NOT_FOUND,
                    f"no flag {key!r}: a flag key is a config path, and {problem}",
                )
        raw = await _read_body(receive, declared, self._settings.api_body_timeout)
        request = self._request(namespace, raw)
        if key is None:
            return await self._bulk(send, request, if_none)
        return await self._single(send, request, key, raw)

    async def _single(self, send: Send, request: _Request, key: str, raw: bytes) -> int:
        prepared = self._prepared_for(request.namespace, key)
        query = request.query(key)
        answer = prepared.config.answer_for(raw, query, datetime.now(UTC))
        if answer is None:
            raise OfrepError(
                404,
                OfrepErrorCode.FLAG_NOT_FOUND,
                f"{_where(request.namespace, key)} {_NO_ANSWER}",
            )
        if not query.anonymous:
            self._polls.note_seen(query, answer)
        body = prepared.bodies[id(answer)]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [_JSON, (b"content-length", str(len(body)).encode()), _NO_CACHE],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return 200

    async def _bulk(self, send: Send, request: _Request, if_none: bytes | None) -> int:
        try:
            snapshots = self._cache.snapshots()
        except SnapshotsNotLoadedError as exc:
            raise OfrepError(503, OfrepErrorCode.GENERAL, f"cannot evaluate: {exc}") from exc
        now = datetime.now(UTC)
        answer = request.bulk
        if answer is None or answer.snapshots is not snapshots or now >= answer.valid_until:
            answer = request.bulk = self._evaluate_all(request, snapshots, now)
        note_seen = self._polls.note_seen
        for query, seen in answer.seen:
            note_seen(query, seen)
        etag_header = (b"etag", answer.etag_bytes)
        if if_none is not None and (
            if_none == answer.etag_bytes or if_none_match(if_none.decode("latin-1"), answer.etag)
        ):
            await send(
                {"type": "http.response.start", "status": 304, "headers": [etag_header, _NO_CACHE]}
            )
            await send({"type": "http.response.body", "body": b""})
            return 304
        body = b'{"flags":[' + b",".join(answer.items) + b"]}"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    _JSON,
                    (b"content-length", str(len(body)).encode()),
                    etag_header,
                    _NO_CACHE,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return 200

    def _evaluate_all(
        self,
        request: _Request,
        snapshots: Mapping[tuple[str, str], ConfigSnapshot],
        now: datetime,
    ) -> _Bulk:
        """Every config of the request's namespace resolved for its client, from one mapping (no
        await in here, so no refresh comes in between)."""
        namespace = request.namespace
        items: list[bytes] = []
        etags: list[tuple[str, str]] = []
        seen: list[tuple[ConfigQuery, PreparedAnswer]] = []
        valid_until = _FOREVER
        for config_key in sorted(key for key in snapshots if key[0] == namespace):
            path = config_key[1]
            prepared = self._prepared.of(snapshots[config_key])
            query = request.query(path)
            answer = prepared.config.answer(query, now)
            expiry = prepared.config.next_expiry(now)
            if expiry is not None and expiry < valid_until:
                valid_until = expiry
            if answer is None:
                items.append(prepared.not_found)
                etags.append((path, ""))
                continue
            items.append(prepared.bodies[id(answer)])
            etags.append((path, answer.etag))
            if not query.anonymous:
                seen.append((query, answer))
        return _Bulk(snapshots, valid_until, bulk_etag(namespace, etags), items, seen)

    def _request(self, namespace: str, raw: bytes) -> _Request:
        request = self._requests.get((namespace, raw))
        if request is None:
            request = _Request(namespace, parse_request(raw))
            if (
                len(self._requests) >= REQUESTS_KEPT
                or self._request_bytes + len(raw) > REQUEST_BYTES_KEPT
            ):
                self._requests.clear()
                self._request_bytes = 0
            self._requests[(namespace, raw)] = request
            self._request_bytes += len(raw)
        return request

    def _prepared_for(self, namespace: str, path: str) -> _Prepared:
        try:
            snapshot = self._cache.get(namespace, path)
        except SnapshotsNotLoadedError as exc:
            raise OfrepError(503, OfrepErrorCode.GENERAL, f"cannot evaluate: {exc}") from exc
        if snapshot is None:
            self._prepared.forget((namespace, path))
            raise OfrepError(
                404, OfrepErrorCode.FLAG_NOT_FOUND, f"no flag: unknown {_where(namespace, path)}"
            )
        return self._prepared.of(snapshot)


async def _read_body(receive: Receive, declared: bytes | None, timeout: float) -> bytes:
    """The whole request body; 413 past OFREP_BODY_LIMIT (by Content-Length, or while reading).

    A client sends its context with the request's head, so the first read finds the whole body
    and costs no timer (a deadline per request was most of a 304's cost). The first read is
    bounded by the server's protocol (`bounded_protocol` closes a connection whose body is late);
    the reads after it, of a body that came in parts, by `bounded_body` (408 past `timeout`).
    """
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise OfrepError(
                400, OfrepErrorCode.GENERAL, f"invalid Content-Length header {declared!r}"
            ) from None
        if length > OFREP_BODY_LIMIT:
            raise OfrepError(413, OfrepErrorCode.GENERAL, _too_large(f"{length} bytes"))
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        whole: bytes = message.get("body", b"")
        if len(whole) > OFREP_BODY_LIMIT:
            raise OfrepError(413, OfrepErrorCode.GENERAL, _too_large("more"))
        return whole
    bounded = bounded_body(receive, timeout)
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] == "http.disconnect":
            raise OfrepError(
                400,
                OfrepErrorCode.GENERAL,
                "the client disconnected before it sent the whole body",
            )
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > OFREP_BODY_LIMIT:
            raise OfrepError(413, OfrepErrorCode.GENERAL, _too_large("more"))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await bounded()


def _too_large(got: str) -> str:
    return f"the request body is too large ({got}); the limit is {OFREP_BODY_LIMIT} bytes"


def _evaluation_bytes(path: str, record: VersionRecord, stage: PublishedStage | None) -> bytes:
    found = evaluation(path, record, stage)
    answer = OfrepFlagAnswer(
        key=found.key,
        reason=found.reason,
        variant=found.variant,
        metadata=OfrepFlagMetadata(**found.metadata),
        value=found.value,
    )
    return _json_bytes(answer.body())


def _json_bytes(document: Any) -> bytes:
    return json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _where(namespace: str, path: str) -> str:
    return f"config {path!r} in namespace {namespace!r}"


async def _send_error(send: Send, error: OfrepError, key: str | None) -> None:
    """OFREP's error shape: `{key, errorCode, errorDetails}` for one flag, without `key` for the
    bulk call."""
    document = (
        OfrepBulkError(errorCode=error.code, errorDetails=error.details)
        if key is None
        else OfrepFlagError(key=key, errorCode=error.code, errorDetails=error.details)
    )
    # ASCII-escaped: the key comes from the URL and may hold what UTF-8 cannot encode.
    body = json.dumps(document.body(), separators=(",", ":")).encode()
    headers = [_JSON, (b"content-length", str(len(body)).encode()), _NO_CACHE]
    headers.extend((name.lower().encode(), value.encode()) for name, value in error.headers.items())
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
