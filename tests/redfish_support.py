"""Support for the tests that power cycle through the real `power_cycle_host` activity: the
workflow that runs it once, as a host workflow would, and waits on its progress in Temporal.

`CycleOnce` runs in the test's own worker and sends the activity to another task queue, which a
`worker_support.power_worker` process serves: the process a crash test SIGKILLs mid-cycle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from contracts.models.redfish import PowerCycleInput, PowerCycleResult


@workflow.defn(sandboxed=False)
class CycleOnce:
    """Runs `power_cycle_host` once, as a host workflow would."""

    @workflow.run
    async def run(self, request: PowerCycleInput, activity_queue: str) -> PowerCycleResult:
        result: PowerCycleResult = await workflow.execute_activity(
            "power_cycle_host",
            request,
            result_type=PowerCycleResult,
            task_queue=activity_queue,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=1)
            ),
        )
        return result


async def first_activity_started(handle: Any) -> bool:
    """Whether the workflow's (first) pending activity has been started by a worker."""
    description = await handle.describe()
    pending = description.raw_description.pending_activities
    return bool(pending) and pending[0].state == 2  # PENDING_ACTIVITY_STATE_STARTED


async def wait_for(check: Callable[[], Any], timeout: float) -> None:
    """Await `check()` every 20 ms until it is true; fail after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the expected step was not reached in time")
        await asyncio.sleep(0.02)
