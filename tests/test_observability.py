"""The worker's health endpoint says not live/not ready when the worker does not run. (A bad
metrics address is a configuration error before anything connects: tests/fast/test_metrics_address.py.)"""

from __future__ import annotations

from datetime import timedelta

import httpx
from ports_support import free_port
from temporalio.client import Client

from drivers.settings import Settings
from metalflow.runtime.observability import Observability
from metalflow.runtime.worker import build_worker


async def test_a_worker_that_is_not_running_is_neither_live_nor_ready(
    client: Client, task_queue: str
) -> None:
    observability = Observability(f"127.0.0.1:{free_port()}")
    worker = build_worker(client, task_queue, Settings())  # built, never run
    await observability.start(client, worker)
    try:
        async with httpx.AsyncClient(base_url=observability.url, timeout=10) as http:
            live, ready = await http.get("/livez"), await http.get("/readyz")
    finally:
        await observability.stop()
    assert (live.status_code, live.text) == (503, "worker stopped\n")
    assert (ready.status_code, ready.text) == (503, "not polling: the worker is not running\n")


async def test_the_worker_hands_its_workflows_over_after_the_configured_takeover_time(
    client: Client, task_queue: str
) -> None:
    """`METALFLOW_WORKER_TAKEOVER_SECONDS` is the sticky schedule-to-start timeout the worker
    gives the server (drivers/settings.py)."""
    worker = build_worker(client, task_queue, Settings(worker_takeover_seconds=4))  # built, never run
    assert worker.config()["sticky_queue_schedule_to_start_timeout"] == timedelta(seconds=4)
