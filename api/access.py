"""Who may call what: every route asks `AccessControl` (app.state.access) who the caller is and
whether they hold the role the route needs in its namespace.

Two modes. Without `TEMPOCONF_ACCESS_FILE` (the single-team mode) the admin token(s) and the
client token guard everything, as before policies. With it, the policy's tokens, clients and
OpenID provider say who the caller is, and its grants what they may do where. A 401 says the
credential is missing or not one the API knows; a 403 says who the caller is and what they lack,
never a secret. Refusals are counted by route and reason, and logged once per caller a minute.
"""

from __future__ import annotations

import hmac
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from time import monotonic
from typing import TYPE_CHECKING

from tempoconf.access.identity import (
    EVERY_CLIENT,
    ClientPrincipal,
    Principal,
    PrincipalKind,
    normal_emails,
    oidc_identity,
)
from tempoconf.access.oidc import OidcRefusal, OidcVerifier, looks_like_jwt
from tempoconf.access.policy import AccessPolicy
from tempoconf.access.roles import Role
from tempoconf.access.source import PolicySource
from tempoconf.api.errors import ApiError
from tempoconf.settings import Settings

if TYPE_CHECKING:
    from tempoconf.access.signing import CommandSigner

__all__ = ["WWW_AUTHENTICATE", "AccessControl", "AccessDenials", "bearer_credentials"]

logger = logging.getLogger(__name__)

WWW_AUTHENTICATE = 'Bearer realm="tempoconf"'
_LOG_EVERY = 60.0
_LOG_KEYS_KEPT = 10_000


def bearer_credentials(authorization: bytes | str | None) -> bytes | bool | None:
    """The credentials of a Bearer `Authorization` header; None when there is no header; False
    when the header is not a Bearer one."""
    if authorization is None or not authorization.strip():
        return None
    raw = authorization.encode("latin-1") if isinstance(authorization, str) else authorization
    if raw.startswith(b"Bearer ") and b" " not in raw[7:]:  # as every client sends it: per poll
        return raw[7:] or False
    scheme, _, credentials = raw.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not credentials.strip():
        return False
    return credentials.strip()


class AccessDenials:
    """Refusals counted by (route, reason) for /metrics; each caller's logged once a minute."""

    def __init__(self, clock: Callable[[], float] = monotonic) -> None:
        self.counts: defaultdict[tuple[str, str], int] = defaultdict(int)
        self._logged: dict[tuple[str, str], float] = {}
        self._clock = clock

    def deny(self, status: int, route: str, reason: str, who: str, message: str) -> ApiError:
        self.counts[(route, reason)] += 1
        now = self._clock()
        key = (who, reason)
        last = self._logged.get(key)
        if last is None or now - last >= _LOG_EVERY:
            if len(self._logged) >= _LOG_KEYS_KEPT:  # bounded: the names come from requests
                self._logged = {k: t for k, t in self._logged.items() if now - t < _LOG_EVERY}
            self._logged[key] = now
            logger.warning("access denied (%s) to %s on %s: %s", reason, who, route, message)
        headers = {"WWW-Authenticate": WWW_AUTHENTICATE} if status == 401 else None
        return ApiError(status, message, headers=headers)


class AccessControl:
    """The API's access decisions, over `settings` (single-team) or a policy file."""

    def __init__(self, settings: Settings, source: PolicySource | None = None) -> None:
        self.settings = settings
        self.source = source
        self.denials = AccessDenials()
        self._policy: AccessPolicy | None = None
        self._verifier: OidcVerifier | None = None
        self._signer: CommandSigner | None = None
        self._retired: list[OidcVerifier] = []
        self._clients: dict[bytes, ClientPrincipal] = {}
        """The policy's clients by their secret's digest, made once (polls ask every time)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessControl:
        """PolicyError when the policy file does not load, SigningKeyError when its signing key
        does not; ValueError when the single-team tokens are set beside it (which of the two
        would guard the API is not for the reader to guess)."""
        if settings.access_file is None:
            return cls(settings)
        both = [
            name
            for name, value in (
                ("TEMPOCONF_ADMIN_TOKEN", settings.admin_token),
                ("TEMPOCONF_ADMIN_TOKENS", settings.admin_tokens),
                ("TEMPOCONF_CLIENT_TOKEN", settings.client_token),
            )
            if value
        ]
        if both:
            raise ValueError(
                f"TEMPOCONF_ACCESS_FILE is set, and so is {', '.join(both)}: with an access policy "
                "every token is in the policy file; unset the others"
            )
        control = cls(settings, PolicySource(settings.access_file))
        control._refresh()
        return control

    @property
    def policy(self) -> AccessPolicy | None:
        """The policy in force (reloaded when its file changed); None in the single-team mode."""
        if self.source is None:
            return None
        return self._refresh()

    def _refresh(self) -> AccessPolicy:
        assert self.source is not None
        policy = self.source.current()
        if policy is not self._policy:
            self._adopt(policy)
        return policy

    def _adopt(self, policy: AccessPolicy) -> None:
        """What a new policy brings: its OpenID verifier (kept, keys and all, when the provider
        did not change) and its signing key (a key that does not load keeps the one before)."""
        if self._verifier is not None and self._verifier.settings != policy.oidc:
            self._retired.append(self._verifier)  # closed with the app (aclose)
            self._verifier = None
        if policy.oidc is not None and self._verifier is None:
            self._verifier = OidcVerifier(
                policy.oidc, min_refetch_interval=policy.oidc.key_refresh_seconds
            )
        if policy.signing_key is not None:
            from tempoconf.access.signing import CommandSigner, SigningKeyError

            try:
                self._signer = CommandSigner.from_pem_file(policy.signing_key)
            except SigningKeyError as error:
                if self._policy is None:
                    raise  # at start: the process refuses to run
                # A reload: approvals stay signed with the key before (or, without one, unsigned
                # and so refused by the rollouts that carry a key: the safe side).
                logger.error("%s; the signing key loaded before stays in use", error)
        else:
            self._signer = None
        self._clients = {
            entry.digest: ClientPrincipal(entry.name, entry.namespaces) for entry in policy.clients
        }
        self._policy = policy

    async def aclose(self) -> None:
        """Close the OpenID verifiers' connections (the app's lifespan ends)."""
        for verifier in [*self._retired, *([self._verifier] if self._verifier else [])]:
            await verifier.aclose()
        self._retired.clear()

    def reload(self) -> bool:
        """SIGHUP: read the policy file again now."""
        if self.source is None or not self.source.reload():
            return False
        self._refresh()
        return True

    @property
    def signer(self) -> CommandSigner | None:
        """The key the API signs its commands with (the policy's signing_key); None without."""
        if self.source is not None:
            self._refresh()
        return self._signer

    # -- clients ---------------------------------------------------------------------------
    def known_client(self, authorization: bytes | str | None) -> ClientPrincipal | None:
        """The client whose credential this is; None (not counted as refused) when none is."""
        # Asked on every poll: the policy in force without the property's indirection, and an
        # open single-team API answers before reading the header at all.
        if self.source is None:
            token = self.settings.client_token
            if token is None:
                return EVERY_CLIENT
            credentials = bearer_credentials(authorization)
            if isinstance(credentials, bytes) and hmac.compare_digest(credentials, token.encode()):
                return EVERY_CLIENT
            return None
        policy = self.source.current()
        if policy is not self._policy:
            self._adopt(policy)
        credentials = bearer_credentials(authorization)
        if not isinstance(credentials, bytes):
            return None
        entry = policy.client(credentials)
        return self._clients[entry.digest] if entry is not None else None

    def client(self, authorization: bytes | str | None, route: str) -> ClientPrincipal:
        """The fleet client calling a client route (config reads, bundles, OFREP, reports);
        401 without a client credential the API knows, 403 for an operator's token."""
        found = self.known_client(authorization)
        if found is not None:
            return found
        policy = self.policy
        credentials = bearer_credentials(authorization)
        if policy is None or not isinstance(credentials, bytes):
            raise self._unauthenticated(route, credentials, "client token")
        operator = policy.token(credentials)
        if operator is not None:
            raise self.denials.deny(
                403,
                route,
                "operator_token",
                operator.name,
                f"this is the operator token {operator.name!r}: client routes take a client "
                "token (the access policy's `clients`)",
            )
        if _looks_like_jwt(credentials):
            raise self.denials.deny(
                401,
                route,
                "oidc_token",
                "an OpenID Connect token",
                "client routes take a client token (the access policy's `clients`), not an "
                "OpenID Connect token",
            )
        raise self._unknown(route, "client token")

    def client_reads(self, client: ClientPrincipal, namespace: str, route: str) -> None:
        """403 unless `client` may read (and report in) `namespace`. A 403, not a 404: it is
        decided before the config is looked up, from the namespace the caller named, so it
        tells nothing of what the namespace holds."""
        if client.reads(namespace):
            return
        raise self.denials.deny(
            403,
            route,
            "namespace",
            client.name,
            f"client {client.name!r} may not read namespace {namespace!r} "
            f"(its namespaces: {', '.join(client.namespaces or ())})",
        )

    # -- scrapers ----------------------------------------------------------------------------
    def scraper(self, authorization: str | None, route: str) -> None:
        """`GET /metrics`: open without a policy (as before policies); under one, only a scraper
        token of the policy's `scrapers` (401 without one the API knows, 403 for an operator's
        or a client's token: metrics name every namespace's configs and versions)."""
        policy = self.policy
        if policy is None:
            return
        credentials = bearer_credentials(authorization)
        if not isinstance(credentials, bytes):
            raise self._unauthenticated(route, credentials, "scraper token")
        if policy.scraper(credentials) is not None:
            return
        operator = policy.token(credentials)
        known = operator or policy.client(credentials)
        if known is not None:
            kind = "client" if operator is None else "operator"
            raise self.denials.deny(
                403,
                route,
                f"{kind}_token",
                known.name,
                f"this is the {kind} token {known.name!r}: /metrics takes a scraper token "
                "(the access policy's `scrapers`)",
            )
        if _looks_like_jwt(credentials):
            raise self.denials.deny(
                401,
                route,
                "oidc_token",
                "an OpenID Connect token",
                "/metrics takes a scraper token (the access policy's `scrapers`), not an "
                "OpenID Connect token",
            )
        raise self._unknown(route, "scraper token")

    # -- operators -------------------------------------------------------------------------
    async def operator(self, authorization: str | None, route: str) -> Principal:
        """Who calls an admin route: 401 without an operator credential the API knows (503 when
        the OpenID provider cannot be reached to check one)."""
        policy = self.policy
        if policy is None:
            return self._single_team(authorization, route)
        credentials = bearer_credentials(authorization)
        if not isinstance(credentials, bytes):
            raise self._unauthenticated(route, credentials, "operator token")
        entry = policy.token(credentials)
        if entry is not None:
            return Principal(
                entry.name, PrincipalKind.TOKEN, entry.grants, emails=normal_emails(entry.emails)
            )
        client = policy.client(credentials)
        if client is not None:
            raise self.denials.deny(
                403,
                route,
                "client_token",
                client.name,
                f"this is the client token {client.name!r}: it reads configs and reports "
                "health; admin routes take an operator's token",
            )
        if self._verifier is not None and _looks_like_jwt(credentials):
            return await self._oidc(policy, credentials.decode("ascii", "replace"), route)
        raise self._unknown(route, "operator token")

    async def _oidc(self, policy: AccessPolicy, token: str, route: str) -> Principal:
        assert self._verifier is not None
        try:
            identity = await self._verifier.verify(token)
        except OidcRefusal as refusal:
            if refusal.reason == "provider_unreachable":
                raise self.denials.deny(
                    503, route, refusal.reason, "an OpenID Connect token", str(refusal)
                ) from None
            raise self.denials.deny(
                401,
                route,
                f"oidc_{refusal.reason}",
                "an OpenID Connect token",
                f"OpenID Connect token refused: {refusal}",
            ) from None
        # In a space of its own (tempoconf.access.identity): never one with a token's name.
        return Principal(
            oidc_identity(identity.name),
            PrincipalKind.OIDC,
            policy.group_grants(identity.groups),
            emails=normal_emails(identity.emails),
        )

    def _single_team(self, authorization: str | None, route: str) -> Principal:
        """No policy: the single admin token or one of the named ones (in constant time each, so
        the answer's timing tells no token's place); none set, anyone."""
        settings = self.settings
        tokens: list[tuple[str | None, str]] = list(settings.admin_tokens)
        if settings.admin_token:
            tokens.append((None, settings.admin_token))
        if not tokens:
            return Principal("api", PrincipalKind.SINGLE_TEAM, None, verified=False)
        credentials = bearer_credentials(authorization)
        if not isinstance(credentials, bytes):
            raise self._unauthenticated(route, credentials, "admin token")
        matches = [hmac.compare_digest(credentials, token.encode()) for _, token in tokens]
        for (name, _), matched in zip(tokens, matches, strict=True):
            if matched:
                return Principal(
                    name or "api", PrincipalKind.SINGLE_TEAM, None, verified=name is not None
                )
        raise self._unknown(route, "admin token")

    def require(
        self, principal: Principal, role: Role, namespaces: Iterable[str], route: str
    ) -> None:
        """403 unless `principal` holds `role` in every one of `namespaces` (a changeset's
        touch several)."""
        for namespace in sorted(set(namespaces)):
            if principal.may(role, namespace):
                continue
            held = sorted(principal.roles_in(namespace))
            raise self.denials.deny(
                403,
                route,
                "role",
                principal.name,
                f"{principal.name!r} needs the {role.value} role in namespace {namespace!r} for "
                f"this (holds there: {', '.join(held) if held else 'no role'})",
            )

    def visible(self, principal: Principal, namespaces: Iterable[str]) -> list[str]:
        """Those of `namespaces` the principal may read (lists across namespaces)."""
        return [ns for ns in namespaces if principal.may(Role.VIEWER, ns)]

    # -- refusals ----------------------------------------------------------------------------
    def _unauthenticated(self, route: str, credentials: object, what: str) -> ApiError:
        if credentials is None:
            return self.denials.deny(
                401,
                route,
                "missing",
                "an anonymous caller",
                f"missing bearer token: this endpoint needs `Authorization: Bearer <{what}>`",
            )
        if credentials is False:
            return self.denials.deny(
                401,
                route,
                "malformed",
                "an anonymous caller",
                f"the Authorization header must use the Bearer scheme with the {what}",
            )
        return self._unknown(route, what)

    def _unknown(self, route: str, what: str) -> ApiError:
        known = " of the access policy" if self.source is not None else ""
        return self.denials.deny(
            401,
            route,
            "unknown_token",
            "an unknown token",
            f"wrong bearer token: this endpoint needs the {what}{known}",
        )


def _looks_like_jwt(credentials: bytes) -> bool:
    """Shaped like a JWT: worth asking the OpenID verifier about."""
    return looks_like_jwt(credentials.decode("latin-1"))
