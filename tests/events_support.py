"""The Kubernetes Events metalflow writes (metalflow/runtime/events.py), as the tests see them: the
worker with its Event emitter, and the Events the simulated API serves (events.k8s.io/v1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from sim_support import RunningSim, sim_http
from takeover_support import takeover_seconds
from temporalio.client import Client

from contracts.models.inventory import DPF_NAMESPACE
from drivers.settings import Settings
from metalflow.runtime.events import Emitter
from metalflow.runtime.worker import build_worker

NS = DPF_NAMESPACE


def api(sim: RunningSim, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """A request to the simulated API as its admin (the kubeconfig's token)."""
    return sim_http().request(method, f"{sim.url}{path}", headers=sim.headers, timeout=10, **kwargs)


def events_v1(sim: RunningSim, selector: str = "") -> list[dict[str, Any]]:
    """The Events of the DPF namespace matching the field `selector`."""
    response = api(
        sim, "GET", f"/apis/events.k8s.io/v1/namespaces/{NS}/events", params={"fieldSelector": selector}
    )
    response.raise_for_status()
    items: list[dict[str, Any]] = response.json()["items"]
    return items


@asynccontextmanager
async def emitting_worker(client: Client, task_queue: str, sim: RunningSim) -> AsyncIterator[Emitter]:
    """The worker as `run_worker` runs it: the workflows and activities, and the Event emitter."""
    settings = Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    emitter = Emitter(settings)
    async with build_worker(client, task_queue, settings):
        await emitter.start()
        try:
            yield emitter
        finally:
            await emitter.stop()
