"""What the poll handlers of configs (api/polls.py) and bundles (api/bundles.py) share: each is
the ASGI callable of `GET|HEAD {prefix}{path}` over a snapshot source, and the protocol's
`DirectAnswers` for its plain GETs (api/lean_protocol.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import ClassVar, Generic

from starlette.datastructures import QueryParams

from tempoconf.api.access import AccessControl
from tempoconf.api.distribution import (
    ConfigQuery,
    ParsedQueries,
    PerSnapshot,
    Prepared,
    header_lines,
    parse_config_query,
)
from tempoconf.api.errors import ApiError, error_parts
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.snapshots import SnapshotsNotLoadedError
from tempoconf.api.waiters import Deadlines
from tempoconf.resolution import ConfigSnapshot
from tempoconf.settings import Settings

__all__ = ["SnapshotPolls", "config_where", "failed_answer"]


class SnapshotPolls(Generic[Prepared]):
    """The state of a poll handler: its source, what each config's snapshot prepares, the
    queries parsed, the long-polls' deadlines, and whether it is shutting down."""

    prefix: ClassVar[bytes]
    """The request targets it answers start with this (then comes the config path)."""

    def __init__(
        self,
        cache: SnapshotSource,
        settings: Settings,
        metrics: ApiMetrics,
        prepare: Callable[[ConfigSnapshot], Prepared],
        *,
        serving: str = "",
        access: AccessControl | None = None,
    ) -> None:
        self._cache = cache
        self._settings = settings
        self.access = access or AccessControl(settings)
        """Who may poll which namespace (the app's, api/access.py)."""
        self._metrics = metrics
        self._prepared = PerSnapshot(prepare)
        self._queries = ParsedQueries()
        self._deadlines = Deadlines()
        self._closing = False
        self._serving = serving
        """What a 503 says it cannot serve, before the config's name."""
        cache.on_change(self._snapshots_changed)

    @property
    def closing(self) -> bool:
        """The server is stopping: a long-poll answers now, whatever its `wait`."""
        return self._closing

    def _snapshots_changed(self, keys: Sequence[tuple[str, str]]) -> None:
        """(Snapshot source listener, right after a refresh.) Wake the long-polls of `keys`."""
        raise NotImplementedError

    def _query(self, path: str, query_string: bytes) -> ConfigQuery:
        """The parsed query of a poll of `path` (the whole target path, prefix included)."""
        query = self._queries.get((path, query_string))
        if query is None:
            # Clients repeat the same query on every poll: parse it once.
            parsed = parse_config_query(
                path[len(self.prefix) :], self._params(query_string), query_string
            )
            query = self._queries.keep((path, query_string), parsed)
        return query

    def _prepared_for(self, query: ConfigQuery) -> Prepared:
        """What the snapshot of `query`'s config prepares; ApiError 503 while the snapshots were
        never loaded, 404 for an unknown config."""
        key = (query.namespace, query.path)
        try:
            snapshot = self._cache.get(*key)
        except SnapshotsNotLoadedError as exc:
            raise ApiError(
                503, f"cannot serve {self._serving}{config_where(query)}: {exc}"
            ) from exc
        if snapshot is None:
            self._prepared.forget(key)
            raise ApiError(404, f"unknown {config_where(query)}")
        return self._prepared.of(snapshot)

    def _params(self, query_string: bytes) -> QueryParams:
        """The query parameters a poll is read from."""
        return QueryParams(query_string)


def config_where(query: ConfigQuery) -> str:
    return f"config {query.path!r} in namespace {query.namespace!r}"


def failed_answer(
    exc: Exception, logger: logging.Logger, what: str, *args: object
) -> tuple[int, bytes]:
    """(status, header lines and body) for a long-poll answered on its connection whose answer
    failed: an ApiError as it says; anything else is a bug, logged (`unexpected error answering`
    `what`), and a 500, so the client still gets an answer, as `__call__` gives it."""
    if isinstance(exc, ApiError):
        error = exc
    else:
        logger.exception("unexpected error answering " + what, *args)
        error = ApiError(500, "internal error")
    status, headers, body = error_parts(error)
    return status, header_lines(headers) + body
