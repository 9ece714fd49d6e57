"""Bearer tokens: `admin_token` guards the admin endpoints, `client_token` config reads and
reports; each only when it is set. Compared in constant time."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from tempoconf.api.errors import ApiError

__all__ = [
    "WWW_AUTHENTICATE",
    "AdminIdentity",
    "admin_identity",
    "bearer_problem",
    "require_admin",
    "require_client",
]

WWW_AUTHENTICATE = 'Bearer realm="tempoconf"'


def bearer_problem(authorization: bytes | None, token: str | None, *, what: str) -> str | None:
    """Why `authorization` (the raw header) does not carry `token`; None when it does, or when
    no token is configured."""
    if token is None:
        return None
    if not authorization:
        return f"missing bearer token: this endpoint needs `Authorization: Bearer <{what}>`"
    scheme, _, credentials = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return f"the Authorization header must use the Bearer scheme with the {what}"
    if not hmac.compare_digest(credentials.strip(), token.encode()):
        return f"wrong bearer token: this endpoint needs the {what}"
    return None


def client_if_none_match(headers: Iterable[tuple[bytes, bytes]], token: str | None) -> bytes | None:
    """A client GET's `If-None-Match` (repeated headers joined), once its client token is
    checked: the raw ASGI routes' (polls, bundles) whole reading of the head. 401 when the
    token is missing or wrong."""
    if_none: bytes | None = None
    authorization: bytes | None = None
    for name, value in headers:
        if name == b"if-none-match":
            if_none = value if if_none is None else if_none + b", " + value
        elif name == b"authorization":
            authorization = value
    if token is not None:
        problem = bearer_problem(authorization, token, what="client token")
        if problem is not None:
            raise ApiError(401, problem, headers={"WWW-Authenticate": WWW_AUTHENTICATE})
    return if_none


def _require(request: Request, token: str | None, what: str) -> None:
    header = request.headers.get("authorization")
    problem = bearer_problem(header.encode("latin-1") if header else None, token, what=what)
    if problem is not None:
        raise ApiError(401, problem, headers={"WWW-Authenticate": WWW_AUTHENTICATE})


def require_admin(request: Request) -> str | None:
    """401 unless the request carries an admin token (when any is configured): the single
    `TEMPOCONF_ADMIN_TOKEN` or one of the named `TEMPOCONF_ADMIN_TOKENS`. Returns the name of
    the named token it carries (who the caller is); None for the single token, which names
    nobody, or when no token is configured."""
    settings = request.app.state.settings
    named: tuple[tuple[str, str], ...] = settings.admin_tokens
    if not named:
        _require(request, settings.admin_token, "admin token")
        return None
    header = request.headers.get("authorization")
    raw = header.encode("latin-1") if header else None
    tokens = [token for _, token in named] + (
        [settings.admin_token] if settings.admin_token else []
    )
    # Every token compared (constant time each), so the answer's timing tells no token's place.
    problems = [bearer_problem(raw, token, what="admin token") for token in tokens]
    refusal = next((found for found in problems if found is not None), None)
    if refusal is not None and all(found is not None for found in problems):
        raise ApiError(401, refusal, headers={"WWW-Authenticate": WWW_AUTHENTICATE})
    for (name, _), found in zip(named, problems, strict=False):
        if found is None:
            return name
    return None


@dataclass(frozen=True)
class AdminIdentity:
    """Who an admin write is by: `name`, and whether the API verified it (a named token's)."""

    name: str
    verified: bool


def admin_identity(request: Request, raw: Any, *, field: str = "by", what: str) -> AdminIdentity:
    """Who an admin write is by, decided here for every route (docs/contract.md, Admin API): the
    name of the named admin token the request carries; a body whose `field` names anyone else is
    refused (403, naming both) before anything else of it is read. Without named tokens nobody is
    verified: the body's `field` stands, else `api` (four eyes then rest on trust)."""
    caller = require_admin(request)
    claimed = raw.get(field) if isinstance(raw, dict) else None
    claim = claimed.strip() if isinstance(claimed, str) else ""
    if caller is None:
        return AdminIdentity(claim or "api", verified=False)
    if claim and claim != caller:
        # A named token is who acts (four eyes count identities): it cannot speak for another.
        raise ApiError(
            403,
            f"{what} refused: this admin token is {caller!r}, and the body's {field} {claim!r} "
            f"names someone else (leave `{field}` out: the API sets it from the token's name)",
        )
    return AdminIdentity(caller, verified=True)


def require_client(request: Request) -> None:
    """401 unless the request carries the client token (when one is configured)."""
    _require(request, request.app.state.settings.client_token, "client token")
