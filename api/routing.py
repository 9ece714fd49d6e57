"""`route(...)`: a Starlette Route whose latency is recorded under its template."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from time import perf_counter

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tempoconf.rollout.commands import COMMAND_NAMES

__all__ = ["CONFIG_PATH", "ROLLOUT_PATH", "Endpoint", "route", "template_of"]

Endpoint = Callable[[Request], Awaitable[Response]]
_CONVERTOR = re.compile(r"\{(\w+):\w+\}")


class _ConfigPathConvertor(Convertor[str]):
    """Like Starlette's `path`, but newlines included: an invalid config path must reach the
    endpoint and get its 400, not fall through to a 404 "no such route"."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class _RolloutPathConvertor(_ConfigPathConvertor):
    """A config path that does not end in `:<command>`: that is a command's route (POST only),
    which a config path cannot be taken for, since none contains ':'."""

    regex = "(?s:(?!.*:(?:" + "|".join(COMMAND_NAMES) + ")$).*)"


register_url_convertor("tempoconf_config_path", _ConfigPathConvertor())
register_url_convertor("tempoconf_rollout_path", _RolloutPathConvertor())
CONFIG_PATH = "{path:tempoconf_config_path}"
"""The `{path}` segment of a route: a config path, slashes included."""
ROLLOUT_PATH = "{path:tempoconf_rollout_path}"
"""`{path}` where a route `{path}:<command>` exists beside it for another method."""


def template_of(path: str) -> str:
    """`/v1/admin/schemas/{path:...}` → `/v1/admin/schemas/{path}` (as OpenAPI writes it)."""
    return _CONVERTOR.sub(r"{\1}", path)


def route(path: str, endpoint: Endpoint, *, methods: list[str], name: str | None = None) -> Route:
    template = template_of(path)

    async def timed(request: Request) -> Response:
        started = perf_counter()
        request.scope["tempoconf.route"] = template  # access refusals are counted by route
        try:
            return await endpoint(request)
        finally:
            request.app.state.metrics.observe_request(
                request.method, template, perf_counter() - started
            )

    timed.__name__ = timed.__qualname__ = endpoint.__name__
    timed.__doc__ = endpoint.__doc__
    return Route(path, timed, methods=methods, name=name or endpoint.__name__)
