"""Refusals are counted every time, and logged once per caller and reason a minute: a client
retrying a wrong token in a loop must not flood the log, nor hide a second caller's refusal."""

from __future__ import annotations

import logging

import pytest

from tempoconf.api.access import AccessDenials


def test_each_refusal_counts_and_each_caller_is_logged_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    denials = AccessDenials(clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="tempoconf.api.access")
    for _ in range(100):
        error = denials.deny(401, "/v1/configs/{path}", "unknown_token", "an unknown token", "no")
    assert error.status == 401 and error.headers["WWW-Authenticate"].startswith("Bearer")
    denials.deny(403, "/v1/configs/{path}", "namespace", "fleet-a", "fleet-a may not read x")
    now[0] = 59.0
    denials.deny(403, "/v1/configs/{path}", "namespace", "fleet-a", "fleet-a may not read x")
    now[0] = 61.0
    denials.deny(401, "/v1/configs/{path}", "unknown_token", "an unknown token", "no")
    assert denials.counts[("/v1/configs/{path}", "unknown_token")] == 101
    assert denials.counts[("/v1/configs/{path}", "namespace")] == 2
    logged = [record.getMessage() for record in caplog.records]
    assert len(logged) == 3, logged
    assert sum("fleet-a" in line for line in logged) == 1
    assert "403" not in logged[1] and "fleet-a may not read x" in logged[1]
