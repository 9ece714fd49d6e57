"""A worker process for tests/workflows/test_webhook_failures.py: runs one rollout whose webhook
refuses connections until the delivery has failed past its retries, stops the worker mid-hold (as
a deploy does), and exits as a process does, collecting what the worker held.

`python -m tests.workflows.webhook_worker TEMPORAL_ADDRESS DATABASE_URL WEBHOOK_URL`
"""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tempoconf.cli.worker import build_worker, quiet_activity_logs
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE

TIMEOUT_SECONDS = 60.0


async def main(address: str, database_url: str, webhook: str) -> None:
    quiet_activity_logs()  # as `tempoconf worker` does
    store = Store(database_url, migrate=True)
    client = await Client.connect(address)
    task_queue = f"tempoconf-test-{uuid.uuid4().hex[:8]}"
    request = {
        "path": f"test/webhook_{uuid.uuid4().hex[:8]}",
        "value": {"max_connections": 2000},
        "stages": [{"channel": "canary", "cooldown": "1h"}],
        "webhooks": [webhook],
    }
    async with build_worker(client, store, task_queue=task_queue):
        handle = await client.start_workflow(
            WORKFLOW_TYPE,
            request,
            id=f"rollout-test-{uuid.uuid4().hex[:10]}",
            task_queue=task_queue,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT_SECONDS
        while True:
            events = [event.event_type async for event in handle.fetch_history_events()]
            if EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED in events:
                break  # the `stage_published` delivery failed past its retries; the rollout holds
            if loop.time() > deadline:
                raise SystemExit("the webhook delivery did not fail in time")
            await asyncio.sleep(0.2)
        description = await handle.describe()
        print(f"rollout {handle.id} {description.status.name if description.status else '?'}")
    await handle.terminate("test over")
    store.close()
    print("worker stopped", flush=True)


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(main(*sys.argv[1:4]))
