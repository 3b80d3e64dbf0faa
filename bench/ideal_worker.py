"""The worker of the floor (`ideal_workflow.py`): metalflow's own activities and worker settings,
serving `IdealReprovisionWorkflow` (and the site watch it joins) on `IDEAL_TASK_QUEUE`.

    python bench/ideal_worker.py [--task-queue metalflow-ideal] [--lifeline-fd N]

Started by `bench_fleet.py` beside the metalflow worker, with the metalflow worker's environment
(the stack's Temporal, site file and kubeconfig). Built exactly as `metalflow.runtime.worker`
builds the product's (the code cache, the sandbox runner, the slots, the heartbeat throttle), so
the two differ only by the workflows they run. Never part of the product.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from ideal_workflow import IDEAL_TASK_QUEUE, IdealReprovisionWorkflow  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

import activities  # noqa: E402
from drivers.settings import Settings  # noqa: E402
from metalflow.client import connect  # noqa: E402
from metalflow.runtime import code_cache  # noqa: E402
from metalflow.runtime import worker as product  # noqa: E402
from metalflow.runtime.lifeline import LIFELINE_ARG, watch_lifeline  # noqa: E402
from workflows.site_watch.workflow import SiteDPFWatchWorkflow  # noqa: E402


async def serve(task_queue: str, lifeline_fd: int | None) -> None:
    settings = Settings.from_env()
    client = await connect()
    code_cache.install()
    runner = code_cache.workflow_runner()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if lifeline_fd is not None:
        watch_lifeline(lifeline_fd, stop.set, hard_exit_after=20)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[IdealReprovisionWorkflow, SiteDPFWatchWorkflow],
        activities=activities.build_activities(temporal_client=client, settings=settings),
        graceful_shutdown_timeout=product.GRACEFUL_SHUTDOWN_TIMEOUT,
        workflow_failure_exception_types=[ValidationError],
        max_concurrent_workflow_tasks=product.WORKFLOW_TASK_SLOTS,
        max_concurrent_activities=product.ACTIVITY_SLOTS,
        max_heartbeat_throttle_interval=product.HEARTBEAT_THROTTLE,
        workflow_runner=runner,
    )
    async with worker:
        await product.start_site_watch(client, settings, task_queue)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task-queue", default=IDEAL_TASK_QUEUE)
    parser.add_argument(LIFELINE_ARG, type=int, default=None)
    args = parser.parse_args()
    product.configure_logging()
    asyncio.run(serve(args.task_queue, args.lifeline_fd))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as worker.py: the SDK's runtime may abort during interpreter teardown


if __name__ == "__main__":
    main()
