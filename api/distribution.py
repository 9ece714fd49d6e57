"""What one poll asks for, and what it is answered (docs/contract.md, Distribution API).

Answers are prepared once per config snapshot: for stable and for each stage, the body bytes and
the ETag, so a poll is a resolution (a few comparisons and one md5) and a dict lookup.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from time import time
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import unquote_to_bytes

from starlette.datastructures import QueryParams

from tempoconf.api.answers import ConfigAnswer, ConfigMetadata
from tempoconf.api.errors import ApiError
from tempoconf.api.etag import config_etag
from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem, path_problem
from tempoconf.resolution import (
    STABLE,
    ClientIdentity,
    ConfigSnapshot,
    PublishedStage,
    VersionRecord,
    stage_kind,
    stage_matches,
)
from tempoconf.storable import text_problem

__all__ = [
    "MAX_WAIT",
    "QUERIES_KEPT",
    "ConfigQuery",
    "KeptPerQuery",
    "ParsedQueries",
    "PerSnapshot",
    "PollKey",
    "PreparedAnswer",
    "PreparedResponse",
    "PreparedConfig",
    "config_name_from",
    "header_lines",
    "json_headers",
    "parse_config_query",
    "parse_wait",
    "prepare_config",
]

MAX_WAIT = 60.0
"""Longest long-poll, in seconds."""
ANSWERS_KEPT = 65_536
"""Per config: distinct queries whose answer is remembered (then the memory starts over)."""
QUERIES_KEPT = 65_536
"""Distinct (path, query string) pairs whose parsed query is remembered."""

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no", ""})
_JSON = (b"content-type", b"application/json")
_NO_CACHE = (b"cache-control", b"no-cache")
_NO_LABELS: Mapping[str, str] = MappingProxyType({})
"""The labels of a client that sends none (most): one shared empty mapping, read-only."""


K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True, eq=False)
class ConfigQuery:
    """One poll: which config, who asks, whether it wants stable regardless of stages, and how
    long it may wait for a change (0: answer at once).

    Compared and hashed by identity: the poll path parses each distinct query string once, and
    keys per-query memory (the clients seen) by that object, which costs no hashing of fields."""

    namespace: str
    path: str
    client: ClientIdentity
    anonymous: bool
    """No `client` given: percentile stages never match, channel and label stages may."""
    stable_only: bool = False
    wait: float = 0.0


class KeptPerQuery(dict[K, V], Generic[K, V]):
    """What each distinct poll (its request target, or its path and query string) was worked
    out to: clients repeat the same query on every poll, so each is worked out once. Past
    QUERIES_KEPT the memory starts over."""

    __slots__ = ()

    def keep(self, key: K, value: V) -> V:
        if len(self) >= QUERIES_KEPT:
            self.clear()
        self[key] = value
        return value


class ParsedQueries(KeptPerQuery[tuple[str, bytes], ConfigQuery]):
    """Parsed queries by (path, query string)."""

    __slots__ = ()


class FromSnapshot(Protocol):
    @property
    def snapshot(self) -> ConfigSnapshot: ...


Prepared = TypeVar("Prepared", bound=FromSnapshot)


class PerSnapshot(Generic[Prepared]):
    """What is prepared from each config's snapshot (bodies, ETags), built once per change of
    that snapshot: unchanged configs keep their snapshot object across refreshes (SnapshotCache),
    so what was prepared from it stays valid while it is the one held."""

    __slots__ = ("_prepare", "_held")

    def __init__(self, prepare: Callable[[ConfigSnapshot], Prepared]) -> None:
        self._prepare = prepare
        self._held: dict[tuple[str, str], Prepared] = {}

    def of(self, snapshot: ConfigSnapshot) -> Prepared:
        key = (snapshot.namespace, snapshot.path)
        prepared = self._held.get(key)
        if prepared is None or prepared.snapshot is not snapshot:
            prepared = self._held[key] = self._prepare(snapshot)
        return prepared

    def forget(self, key: tuple[str, str]) -> None:
        """The config is gone: drop what was prepared for it."""
        self._held.pop(key, None)


@dataclass(frozen=True, slots=True)
class PreparedResponse:
    """A 200 and its 304, ready to write: built once per snapshot, sent as is by every poll."""

    etag: str
    etag_bytes: bytes
    body: bytes
    headers: list[tuple[bytes, bytes]]
    not_modified_headers: list[tuple[bytes, bytes]]
    wire: bytes
    """The 200 after its status line and the server's default headers: its header lines, the
    blank line, the body; what a poll answered on the connection writes (api/lean_protocol.py)."""
    not_modified_wire: bytes
    """The same for the 304."""


PollKey = tuple[str, str, str, int]
"""(namespace, path, stage, status): a poll's series in `ApiMetrics.polls`."""


@dataclass(frozen=True, slots=True)
class PreparedAnswer(PreparedResponse):
    """The 200 (and 304) of one (config snapshot, stage), ready to write."""

    stage: str
    version: str
    start: dict[str, Any]
    """The ASGI `http.response.start` of the 200, built once (uvicorn does not change it)."""
    not_modified_start: dict[str, Any]
    """The same for the 304."""
    poll_keys: tuple[PollKey, PollKey]
    """Its keys of `ApiMetrics.polls`, for a 304 and a 200 (indexed by "modified"), built once:
    a poll counts itself without building a tuple."""


class PreparedConfig:
    """Every answer a config's snapshot can give, and how to choose one for a client.

    `answer_for` remembers each query's answer until the next lease ends (the only thing that
    changes an answer without a new snapshot): a repeated poll costs no resolution at all.
    """

    __slots__ = ("snapshot", "stable", "stages", "_answers", "_valid_until")

    def __init__(
        self,
        snapshot: ConfigSnapshot,
        stable: PreparedAnswer | None,
        stages: tuple[tuple[PublishedStage, PreparedAnswer], ...],
    ) -> None:
        self.snapshot = snapshot
        self.stable = stable
        self.stages = stages
        """In evaluation order (by index); empty when no rollout is live."""
        self._answers: dict[bytes, PreparedAnswer | None] = {}
        self._valid_until = -math.inf
        """time.time() of the next lease's end: a float compare per poll, not a datetime.now."""

    def answer_for(
        self, key: bytes, query: ConfigQuery, now: datetime | None = None
    ) -> PreparedAnswer | None:
        """`answer(query, now)` (default: the current time), remembered under `key` (the raw
        query string of `query`)."""
        if time() >= self._valid_until:
            now = now or datetime.now(UTC)
            self._answers.clear()
            expiry = self.next_expiry(now)
            self._valid_until = math.inf if expiry is None else expiry.timestamp()
        else:
            try:
                return self._answers[key]
            except KeyError:
                pass
        answer = self.answer(query, now or datetime.now(UTC))
        if len(self._answers) >= ANSWERS_KEPT:
            self._answers.clear()
        self._answers[key] = answer
        return answer

    def answer_until(self, query: ConfigQuery) -> tuple[PreparedAnswer | None, float]:
        """`answer(query, now)`, and the time() until which it holds: the next lease's end (a
        write changes the snapshot, and with it this object). Remembers nothing: the caller
        keeps it (api/polls.py's direct answers)."""
        now = datetime.now(UTC)
        expiry = self.next_expiry(now)
        return self.answer(query, now), math.inf if expiry is None else expiry.timestamp()

    def answer(self, query: ConfigQuery, now: datetime) -> PreparedAnswer | None:
        """What this client gets at `now` (docs/contract.md, Resolution); None: nothing to serve it."""
        if not query.stable_only:
            path = self.snapshot.path
            for stage, answer in self.stages:
                if stage.expires_at <= now:
                    continue
                # Every anonymous client would share one bucket, so a percentile would take all
                # or none: anonymous clients never match percentile stages.
                if query.anonymous and stage.percentile is not None:
                    continue
                if stage_matches(stage, path, query.client):
                    return answer
        return self.stable

    def next_expiry(self, now: datetime) -> datetime | None:
        """The earliest lease still running at `now`: when an answer may change without a write."""
        leases = [stage.expires_at for stage, _ in self.stages if stage.expires_at > now]
        return min(leases) if leases else None


def prepare_config(snapshot: ConfigSnapshot) -> PreparedConfig:
    stable = _prepare(snapshot, snapshot.stable, None) if snapshot.stable else None
    stages: tuple[tuple[PublishedStage, PreparedAnswer], ...] = ()
    if snapshot.staged is not None:
        staged = snapshot.staged
        stages = tuple(
            (stage, _prepare(snapshot, staged, stage))
            for stage in sorted(snapshot.stages, key=lambda s: s.index)
        )
    return PreparedConfig(snapshot, stable, stages)


def _prepare(
    snapshot: ConfigSnapshot, record: VersionRecord, published: PublishedStage | None
) -> PreparedAnswer:
    """The answer that serves `record` on `published` (None: stable)."""
    stage = STABLE if published is None else published.name
    expires_at = None if published is None else published.expires_at
    document = ConfigAnswer(
        namespace=snapshot.namespace,
        path=snapshot.path,
        version=record.version,
        stage=stage,
        stage_kind=stage_kind(published),
        value=record.value,
        expires_at=expires_at.astimezone(UTC).isoformat() if expires_at else None,
        metadata=ConfigMetadata.model_validate(record.metadata()),
    )
    body = json.dumps(
        document.body(), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode()
    etag = config_etag(snapshot.namespace, snapshot.path, record.version, stage)
    headers, not_modified_headers = json_headers(body, etag, _NO_CACHE)
    return PreparedAnswer(
        stage=stage,
        version=record.version,
        etag=etag,
        etag_bytes=not_modified_headers[0][1],
        body=body,
        headers=headers,
        not_modified_headers=not_modified_headers,
        start={"type": "http.response.start", "status": 200, "headers": headers},
        not_modified_start={
            "type": "http.response.start",
            "status": 304,
            "headers": not_modified_headers,
        },
        wire=header_lines(headers) + body,
        not_modified_wire=header_lines(not_modified_headers),
        poll_keys=(
            (snapshot.namespace, snapshot.path, stage, 304),
            (snapshot.namespace, snapshot.path, stage, 200),
        ),
    )


def json_headers(
    body: bytes, etag: str, cache_control: tuple[bytes, bytes]
) -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """The headers of a JSON body's 200, and of its 304: its ETag (first of the 304's) and its
    Cache-Control in both."""
    etag_header = (b"etag", etag.encode())
    headers = [_JSON, (b"content-length", str(len(body)).encode()), etag_header, cache_control]
    return headers, [etag_header, cache_control]


def header_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """Header lines and the blank line that ends them, as uvicorn writes them."""
    return b"".join(name + b": " + value + b"\r\n" for name, value in headers) + b"\r\n"


def config_name_from(path: str, params: QueryParams) -> tuple[str, str]:
    """(namespace, path) of a request on one config: `{path}` in the URL and `?namespace=`;
    ApiError(400) when either is invalid."""
    problem = path_problem(path)
    if problem is not None:
        raise ApiError(400, f"invalid config path in the URL: {problem}")
    namespace = params.get("namespace", DEFAULT_NAMESPACE)
    problem = namespace_problem(namespace)
    if problem is not None:
        raise ApiError(400, f"invalid query parameter namespace: {problem}")
    return namespace, path


def parse_config_query(path: str, params: QueryParams, raw_query: bytes = b"") -> ConfigQuery:
    """Read a poll from its path and query parameters (`raw_query`: the query string as sent).

    Raises ApiError(400) naming the parameter that is wrong.
    """
    undecodable = _not_utf8(raw_query)
    if undecodable is not None:
        raise ApiError(
            400,
            f"invalid query parameter {undecodable}: not valid UTF-8 once percent-decoded",
        )
    namespace, path = config_name_from(path, params)
    client_id = params.get("client") or ""
    channel = params.get("channel") or None
    labels = _parse_labels(params.getlist("label"))
    # A named client's identity is written to the store (api/seen.py): refused here when no
    # backend could keep it, so it never reaches the flush that writes everyone else's.
    for name, text in (
        ("client", client_id),
        ("channel", channel or ""),
        *(("label", f"{key}={value}") for key, value in labels.items()),
    ):
        problem = text_problem(text)
        if problem is not None:
            raise ApiError(400, f"invalid query parameter {name}: {problem}")
    stable_only = _parse_bool("stable", params.get("stable", ""))
    wait = parse_wait(params.get("wait"))
    # A parsed query is held per client while it long-polls (and remembered, ParsedQueries):
    # the names every client of a config repeats are one string each, not one per client.
    return ConfigQuery(
        namespace=sys.intern(namespace),
        path=sys.intern(path),
        client=ClientIdentity(
            client_id=client_id,
            channel=sys.intern(channel) if channel is not None else None,
            labels=labels or _NO_LABELS,
        ),
        anonymous=client_id == "",
        stable_only=stable_only,
        wait=wait,
    )


def _not_utf8(raw_query: bytes) -> str | None:
    """The name of the first parameter that is not UTF-8 once percent-decoded, else None.
    QueryParams would put U+FFFD in its place, so that every such client id (or channel, or
    label) were one and the same identity."""
    if b"%" not in raw_query and raw_query.isascii():
        return None  # every poll of a well-behaved client: nothing to decode
    for pair in raw_query.split(b"&"):
        name, _, value = pair.partition(b"=")
        for part in (name, value):
            try:
                unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                return unquote_to_bytes(name).decode("utf-8", "replace")
    return None


def parse_wait(raw: str | None) -> float:
    """A `wait` query parameter: seconds from 0 to MAX_WAIT (absent: 0), else 400 naming it."""
    if raw is None or raw == "":
        return 0.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_WAIT:  # also refuses nan and inf
        raise ApiError(
            400, f"invalid query parameter wait={raw!r}: expected seconds from 0 to {MAX_WAIT:g}"
        )
    return seconds


def _parse_labels(raw: list[str]) -> Mapping[str, str]:
    labels: dict[str, str] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep:
            raise ApiError(400, f"invalid query parameter label={item!r}: expected label=key=value")
        if not key:
            raise ApiError(400, f"invalid query parameter label={item!r}: the label key is empty")
        if labels.get(key, value) != value:
            raise ApiError(
                400,
                f"invalid query parameter label: {key!r} is given twice "
                f"({labels[key]!r} and {value!r})",
            )
        labels[key] = value
    return labels


def _parse_bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ApiError(400, f"invalid query parameter {name}={raw!r}: expected true or false")
