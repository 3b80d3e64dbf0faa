"""A stand-in for a host workflow that waits on DPF: `DPFWaitRecorder` holds a `DPFWatch` (the
real one of `workflows.parts.dpf_watch`) under an id of the test's choosing, records every signal it
receives and every state it takes, and stops when told. Plus a real worker (every workflow and
activity of the product, and the recorder) against a simulated site, and a view of the site
watch's registry."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sim_support import RunningSim
from site_worker_support import all_workflows, settings_for
from takeover_support import sticky_timeout
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities import build_activities
from contracts import names, workflow_api
from contracts.models.dpf import DPF_NAMESPACE, DPF_STATE_CHANGED_SIGNAL, DPFWaiter, HostDPFState, HostRef
from metalflow.runtime.worker import HEARTBEAT_THROTTLE
from workflows.parts.dpf_watch import DPFWatch


class RecorderInput(BaseModel):
    host_id: str


class Seen(BaseModel):
    at: datetime
    state: HostDPFState


@workflow.defn(name="DPFWaitRecorder")
class DPFWaitRecorder:
    @workflow.init
    def __init__(self, request: RecorderInput) -> None:
        self.received: list[Seen] = []
        self.taken: list[Seen] = []
        self.stopping = False
        self.watch = DPFWatch(on_taken=lambda s: self.taken.append(Seen(at=workflow.now(), state=s)))

    @workflow.run
    async def run(self, request: RecorderInput) -> int:
        self.watch.start(HostRef(host_id=request.host_id))
        await workflow.wait_condition(lambda: self.stopping)
        await self.watch.stop()
        return len(self.taken)

    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        self.received.append(Seen(at=workflow.now(), state=state))
        self.watch.accept(state)

    @workflow.signal
    def stop(self) -> None:
        self.stopping = True

    @workflow.query
    def taken_states(self) -> list[Seen]:
        return self.taken

    @workflow.query
    def received_signals(self) -> list[Seen]:
        return self.received


@dataclass
class Recording:
    handle: WorkflowHandle[Any, int]
    host_id: str

    async def taken(self) -> list[Seen]:
        seen: list[Seen] = await self.handle.query(DPFWaitRecorder.taken_states)
        return seen

    async def received(self) -> list[Seen]:
        seen: list[Seen] = await self.handle.query(DPFWaitRecorder.received_signals)
        return seen

    async def wait_for(self, predicate: Callable[[HostDPFState], bool], timeout: float = 20) -> Seen:
        """The first state taken that satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        while True:
            for seen in await self.taken():
                if predicate(seen.state):
                    return seen
            if time.monotonic() > deadline:
                last = (await self.taken())[-1:] or None
                raise AssertionError(f"no state matched within {timeout} s; last: {last}")
            await asyncio.sleep(0.05)

    async def stop(self) -> int:
        await self.handle.signal(DPFWaitRecorder.stop)
        return await self.handle.result()


async def record(client: Client, task_queue: str, host_id: str, workflow_id: str | None = None) -> Recording:
    """A recorder waiting on `host_id` under an arbitrary id (no operation's id form)."""
    handle = await client.start_workflow(
        DPFWaitRecorder.run,
        RecorderInput(host_id=host_id),
        id=workflow_id or f"any-waiter-{uuid.uuid4()}",
        task_queue=task_queue,
        execution_timeout=timedelta(minutes=5),
    )
    return Recording(handle, host_id)


def activities_for(
    client: Client, sim: RunningSim, replace: dict[str, Callable[..., Any]] | None = None
) -> list[Callable[..., Any]]:
    """Every activity of the product against `sim`; `replace` swaps some by name."""
    found = build_activities(temporal_client=client, settings=settings_for(sim))
    swaps = replace or {}
    out = []
    for fn in found:
        definition = activity._Definition.from_callable(fn)
        name = definition.name if definition is not None else None
        out.append(swaps.get(name or "", fn))
    return out


@asynccontextmanager
async def waiting_worker(
    client: Client,
    task_queue: str,
    sim: RunningSim,
    replace: dict[str, Callable[..., Any]] | None = None,
    graceful_shutdown_timeout: timedelta = timedelta(seconds=5),
) -> AsyncIterator[Worker]:
    """A worker with every workflow and activity (and the recorder), pointed at `sim`."""
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[*all_workflows(), DPFWaitRecorder],
        activities=activities_for(client, sim, replace),
        max_concurrent_activities=50,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        graceful_shutdown_timeout=graceful_shutdown_timeout,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )
    async with worker:
        yield worker


def site_watch(client: Client, task_queue: str) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue))


async def registry(client: Client, task_queue: str) -> list[DPFWaiter]:
    """The site watch's registry (its `waiters` query)."""
    found: list[DPFWaiter] = await site_watch(client, task_queue).query(
        workflow_api.SiteDPFWatchWorkflow.waiters
    )
    return found


def phases(state: HostDPFState) -> list[str]:
    return [d.phase for d in state.dpus]
