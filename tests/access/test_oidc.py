"""OpenID Connect bearer tokens against a real provider (npm's oidc-provider on loopback): what
verifies, each way a token is refused, key rotation, the refetch limit, and the provider down."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt.algorithms import RSAAlgorithm

from tempoconf.access.oidc import (
    UNREACHABLE_RETRY_INTERVAL,
    OidcIdentity,
    OidcRefusal,
    OidcVerifier,
    looks_like_jwt,
)
from tempoconf.access.oidc_settings import OidcSettings
from tests.fixtures.oidc import (
    AUDIENCE,
    OidcProvider,
    new_signing_key,
    public_jwk,
    running_oidc_provider,
    sign,
)


class Requests:
    """The verifier's HTTP requests by path (an httpx event hook): how often it fetched keys."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, request: httpx.Request) -> None:
        self.paths.append(request.url.path)

    @property
    def jwks(self) -> int:
        return self.paths.count("/jwks")


class Clock:
    """Monotonic seconds the test moves by hand: the refetch limit without waiting it out."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def requests() -> Requests:
    return Requests()


@pytest.fixture
async def http(requests: Requests) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(event_hooks={"request": [requests]}) as client:
        yield client


def verifier(
    provider: OidcProvider, http: httpx.AsyncClient, *, audience: str = AUDIENCE, **options: Any
) -> OidcVerifier:
    options.setdefault("leeway", 0)
    return OidcVerifier(
        OidcSettings(issuer=provider.issuer, audience=audience), http=http, **options
    )


def claims(provider: OidcProvider, **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    made = {"iss": provider.issuer, "aud": AUDIENCE, "sub": "by-hand", "iat": now, "exp": now + 300}
    made.update(changes)
    return {name: value for name, value in made.items() if value is not None}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def segment(document: Mapping[str, Any]) -> str:
    return b64(json.dumps(document).encode())


async def refusal(verifier: OidcVerifier, token: str) -> OidcRefusal:
    with pytest.raises(OidcRefusal) as raised:
        await verifier.verify(token)
    assert token not in raised.value.message
    return raised.value


async def test_a_providers_token_names_its_client_and_groups(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    checker = verifier(oidc_provider, http)

    identity = await checker.verify(oidc_provider.token("deployer"))
    assert identity == OidcIdentity(
        name="deployer", groups=("platform", "deployers"), claims=identity.claims
    )
    assert identity.claims["client_id"] == "deployer"
    assert identity.claims["iss"] == oidc_provider.issuer
    assert (await checker.verify(oidc_provider.token("loner"))).groups == ()
    assert looks_like_jwt(oidc_provider.token("reader"))


async def test_the_identity_and_groups_come_from_the_configured_claims(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    key = oidc_provider.keys[0]
    settings = OidcSettings(
        oidc_provider.issuer, AUDIENCE, identity_claim="email", groups_claim="roles"
    )
    checker = OidcVerifier(settings, http=http, leeway=0)

    token = sign(claims(oidc_provider, email="ana@example.org", roles="admins"), key)
    assert await checker.verify(token) == OidcIdentity(
        "ana@example.org", ("admins",), (await checker.verify(token)).claims
    )
    nameless = await refusal(checker, sign(claims(oidc_provider, roles=["admins"]), key))
    assert (nameless.reason, str(nameless)) == (
        "no_identity",
        "the token has no email claim naming who the caller is",
    )
    for name in ("", "  ", 7, ["ana"]):
        token = sign(claims(oidc_provider, email=name), key)
        assert (await refusal(checker, token)).reason == "no_identity", name
    for subject in (7, "", None):
        token = sign(claims(oidc_provider, sub=subject), key)
        assert (await refusal(verifier(oidc_provider, http), token)).reason == "no_identity"
    for groups in ([1], {"admins": True}, ["a", None]):
        token = sign(claims(oidc_provider, email="ana@example.org", roles=groups), key)
        assert (await refusal(checker, token)).reason == "malformed", groups


async def test_an_expired_token_is_refused_past_the_leeway(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    token = oidc_provider.token("brief")  # a one-second lifetime
    expiry = jwt.decode(token, options={"verify_signature": False})["exp"]
    await asyncio.sleep(max(0.0, expiry - time.time()) + 0.1)

    assert (await verifier(oidc_provider, http, leeway=10).verify(token)).name == "brief"
    refused = await refusal(verifier(oidc_provider, http), token)
    assert (refused.reason, str(refused)) == ("expired", "the token has expired (exp)")
    no_expiry = sign(claims(oidc_provider, exp=None), oidc_provider.keys[0])
    refused = await refusal(verifier(oidc_provider, http, leeway=10), no_expiry)
    assert (refused.reason, str(refused)) == ("malformed", "the token has no exp claim")


async def test_a_token_not_valid_yet_is_refused_unless_within_the_leeway(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    token = sign(claims(oidc_provider, nbf=int(time.time()) + 5), oidc_provider.keys[0])

    refused = await refusal(verifier(oidc_provider, http), token)
    assert (refused.reason, str(refused)) == ("not_yet_valid", "the token is not valid yet (nbf)")
    assert (await verifier(oidc_provider, http, leeway=30).verify(token)).name == "by-hand"


async def test_a_token_of_another_issuer_is_refused_even_with_the_same_key(
    oidc_provider: OidcProvider, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    # A second provider sharing the first one's key (two tenants of one identity service): the
    # signature verifies, the issuer does not match.
    with running_oidc_provider(tmp_path / "other", keys=oidc_provider.keys) as other:
        token = other.token("deployer")
    refused = await refusal(verifier(oidc_provider, http), token)
    assert (refused.reason, str(refused)) == (
        "wrong_issuer",
        f"the token was not issued by {oidc_provider.issuer} (iss)",
    )
    no_issuer = sign(claims(oidc_provider, iss=None), oidc_provider.keys[0])
    assert (await refusal(verifier(oidc_provider, http), no_issuer)).reason == "wrong_issuer"


async def test_a_token_for_another_audience_is_refused(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    checker = verifier(oidc_provider, http, audience="billing")

    refused = await refusal(checker, oidc_provider.token("deployer"))
    assert (refused.reason, str(refused)) == (
        "wrong_audience",
        "the token is not meant for 'billing' (aud)",
    )
    no_audience = sign(claims(oidc_provider, aud=None), oidc_provider.keys[0])
    assert (await refusal(verifier(oidc_provider, http), no_audience)).reason == "wrong_audience"


async def test_an_unsigned_token_is_refused(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    checker = verifier(oidc_provider, http)
    body = segment(claims(oidc_provider, sub="deployer"))
    kid = oidc_provider.keys[0]["kid"]

    for header, signature in [
        ({"alg": "none", "typ": "JWT"}, ""),
        ({"alg": "none", "kid": kid}, ""),
        ({"alg": "none", "kid": kid}, b64(b"anything")),
        ({"kid": kid}, b64(b"anything")),
        ({"alg": "RS256", "kid": kid}, ""),
    ]:
        token = f"{segment(header)}.{body}.{signature}"
        assert looks_like_jwt(token)
        refused = await refusal(checker, token)
        assert refused.reason == "unsigned", header
        assert str(refused) == "the token is not signed (alg none or no signature)"


async def test_an_hmac_token_keyed_with_the_public_key_is_refused(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    # The classic confusion: HS256 with the provider's public key (which anyone can fetch) as the
    # secret. PyJWT will not even make one, so it is made by hand.
    public = RSAAlgorithm.from_jwk(public_jwk(oidc_provider.keys[0]))
    assert isinstance(public, rsa.RSAPublicKey)
    kid = oidc_provider.keys[0]["kid"]
    body = segment(claims(oidc_provider, sub="deployer"))
    for secret in (
        public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        json.dumps(public_jwk(oidc_provider.keys[0])).encode(),
    ):
        for alg, digest in (("HS256", hashlib.sha256), ("HS512", hashlib.sha512)):
            signing_input = f"{segment({'alg': alg, 'kid': kid, 'typ': 'JWT'})}.{body}"
            mac = hmac.new(secret, signing_input.encode(), digest).digest()
            refused = await refusal(verifier(oidc_provider, http), f"{signing_input}.{b64(mac)}")
            assert refused.reason == "algorithm"
            assert str(refused) == (
                f"the token's algorithm '{alg}' is not one of "
                "ES256, ES384, ES512, EdDSA, PS256, PS384, PS512, RS256, RS384, RS512"
            )


async def test_an_algorithm_the_key_is_not_published_for_is_refused(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    # A valid PS256 signature by the provider's own key, published for RS256 only.
    key = RSAAlgorithm.from_jwk(dict(oidc_provider.keys[0]))
    token = jwt.encode(
        claims(oidc_provider), key, algorithm="PS256", headers={"kid": oidc_provider.keys[0]["kid"]}
    )
    refused = await refusal(verifier(oidc_provider, http), token)
    assert (refused.reason, str(refused)) == (
        "algorithm",
        f"the token's algorithm PS256 does not fit key '{oidc_provider.keys[0]['kid']}' "
        "('RSA RS256')",
    )


async def test_a_key_the_provider_never_published_is_refused_after_one_refetch(
    oidc_provider: OidcProvider, http: httpx.AsyncClient, requests: Requests
) -> None:
    checker = verifier(oidc_provider, http, min_refetch_interval=0)
    await checker.verify(oidc_provider.token("reader"))
    assert requests.jwks == 1

    stranger = new_signing_key()
    refused = await refusal(checker, sign(claims(oidc_provider, sub="deployer"), stranger))
    assert (refused.reason, str(refused)) == (
        "unknown_key",
        f"the token is signed with key '{stranger['kid']}', which the provider does not publish",
    )
    assert requests.jwks == 2  # fetched again: the provider might have rotated to it

    # The provider's kid on a stranger's signature: no refetch, and the signature fails.
    forged = sign(claims(oidc_provider), stranger, kid=oidc_provider.keys[0]["kid"])
    assert (await refusal(checker, forged)).reason == "bad_signature"
    genuine = oidc_provider.token("deployer")
    header, body, signature = genuine.split(".")
    tampered = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    tampered["groups"] = ["admins"]
    refused = await refusal(checker, f"{header}.{segment(tampered)}.{signature}")
    assert (refused.reason, str(refused)) == (
        "bad_signature",
        "the token's signature does not verify",
    )
    assert requests.jwks == 2
    assert requests.paths.count("/.well-known/openid-configuration") == 1


async def test_a_rotated_key_is_fetched_once_the_refetch_interval_allows(
    tmp_path: Path, http: httpx.AsyncClient, requests: Requests
) -> None:
    clock = Clock()
    with running_oidc_provider(tmp_path) as provider:
        checker = verifier(provider, http, min_refetch_interval=30, clock=clock)
        before = provider.token("deployer")
        assert (await checker.verify(before)).name == "deployer"
        assert requests.jwks == 1

        provider.rotate(keep_previous=True)
        after = provider.token("deployer")
        assert jwt.get_unverified_header(after)["kid"] != jwt.get_unverified_header(before)["kid"]
        # The last fetch was just now: the new kid waits for the interval.
        assert (await refusal(checker, after)).reason == "unknown_key"
        assert requests.jwks == 1

        clock.now += 30
        # Verifications at once share the one fetch the new kid makes.
        identities = await asyncio.gather(*(checker.verify(after) for _ in range(10)))
        assert {identity.name for identity in identities} == {"deployer"}
        assert requests.jwks == 2
        assert (await checker.verify(before)).name == "deployer"  # still published

        # Made-up kids cannot make it hammer the provider: none fetches within the interval.
        strangers = [sign(claims(provider), new_signing_key()) for _ in range(3)]
        for _ in range(5):
            results = await asyncio.gather(
                *(checker.verify(token) for token in strangers), return_exceptions=True
            )
            assert {getattr(result, "reason", result) for result in results} == {"unknown_key"}
        assert requests.jwks == 2
        clock.now += 30
        assert (await refusal(checker, strangers[0])).reason == "unknown_key"
        assert requests.jwks == 3
        assert provider.requests("/jwks") == 3  # as the provider saw them


async def test_a_rotation_without_overlap_verifies_new_tokens_at_once(
    tmp_path: Path, http: httpx.AsyncClient, requests: Requests
) -> None:
    with running_oidc_provider(tmp_path) as provider:
        checker = verifier(provider, http, min_refetch_interval=0)
        before = provider.token("reader")
        await checker.verify(before)
        provider.rotate()
        assert (await checker.verify(provider.token("reader"))).groups == ("readers",)
        assert requests.jwks == 2
        # The old key is withdrawn: its tokens no longer verify.
        assert (await refusal(checker, before)).reason == "unknown_key"


async def test_elliptic_curve_and_edwards_keys_verify_too(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    with running_oidc_provider(tmp_path, keys=[new_signing_key("ES256")]) as provider:
        checker = verifier(provider, http, min_refetch_interval=0)
        token = provider.token("deployer")
        assert jwt.get_unverified_header(token)["alg"] == "ES256"
        assert (await checker.verify(token)).name == "deployer"
        provider.rotate(alg="EdDSA")
        token = provider.token("reader")
        assert jwt.get_unverified_header(token)["alg"] == "EdDSA"
        assert (await checker.verify(token)).groups == ("readers",)
        # An EdDSA signature under an ES256 header, with the EdDSA key's kid: the wrong family.
        mislabelled = sign(claims(provider), provider.keys[0])
        header, body, signature = mislabelled.split(".")
        relabelled = {**jwt.get_unverified_header(mislabelled), "alg": "ES256"}
        refused = await refusal(checker, f"{segment(relabelled)}.{body}.{signature}")
        assert refused.reason == "algorithm"


async def test_a_key_set_older_than_its_maximum_age_is_fetched_again(
    oidc_provider: OidcProvider, http: httpx.AsyncClient, requests: Requests
) -> None:
    clock = Clock()
    checker = verifier(oidc_provider, http, max_key_age=600, clock=clock)
    token = oidc_provider.token("deployer")
    await checker.verify(token)
    clock.now += 599
    await checker.verify(token)
    assert requests.jwks == 1
    clock.now += 1
    await checker.verify(token)
    assert requests.jwks == 2


async def test_a_provider_that_cannot_be_reached_refuses_with_its_own_reason(
    tmp_path: Path, http: httpx.AsyncClient, requests: Requests
) -> None:
    with running_oidc_provider(tmp_path) as provider:
        known = provider.token("deployer")
        checker = verifier(provider, http, min_refetch_interval=0)
        await checker.verify(known)
        provider.rotate()
        unknown = provider.token("deployer")
        provider.stop()

        clock = Clock()
        fresh = verifier(provider, http, clock=clock)
        unreached = await refusal(fresh, known)
        assert unreached.reason == "provider_unreachable"
        assert str(unreached).startswith(
            f"the OpenID provider {provider.issuer} did not serve its discovery document at "
            f"{provider.issuer}/.well-known/openid-configuration: ConnectError"
        )
        # Keys fetched before still verify their tokens; a new kid cannot be checked now.
        assert (await checker.verify(known)).name == "deployer"
        refused = await refusal(checker, unknown)
        assert refused.reason == "provider_unreachable"
        assert "did not serve its key set (jwks_uri)" in str(refused)

        provider.start()
        assert (await checker.verify(unknown)).name == "deployer"
        # A verifier that never reached it tries again only after a few seconds (each attempt
        # could wait for a timeout), saying why meanwhile.
        discoveries = requests.paths.count("/.well-known/openid-configuration")
        assert str(await refusal(fresh, unknown)) == str(unreached)
        assert requests.paths.count("/.well-known/openid-configuration") == discoveries
        clock.now += UNREACHABLE_RETRY_INTERVAL
        assert (await fresh.verify(unknown)).name == "deployer"


async def test_an_issuer_its_discovery_document_does_not_name_is_refused(
    oidc_provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    settings = OidcSettings(issuer=oidc_provider.issuer + "/", audience=AUDIENCE)
    refused = await refusal(OidcVerifier(settings, http=http), oidc_provider.token("deployer"))
    assert refused.reason == "provider_unreachable"
    assert f"names issuer '{oidc_provider.issuer}', not the configured" in str(refused)


async def test_the_verifier_makes_and_closes_its_own_client(oidc_provider: OidcProvider) -> None:
    settings = OidcSettings(issuer=oidc_provider.issuer, audience=AUDIENCE)
    async with OidcVerifier(settings) as checker:
        assert (await checker.verify(oidc_provider.token("reader"))).name == "reader"
    with pytest.raises(ValueError, match=r"algorithms: \['HS256'\] are not allowed"):
        OidcVerifier(settings, algorithms=["RS256", "HS256"])


def test_what_looks_like_a_jwt() -> None:
    assert looks_like_jwt("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
    assert looks_like_jwt("a-_1.b.c")
    for token in ("static-secret-token", "a.b", "a..c", ".b.c", "a.b.c.d", "a.b.c ", "a+b.c.d", ""):
        assert not looks_like_jwt(token), token
    assert not looks_like_jwt("a." * 9000 + "b")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


def _token_like() -> st.SearchStrategy[str]:
    json_values = JSON_VALUES
    header = st.fixed_dictionaries(
        {},
        optional={
            "alg": st.sampled_from(["RS256", "PS256", "ES256", "EdDSA", "HS256", "none", "", "x"])
            | json_values,
            "kid": st.text(max_size=10) | json_values,
            "typ": json_values,
            "crit": json_values,
        },
    )
    encoded = st.one_of(
        header.map(segment),
        json_values.map(lambda value: b64(json.dumps(value).encode())),
        st.binary(max_size=40).map(b64),
        st.text(alphabet="ABCxyz019-_=.+/ ", max_size=20),
    )
    return st.one_of(
        st.text(max_size=60),
        st.tuples(encoded, encoded, encoded).map(".".join),
    )


@pytest.fixture(scope="module")
async def fuzzed(oidc_provider: OidcProvider) -> AsyncIterator[tuple[OidcVerifier, str]]:
    """One verifier (keys fetched once; made-up kids refetch at most every 30 s, so the examples
    do not hammer the provider either) and one genuine token for all the fuzz examples."""
    settings = OidcSettings(issuer=oidc_provider.issuer, audience=AUDIENCE)
    async with OidcVerifier(settings, leeway=0) as checker:
        yield checker, oidc_provider.token("deployer")


def _same_bytes(token: str, genuine: str) -> bool:
    """Whether `token` decodes to `genuine`'s bytes (a base64url character differing only in
    the padding bits of a segment's last one changes nothing)."""
    decoded = [base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)) for part in token.split(".")]
    return decoded == [
        base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)) for part in genuine.split(".")
    ]


@settings(max_examples=300, deadline=None, database=None)
@given(garbage=_token_like(), cut=st.integers(0, 2000), flip=st.characters())
async def test_garbage_is_always_refused_never_an_error(
    fuzzed: tuple[OidcVerifier, str], garbage: str, cut: int, flip: str
) -> None:
    checker, genuine = fuzzed
    for token in (garbage, genuine[:cut] + flip + genuine[cut + 1 :], genuine[:cut]):
        if token == genuine:
            continue
        try:
            await checker.verify(token)
        except OidcRefusal as refused:
            assert refused.reason != "provider_unreachable"
        else:
            assert _same_bytes(token, genuine), token


@settings(max_examples=150, deadline=None, database=None)
@given(changes=st.dictionaries(
    st.sampled_from(["iss", "aud", "sub", "exp", "nbf", "iat", "groups", "jti"]),
    JSON_VALUES | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True),
    max_size=4,
))  # fmt: skip
async def test_any_signed_claims_verify_or_are_refused_never_an_error(
    oidc_provider: OidcProvider, fuzzed: tuple[OidcVerifier, str], changes: dict[str, Any]
) -> None:
    # Signed with the provider's own key: PyJWT's claim checks and the identity's see anything.
    checker, _ = fuzzed
    made = claims(oidc_provider, groups=["platform"])
    made.update(changes)
    try:
        token = sign(made, oidc_provider.keys[0])
    except (TypeError, ValueError):
        return  # not JSON (NaN is, for Python's json; PyJWT may refuse it anyway)
    try:
        identity = await checker.verify(token)
    except OidcRefusal as refused:
        assert refused.reason != "provider_unreachable"
    else:
        assert identity.name == made["sub"]
        assert all(isinstance(group, str) for group in identity.groups)
