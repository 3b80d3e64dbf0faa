"""The raw engine's yardstick: a workflow of three no-op activities, run by a plain worker.

`bench_fleet.py` divides the fleet's reprovision rate by this workflow's rate on the same
server in the same run, so the figure says what metalflow costs over Temporal itself, not how
fast the machine is. Cost per run: 3 activity tasks, 4 workflow tasks, ~17 history events.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker


@activity.defn
async def no_op(step: int) -> int:
    return step


@workflow.defn
class TrivialWorkflow:
    @workflow.run
    async def run(self) -> int:
        total = 0
        for step in range(3):
            total += await workflow.execute_activity(
                no_op, step, start_to_close_timeout=timedelta(seconds=60)
            )
        return total


async def engine_rate(client: Client, runs: int, concurrency: int = 50) -> dict[str, float]:
    """Start `runs` trivial workflows at once on a fresh task queue; workflows/s to the last end."""
    queue = f"bench-engine-{uuid.uuid4()}"
    gate = asyncio.Semaphore(concurrency)
    async with Worker(client, task_queue=queue, workflows=[TrivialWorkflow], activities=[no_op]):

        async def one(n: int) -> None:
            async with gate:
                handle = await client.start_workflow(
                    TrivialWorkflow.run, id=f"bench-engine/{queue}/{n}", task_queue=queue
                )
            await handle.result()

        began = time.monotonic()
        await asyncio.gather(*(one(n) for n in range(runs)))
        seconds = time.monotonic() - began
    return {
        "engine_runs": runs,
        "engine_seconds": round(seconds, 2),
        "engine_per_s": round(runs / seconds, 2),
    }
