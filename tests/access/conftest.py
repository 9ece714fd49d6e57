"""Access-control fixtures: a real OpenID provider (tests/fixtures/oidc.py) for each test file."""

from __future__ import annotations

from tests.fixtures.oidc import oidc_provider

__all__ = ["oidc_provider"]  # a fixture: pytest finds it here by its name
