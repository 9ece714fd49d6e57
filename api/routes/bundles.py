"""`GET /v1/bundles/{path}`: answered by `api.bundles.BundlePolls` ahead of the router (see
`api.app`). The route here only lists it with the others: for 405s and the OpenAPI check."""

from __future__ import annotations

from starlette.routing import Route

from tempoconf.api.routes.configs import HandOver

__all__ = ["routes"]

routes = [Route("/v1/bundles/{path:path}", HandOver("bundle_polls"), methods=["GET", "HEAD"])]
