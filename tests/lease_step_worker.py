"""A full metalflow worker that SIGKILLs itself right after its first `lease_host_bmc` got its
answer from the BMC's lease, before reporting it: the slot is the reboot's, the result is lost.

Usage: python tests/lease_step_worker.py --task-queue TASK_QUEUE [--lifeline-fd N]
Connects as worker.py does (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE; site file and kubeconfig from
METALFLOW_SITE_FILE and KUBECONFIG); started by `worker_support.worker_process(...,
script=LEASE_STEP_WORKER)`, which also waits until it polls.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from takeover_support import sticky_timeout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio import activity  # noqa: E402
from temporalio.worker import Worker  # noqa: E402
from worker_support import special_worker_arguments, until_lifeline_cut  # noqa: E402

import workflows  # noqa: E402
from activities import build_activities  # noqa: E402
from contracts.models.bmc_lease import LeaseHostBMCInput, LeaseHostBMCResult  # noqa: E402
from drivers.settings import Settings  # noqa: E402
from metalflow.client import connect  # noqa: E402


def activity_name(function: object) -> str:
    # Every metalflow activity is registered under its method's name (`activities/`, `@activity.defn`).
    return str(getattr(function, "__name__", ""))


async def main() -> None:
    task_queue, lifeline_fd = special_worker_arguments()
    client = await connect()
    every = build_activities(temporal_client=client, settings=Settings.from_env())
    real = next(f for f in every if activity_name(f) == "lease_host_bmc")

    @activity.defn(name="lease_host_bmc")
    async def lease_then_die(request: LeaseHostBMCInput) -> LeaseHostBMCResult:
        result: LeaseHostBMCResult = await real(request)
        print(f"answered granted={result.lease.granted}: dying", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return result  # never reached

    others = [f for f in every if activity_name(f) != "lease_host_bmc"]
    activities = [*others, lease_then_die]
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=workflows.ALL,
        activities=activities,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        await until_lifeline_cut(lifeline_fd)


if __name__ == "__main__":
    asyncio.run(main())
