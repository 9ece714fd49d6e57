"""The OpenAPI 3.1 document of the API, served at `/openapi.json`.

The paths, parameters and their prose are written here, by concern (distribution: the clients';
admin: the operators'; operations: probes, metrics and this document); every body's schema is
generated from the model that reads it (requests, validation mode) or builds it (answers,
serialization mode), in components. `tests/api/test_openapi.py` checks both: each body is its
model's schema, and the paths are the routes the app serves, both ways.
"""

from __future__ import annotations

from typing import Any

from tempoconf import __version__
from tempoconf.api.openapi.admin import admin_paths, command_paths, freeze_paths, served_paths
from tempoconf.api.openapi.components import (
    ADMIN,
    ANSWERS,
    CLIENT,
    REF_TEMPLATE,
    REQUEST_BODIES,
    ROLE_KEY,
    body_schemas,
    forbidden,
    parameters,
    security_schemes,
)
from tempoconf.api.openapi.distribution import distribution_paths, ofrep_paths
from tempoconf.api.openapi.operations import operations_paths

__all__ = ["ANSWERS", "REF_TEMPLATE", "REQUEST_BODIES", "body_schemas", "openapi_document"]


def openapi_document() -> dict[str, Any]:
    return _with_refusals(
        {
            "openapi": "3.1.0",
            "info": {
                "title": "tempoconf distribution API",
                "version": __version__,
                "description": "Serves each polling client the config version its identity resolves "
                "to; takes health reports; admin endpoints drive rollouts on Temporal. "
                "A `{path}` parameter is a config path and may contain '/', never ':': a "
                "command on a rollout is `POST /v1/admin/rollouts/{path}:{command}`.",
            },
            # In the order the document has always listed them.
            "paths": {
                **distribution_paths(),
                **admin_paths(),
                **operations_paths(),
                **command_paths(),
                **freeze_paths(),
                **served_paths(),
                **ofrep_paths(),
            },
            "components": {
                "schemas": body_schemas()[1],
                "parameters": parameters(),
                "securitySchemes": security_schemes(),
            },
        }
    )


def _with_refusals(document: dict[str, Any]) -> dict[str, Any]:
    """Every operation that takes a token may answer 403 under an access policy: an admin one
    for a caller without its role there (or a client token), a client one for a namespace its
    client token does not cover (or an operator's token)."""
    for operations in document["paths"].values():
        for operation in operations.values():
            security = operation.get("security")
            if security == ADMIN:
                what = f"The caller lacks the {operation[ROLE_KEY]} role in the namespace"
            elif security == CLIENT:
                what = "The client token does not cover the namespace"
            else:
                continue
            operation["responses"].setdefault("403", forbidden(what))
    return document
