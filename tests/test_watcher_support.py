"""A stand-in for the host workflows of issue 5: it starts the DPF watcher, records every signal
with the time the workflow received it, and cancels the watcher when told to stop. Plus a real
worker running it on the session's Temporal dev server."""

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
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.worker import Worker

from activities.watcher import WatcherActivities
from contracts.models.dpf import (
    DPF_STATE_CHANGED_SIGNAL,
    HostDPFState,
    HostRef,
    WatchCheckpoint,
    WatchHostInput,
)
from drivers.kube import Kube
from drivers.settings import Settings


class RecorderInput(BaseModel):
    host_id: str
    max_attempts: int = 0  # 0: retry for ever, as a host workflow does
    resume_from: WatchCheckpoint | None = None


class Seen(BaseModel):
    at: datetime
    state: HostDPFState


@workflow.defn(sandboxed=False)
class WatchRecorder:
    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.stopping = False

    @workflow.run
    async def run(self, request: RecorderInput) -> int:
        watcher = workflow.start_activity(
            "watch_host_dpf",
            WatchHostInput(
                host=HostRef(host_id=request.host_id), heartbeat_seconds=0.5, resume_from=request.resume_from
            ),
            start_to_close_timeout=timedelta(hours=1),
            heartbeat_timeout=timedelta(seconds=3),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200), maximum_attempts=request.max_attempts
            ),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        await workflow.wait_condition(lambda: self.stopping or watcher.done())
        if watcher.done():
            await watcher  # the watcher failed for good: fail with its error
        watcher.cancel()
        try:
            await watcher
        except ActivityError as err:
            if not isinstance(err.cause, CancelledError):
                raise
        return len(self.seen)

    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        self.seen.append(Seen(at=workflow.now(), state=state))

    @workflow.signal
    def stop(self) -> None:
        self.stopping = True

    @workflow.query
    def signals(self) -> list[Seen]:
        return self.seen


@dataclass
class Recording:
    handle: WorkflowHandle[Any, int]

    async def signals(self) -> list[Seen]:
        seen: list[Seen] = await self.handle.query(WatchRecorder.signals)
        return seen

    async def wait_for(self, predicate: Callable[[HostDPFState], bool], timeout: float = 20) -> Seen:
        """The first recorded signal whose state satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        while True:
            for seen in await self.signals():
                if predicate(seen.state):
                    return seen
            if time.monotonic() > deadline:
                last = (await self.signals())[-1:] or None
                raise AssertionError(f"no signal matched within {timeout} s; last: {last}")
            await asyncio.sleep(0.05)

    async def stop(self) -> int:
        await self.handle.signal(WatchRecorder.stop)
        return await self.handle.result()


@asynccontextmanager
async def recording(
    client: Client, task_queue: str, settings: Settings, request: RecorderInput
) -> AsyncIterator[Recording]:
    """A real worker with the watcher activity, and one WatchRecorder workflow running on it."""
    kube = Kube(settings)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[WatchRecorder],
        activities=[WatcherActivities(kube, client).watch_host_dpf],
        graceful_shutdown_timeout=timedelta(seconds=5),
    )
    async with worker:
        handle = await client.start_workflow(
            WatchRecorder.run, request, id=f"watch-test-{uuid.uuid4()}", task_queue=task_queue,
            execution_timeout=timedelta(minutes=5),
        )  # fmt: skip
        try:
            yield Recording(handle)
        finally:
            try:
                await handle.terminate("test over")
            except Exception:  # already finished
                pass
    kube.close()


def phases(state: HostDPFState) -> list[str]:
    return [d.phase for d in state.dpus]
