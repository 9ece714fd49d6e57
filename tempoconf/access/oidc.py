"""OpenID Connect bearer tokens: a JWT from the organisation's provider, verified against the keys
its discovery document publishes (PyJWT does the JOSE; this module picks the key and the rules)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import httpx
import jwt

from tempoconf.access.oidc_settings import OidcSettings

__all__ = [
    "ALLOWED_ALGORITHMS",
    "OidcIdentity",
    "OidcRefusal",
    "OidcRefusalReason",
    "OidcVerifier",
    "looks_like_jwt",
]

OidcRefusalReason = Literal[
    "malformed",
    "unsigned",
    "algorithm",
    "unknown_key",
    "bad_signature",
    "expired",
    "not_yet_valid",
    "wrong_issuer",
    "wrong_audience",
    "no_identity",
    "provider_unreachable",
]

ALLOWED_ALGORITHMS: frozenset[str] = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""Asymmetric signatures only: an HMAC (HS*) key would be a secret tempoconf shares with the
provider, and a verifier that took HS* could be fooled with the public key as the secret."""

# Which JWK shape each algorithm verifies with: a key published for one family is never used
# with another (an RSA key as an EC one, or any key under an algorithm its `alg` does not name).
_KEY_SHAPES: Mapping[str, tuple[str, frozenset[str]]] = {
    **{alg: ("RSA", frozenset()) for alg in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")},
    "ES256": ("EC", frozenset({"P-256"})),
    "ES384": ("EC", frozenset({"P-384"})),
    "ES512": ("EC", frozenset({"P-521"})),
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}

_MISSING_CLAIM_REASONS: Mapping[str, OidcRefusalReason] = {
    "iss": "wrong_issuer",
    "aud": "wrong_audience",
}

UNREACHABLE_RETRY_INTERVAL = 5.0
"""While no key set was ever fetched, how soon a verification may try the provider again (each
waits for the fetch's timeout otherwise, one after another, while it is down)."""

MAX_TOKEN_LENGTH = 16_384
"""Longer than any provider's access token; a longer bearer is refused before it is decoded."""

_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def looks_like_jwt(token: str) -> bool:
    """Whether `token` has a compact JWS's shape: three base64url segments joined by dots (the
    third may be empty, so an unsigned token is recognised, then refused, as a JWT)."""
    return len(token) <= MAX_TOKEN_LENGTH and _JWT_SHAPE.fullmatch(token) is not None


@dataclass(frozen=True)
class OidcIdentity:
    """Who a verified token names: its identity claim, its groups, and all of its claims."""

    name: str
    groups: tuple[str, ...]
    claims: Mapping[str, Any]
    emails: tuple[str, ...] = ()
    """Its `email` claim, when the token says it is verified (`email_verified` true); else none:
    an unverified email is whatever the user typed, and four eyes rely on it."""


class OidcRefusal(Exception):
    """A bearer token that is not accepted; `reason` is a short label (a metric's), the message
    says what is wrong for the caller (never the token itself)."""

    def __init__(self, reason: OidcRefusalReason, message: str) -> None:
        super().__init__(message)
        self.reason: OidcRefusalReason = reason
        self.message = message


@dataclass(frozen=True)
class _KeySet:
    keys: Mapping[str | None, Mapping[str, Any]]
    """The provider's signature keys (JWKs) by kid (None: a key published without one)."""
    fetched_at: float


class OidcVerifier:
    """Verifies bearer JWTs from the provider that `settings` names.

    The discovery document and the key set are fetched on first use and kept. A token whose kid
    is not in the kept set fetches the key set again (the provider rotated its keys), at most once
    per `min_refetch_interval` seconds, so tokens with made-up kids cannot make tempoconf hammer
    the provider; a set older than `max_key_age` is fetched again too (a withdrawn key stops
    being trusted), keeping the old one while the provider cannot be reached. `leeway` is the
    clock skew allowed on `exp` and `nbf`. `http` is the client to fetch with (closed by its
    owner); without one the verifier makes its own (closed by `aclose`). `clock` (monotonic
    seconds) times the key set's age and the refetches."""

    def __init__(
        self,
        settings: OidcSettings,
        *,
        http: httpx.AsyncClient | None = None,
        min_refetch_interval: float = 30.0,
        max_key_age: float = 3600.0,
        leeway: float = 30.0,
        timeout: float = 5.0,
        algorithms: Collection[str] = ALLOWED_ALGORITHMS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        unsupported = set(algorithms) - ALLOWED_ALGORITHMS
        if unsupported:
            raise ValueError(
                f"algorithms: {sorted(unsupported)} are not allowed "
                f"(only asymmetric ones: {sorted(ALLOWED_ALGORITHMS)})"
            )
        self.settings = settings
        self._issuer = settings.issuer
        self._http = http if http is not None else httpx.AsyncClient()
        self._owns_http = http is None
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 2.0))
        self._min_refetch_interval = min_refetch_interval
        self._max_key_age = max_key_age
        self._leeway = leeway
        self._algorithms = frozenset(algorithms)
        self._clock = clock
        self._jwks_uri: str | None = None
        self._key_set: _KeySet | None = None
        # One fetch at a time; verifications that waited for it take its result (generation).
        self._lock = asyncio.Lock()
        self._generation = 0
        self._last_attempt = float("-inf")
        self._last_failure: str | None = None

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> OidcVerifier:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def verify(self, token: str) -> OidcIdentity:
        """The identity `token` carries, or OidcRefusal saying why it is not accepted."""
        alg, kid = self._header(token)
        key_set = await self._key_set_for(kid)
        jwk = self._key(key_set, kid)
        if jwk is None:
            raise OidcRefusal(
                "unknown_key",
                f"the token is signed with key {_shown(kid)}, which the provider does not publish",
            )
        key = self._verification_key(jwk, alg, kid)
        claims = self._decode(token, key)
        return self._identity(claims)

    def _header(self, token: str) -> tuple[str, str | None]:
        if not looks_like_jwt(token):
            raise OidcRefusal(
                "malformed",
                "the bearer token is not a JWT (three base64url segments joined by dots)",
            )
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise OidcRefusal("malformed", "the token's header is not a JSON object") from None
        alg = header.get("alg")
        if alg is None or alg == "none" or token.endswith("."):
            raise OidcRefusal("unsigned", "the token is not signed (alg none or no signature)")
        if not isinstance(alg, str) or alg not in self._algorithms:
            allowed = ", ".join(sorted(self._algorithms))
            raise OidcRefusal(
                "algorithm", f"the token's algorithm {_shown(alg)} is not one of {allowed}"
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise OidcRefusal("malformed", "the token's kid is not a string")
        return alg, kid

    @staticmethod
    def _key(key_set: _KeySet, kid: str | None) -> Mapping[str, Any] | None:
        if kid is None and len(key_set.keys) == 1:
            # A token without a kid names no key: only a provider with one key makes it clear.
            return next(iter(key_set.keys.values()))
        return key_set.keys.get(kid)

    def _verification_key(self, jwk: Mapping[str, Any], alg: str, kid: str | None) -> jwt.PyJWK:
        kty, curves = _KEY_SHAPES[alg]
        published_alg = jwk.get("alg")
        if (
            jwk.get("kty") != kty
            or (curves and jwk.get("crv") not in curves)
            or (published_alg is not None and published_alg != alg)
        ):
            shape = " ".join(str(jwk[name]) for name in ("kty", "crv", "alg") if name in jwk)
            raise OidcRefusal(
                "algorithm",
                f"the token's algorithm {alg} does not fit key {_shown(kid)} ({_shown(shape)})",
            )
        try:
            return jwt.PyJWK(dict(jwk), algorithm=alg)
        except (jwt.PyJWKError, jwt.InvalidKeyError):
            raise OidcRefusal(
                "unknown_key", f"the provider's key {_shown(kid)} cannot be used with {alg}"
            ) from None

    def _decode(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],
                audience=self.settings.audience,
                issuer=self._issuer,
                leeway=self._leeway,
                # The identity claim (sub or another) is checked below, with its own reason.
                options={"require": ["exp", "iss", "aud"], "verify_sub": False},
            )
        except jwt.InvalidSignatureError:
            raise OidcRefusal("bad_signature", "the token's signature does not verify") from None
        except jwt.ExpiredSignatureError:
            raise OidcRefusal("expired", "the token has expired (exp)") from None
        except jwt.ImmatureSignatureError as error:
            raise OidcRefusal(
                "not_yet_valid", f"the token is not valid yet ({_claim_of(error)})"
            ) from None
        except jwt.InvalidIssuerError:
            raise OidcRefusal(
                "wrong_issuer", f"the token was not issued by {self._issuer} (iss)"
            ) from None
        except jwt.InvalidAudienceError:
            raise OidcRefusal(
                "wrong_audience", f"the token is not meant for {self.settings.audience!r} (aud)"
            ) from None
        except jwt.MissingRequiredClaimError as error:
            reason = _MISSING_CLAIM_REASONS.get(error.claim, "malformed")
            raise OidcRefusal(reason, f"the token has no {error.claim} claim") from None
        except jwt.InvalidAlgorithmError:
            raise OidcRefusal("algorithm", "the token's algorithm is not allowed") from None
        except jwt.InvalidTokenError as error:
            raise OidcRefusal("malformed", f"the token cannot be read: {error}") from None
        return claims

    def _identity(self, claims: dict[str, Any]) -> OidcIdentity:
        name_claim = self.settings.identity_claim
        name = claims.get(name_claim)
        if not isinstance(name, str) or not name.strip():
            raise OidcRefusal(
                "no_identity", f"the token has no {name_claim} claim naming who the caller is"
            )
        groups_claim = self.settings.groups_claim
        groups = claims.get(groups_claim)
        if groups is None:
            groups = ()
        elif isinstance(groups, str):
            groups = (groups,)
        elif isinstance(groups, list) and all(isinstance(group, str) for group in groups):
            groups = tuple(groups)
        else:
            raise OidcRefusal(
                "malformed", f"the token's {groups_claim} claim is not a list of group names"
            )
        email = claims.get("email")
        verified = claims.get("email_verified") is True
        emails = (email.strip(),) if verified and isinstance(email, str) and email.strip() else ()
        return OidcIdentity(
            name=name, groups=groups, claims=MappingProxyType(claims), emails=emails
        )

    async def _key_set_for(self, kid: str | None) -> _KeySet:
        """The kept key set, fetched first when there is none yet (and the last attempt is
        UNREACHABLE_RETRY_INTERVAL old), or when it does not hold `kid` or is older than
        `max_key_age` (and the last fetch is `min_refetch_interval` old)."""
        kept = self._key_set
        if kept is not None and not self._stale(kept) and (kid is None or kid in kept.keys):
            return kept
        seen = self._generation
        async with self._lock:
            if self._generation == seen and self._may_fetch(kept):
                try:
                    await self._refresh()
                except OidcRefusal:
                    # Keys the provider published before still verify its tokens while it is
                    # down; a token that needs a new key cannot be checked: the caller retries.
                    if self._key_set is None or (kid is not None and kid not in self._key_set.keys):
                        raise
            if self._key_set is None:
                raise OidcRefusal(
                    "provider_unreachable",
                    self._last_failure or f"the OpenID provider {self._issuer} cannot be reached",
                )
            return self._key_set

    def _stale(self, key_set: _KeySet) -> bool:
        return self._clock() - key_set.fetched_at >= self._max_key_age

    def _may_fetch(self, kept: _KeySet | None) -> bool:
        interval = self._min_refetch_interval
        if kept is None:
            # Nothing to verify with yet: the provider is tried again sooner.
            interval = min(interval, UNREACHABLE_RETRY_INTERVAL)
        return self._clock() - self._last_attempt >= interval

    async def _refresh(self) -> None:
        self._last_attempt = self._clock()
        try:
            if self._jwks_uri is None:
                self._jwks_uri = await self._discover()
            document = await self._get_json(self._jwks_uri, "its key set (jwks_uri)")
            self._key_set = _KeySet(_signature_keys(document, self._jwks_uri), self._clock())
            self._last_failure = None
        except OidcRefusal as refusal:
            self._last_failure = refusal.message
            raise
        finally:
            self._generation += 1

    async def _discover(self) -> str:
        url = self._issuer.rstrip("/") + "/.well-known/openid-configuration"
        document = await self._get_json(url, "its discovery document")
        if document.get("issuer") != self._issuer:
            raise OidcRefusal(
                "provider_unreachable",
                f"{url} names issuer {_shown(document.get('issuer'))}, not the configured "
                f"{self._issuer!r} (the oidc section's issuer must be the provider's exactly)",
            )
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
            raise OidcRefusal("provider_unreachable", f"{url} has no jwks_uri URL")
        return jwks_uri

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        unreachable = f"the OpenID provider {self._issuer} did not serve {what} at {url}"
        try:
            response = await self._http.get(url, timeout=self._timeout)
        except httpx.HTTPError as error:
            raise OidcRefusal(
                "provider_unreachable", f"{unreachable}: {type(error).__name__} {error}".rstrip()
            ) from None
        if response.status_code != 200:
            raise OidcRefusal("provider_unreachable", f"{unreachable}: HTTP {response.status_code}")
        try:
            document = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise OidcRefusal("provider_unreachable", f"{unreachable}: not JSON") from None
        if not isinstance(document, dict):
            raise OidcRefusal("provider_unreachable", f"{unreachable}: not a JSON object")
        return document


def _signature_keys(document: Mapping[str, Any], url: str) -> dict[str | None, Mapping[str, Any]]:
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise OidcRefusal("provider_unreachable", f"the key set at {url} has no list of keys")
    found: dict[str | None, Mapping[str, Any]] = {}
    for key in keys:
        # Encryption keys and entries of unknown shape are not for verifying signatures.
        if not isinstance(key, dict) or key.get("use", "sig") != "sig":
            continue
        kid = key.get("kid")
        if kid is None or isinstance(kid, str):
            found[kid] = MappingProxyType(key)
    return found


def _claim_of(error: jwt.ImmatureSignatureError) -> str:
    text = str(error)
    return "iat" if "(iat)" in text else "nbf"


def _shown(value: object) -> str:
    """A header value in a message: quoted, cut short (it comes from an unverified token)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
