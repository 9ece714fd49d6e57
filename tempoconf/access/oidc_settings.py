"""The `oidc` section of the access policy: which provider's tokens the API takes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OidcSettings"]


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    """The provider's issuer URL, exactly as its tokens' `iss` and its discovery document say."""
    audience: str
    """The `aud` a token must carry to be meant for tempoconf."""
    identity_claim: str = "sub"
    """The claim that names who the caller is (audit rows, approvals)."""
    groups_claim: str = "groups"
    """The claim listing the caller's groups (the policy's `groups` give them roles)."""
    key_refresh_seconds: float = 30.0
    """A token signed by a key not yet known makes the API fetch the provider's keys again, at
    most this often (a flood of made-up key ids must not become a flood of fetches)."""
