"""The paths an orchestrator and a monitoring system use: liveness, readiness, metrics, and
this document."""

from __future__ import annotations

from typing import Any

from tempoconf.api.answers import HealthAnswer, ReadinessAnswer
from tempoconf.api.openapi.components import (
    SCRAPER,
    answer,
    error,
    forbidden,
    json_answer,
    unauthorized,
)

__all__ = ["operations_paths"]


def operations_paths() -> dict[str, Any]:
    return {
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness: the process serves (200 whatever the store does)",
                "tags": ["operations"],
                "responses": {"200": answer(HealthAnswer, "Alive")},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: snapshots to serve polls from, and their age",
                "tags": ["operations"],
                "parameters": [
                    {
                        "name": "max_age",
                        "in": "query",
                        "required": False,
                        "description": "Seconds: 503 when the snapshots served are older",
                        "schema": {"type": "number", "minimum": 0},
                    }
                ],
                "responses": {
                    "200": answer(ReadinessAnswer, "Ready (also while the store is unreachable)"),
                    "400": error("Invalid max_age"),
                    "503": answer(
                        ReadinessAnswer, "No snapshots loaded yet, or older than max_age"
                    ),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics",
                "description": "Under an access policy, for a scraper token only (the policy's "
                "`scrapers`): the metrics name every namespace's configs and versions.",
                "tags": ["operations"],
                "security": SCRAPER,
                "responses": {
                    "200": {
                        "description": "Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": unauthorized(),
                    "403": forbidden("An operator's or a client's token, not a scraper's"),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "tags": ["operations"],
                "responses": {"200": json_answer({"type": "object"}, "OpenAPI 3.1 document")},
            }
        },
    }
