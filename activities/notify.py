"""Webhook notifications of a rollout's state changes.

One activity per URL and event, so a retry re-sends only to the URL that failed; the body's `id`
lets a receiver drop a duplicate delivery. A failed attempt is an expected event (the receiver is
down), not a bug: it fails as `WebhookDeliveryFailed` with one readable line, which is all the
worker logs of it (`WebhookFailureLogFilter`), at WARNING, without a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempoconf.activities.failures import short_message
from tempoconf.rollout.activity_io import NOTIFY_ACTIVITY, NotifyInput

__all__ = [
    "WEBHOOK_FAILED_ERROR",
    "WEBHOOK_TIMEOUT_SECONDS",
    "NotifyActivities",
    "WebhookFailureLogFilter",
    "webhook_origin",
]

WEBHOOK_TIMEOUT_SECONDS = 5.0
WEBHOOK_FAILED_ERROR = "WebhookDeliveryFailed"


def webhook_origin(url: str) -> str:
    """scheme://host:port of `url`: a webhook's path or query often is its secret (a Slack or
    Teams hook), so logs and failures name only where it goes."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}"


class NotifyActivities:
    def activities(self) -> list[Callable[..., Any]]:
        return [self.notify_webhook]

    @activity.defn(name=NOTIFY_ACTIVITY)
    async def notify_webhook(self, input: NotifyInput) -> None:
        try:
            async with httpx.AsyncClient(timeout=WEBHOOK_TIMEOUT_SECONDS) as http:
                response = await http.post(
                    input.url, json=input.body, headers={"User-Agent": "tempoconf"}
                )
            # A non-2xx answer is a failed delivery: raising lets the retry policy try again.
            response.raise_for_status()
        except httpx.HTTPError as error:
            detail = (
                f"answered {error.response.status_code}"
                if isinstance(error, httpx.HTTPStatusError)
                else f"{type(error).__name__}: {short_message(error, limit=200)}"
            )
            raise ApplicationError(
                f"webhook {webhook_origin(input.url)} {detail}", type=WEBHOOK_FAILED_ERROR
            ) from None


class WebhookFailureLogFilter(logging.Filter):
    """On the SDK's activity logger: its "Completing activity as failed" and traceback for a
    failed delivery becomes one line (which attempt of which rollout, and why)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ApplicationError) and error.type == WEBHOOK_FAILED_ERROR:
            details = getattr(record, "temporal_activity", None)
            details = details if isinstance(details, dict) else {}
            record.msg = "rollout %s: %s (attempt %s)"
            record.args = (
                details.get("workflow_id", "?"),
                error.message,
                details.get("attempt", "?"),
            )
            record.exc_info = None
            record.exc_text = None
        return True
