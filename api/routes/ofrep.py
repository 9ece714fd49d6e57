"""`POST /ofrep/v1/evaluate/flags[/{key}]`: answered by `api.ofrep.OfrepEvaluations` ahead of the
router (see `api.app`). The routes here only list them with the others: for 405s and the OpenAPI
check."""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tempoconf.api.ofrep import OFREP_BULK, OFREP_FLAG_PREFIX
from tempoconf.api.routing import CONFIG_PATH

__all__ = ["routes"]


class _ToOfrep:
    """An ASGI app that hands the request to the app's OfrepEvaluations."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope["app"].state.ofrep(scope, receive, send)


routes = [
    Route(OFREP_BULK, _ToOfrep(), methods=["POST"]),
    # The key is a config path (slashes included), named `key` as OFREP names it.
    Route(OFREP_FLAG_PREFIX + CONFIG_PATH.replace("{path:", "{key:"), _ToOfrep(), methods=["POST"]),
]
