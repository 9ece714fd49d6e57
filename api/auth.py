"""What a route asks of access (api/access.py): who the caller is, whether they hold the role it
needs in its namespace, and who an admin write is by."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from tempoconf.access.identity import ClientPrincipal, Principal
from tempoconf.access.roles import Role
from tempoconf.api.access import WWW_AUTHENTICATE, AccessControl
from tempoconf.api.errors import ApiError

__all__ = [
    "WWW_AUTHENTICATE",
    "AdminIdentity",
    "access_of",
    "acting_identity",
    "authorize",
    "caller_of",
    "client_if_none_match",
    "operator",
    "poll_head",
    "require_client",
    "require_role",
    "route_of",
]


def access_of(request: Request) -> AccessControl:
    access: AccessControl = request.app.state.access
    return access


def route_of(request: Request) -> str:
    """The route's template (`/v1/admin/schemas/{path}`: metric labels never hold a raw path)."""
    template: str = request.scope.get("tempoconf.route", "other")
    return template


async def operator(request: Request) -> Principal:
    """Who calls this admin route (401 when nobody the API knows); kept for `caller_of`."""
    principal = await access_of(request).operator(
        request.headers.get("authorization"), route_of(request)
    )
    request.scope[_PRINCIPAL] = principal
    return principal


_PRINCIPAL = "tempoconf.principal"


def caller_of(request: Request) -> Principal | None:
    """The operator `operator` found for this request (None before it ran): what the API
    vouches for with its signature (api/command_signing.py: the caller's emails)."""
    principal = request.scope.get(_PRINCIPAL)
    return principal if isinstance(principal, Principal) else None


def require_role(
    request: Request, principal: Principal, role: Role, namespaces: Iterable[str]
) -> None:
    """403 unless `principal` holds `role` in each of `namespaces`."""
    access_of(request).require(principal, role, namespaces, route_of(request))


async def authorize(request: Request, role: Role, namespace: str) -> Principal:
    """Who calls, once they are known to hold `role` in `namespace` (401, 403 else)."""
    principal = await operator(request)
    require_role(request, principal, role, (namespace,))
    return principal


@dataclass(frozen=True)
class AdminIdentity:
    """Who an admin write is by: `name`, and whether the API verified it."""

    name: str
    verified: bool


def acting_identity(
    principal: Principal, raw: Any, *, field: str = "by", what: str
) -> AdminIdentity:
    """Who an admin write is by, decided here for every route (docs/contract.md, Admin API): the
    verified caller (a named token's name, a policy token's, an OpenID identity); a body whose
    `field` names anyone else is refused (403, naming both). An unverified caller (one shared
    admin token, or none) is who the body's `field` says, else `api` (four eyes then rest on
    trust)."""
    claimed = raw.get(field) if isinstance(raw, dict) else None
    claim = claimed.strip() if isinstance(claimed, str) else ""
    if not principal.verified:
        return AdminIdentity(claim or "api", verified=False)
    if claim and not principal.answers_to(claim):
        # A verified caller is who acts (four eyes count identities): it cannot speak for another.
        raise ApiError(
            403,
            f"{what} refused: this caller is {principal.name!r}, and the body's {field} {claim!r} "
            f"names someone else (leave `{field}` out: the API sets it from who calls)",
        )
    return AdminIdentity(principal.name, verified=True)


def require_client(request: Request, namespace: str | None = None) -> ClientPrincipal:
    """The client calling a client route (401 unless its token is known); with `namespace`,
    403 unless it may read there."""
    access = access_of(request)
    route = route_of(request)
    header = request.headers.get("authorization")
    client = access.client(header, route)
    if namespace is not None:
        access.client_reads(client, namespace, route)
    return client


def poll_head(headers: Iterable[tuple[bytes, bytes]]) -> tuple[bytes | None, bytes | None]:
    """What a client GET's head says to the raw routes (polls, bundles): its `If-None-Match`
    (repeated headers joined) and its `Authorization`."""
    if_none: bytes | None = None
    authorization: bytes | None = None
    for name, value in headers:
        if name == b"if-none-match":
            if_none = value if if_none is None else if_none + b", " + value
        elif name == b"authorization":
            authorization = value
    return if_none, authorization


def client_if_none_match(
    headers: Iterable[tuple[bytes, bytes]], access: AccessControl, route: str
) -> tuple[bytes | None, ClientPrincipal]:
    """A client GET's `If-None-Match` and who the client is. 401 when its token is not known."""
    if_none, authorization = poll_head(headers)
    return if_none, access.client(authorization, route)
