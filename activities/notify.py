"""Webhook notifications of a rollout's state changes.

One activity per URL and event, so a retry re-sends only to the URL that failed; the body's `id`
lets a receiver drop a duplicate delivery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from temporalio import activity

from tempoconf.activity_io import NOTIFY_ACTIVITY, NotifyInput

__all__ = ["NotifyActivities", "WEBHOOK_TIMEOUT_SECONDS"]

WEBHOOK_TIMEOUT_SECONDS = 5.0


class NotifyActivities:
    def activities(self) -> list[Callable[..., Any]]:
        return [self.notify_webhook]

    @activity.defn(name=NOTIFY_ACTIVITY)
    async def notify_webhook(self, input: NotifyInput) -> None:
        async with httpx.AsyncClient(timeout=WEBHOOK_TIMEOUT_SECONDS) as http:
            response = await http.post(
                input.url, json=input.body, headers={"User-Agent": "tempoconf"}
            )
        # A non-2xx answer is a failed delivery: raising lets the retry policy try again.
        response.raise_for_status()
