"""A full metalflow worker that SIGKILLs itself right after its first `lease_host_bmc` got its
answer from the BMC's lease, before reporting it: the slot is the reboot's, the result is lost.

Usage: python tests/lease_step_worker.py ADDRESS NAMESPACE TASK_QUEUE
(site file and kubeconfig from METALFLOW_SITE_FILE and KUBECONFIG). Prints `ready` once polling.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio import activity  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

import workflows  # noqa: E402
from activities import build_activities  # noqa: E402
from contracts.models.bmc_lease import LeaseHostBMCInput, LeaseHostBMCResult  # noqa: E402
from drivers.settings import Settings  # noqa: E402


def activity_name(function: object) -> str:
    # Every metalflow activity is registered under its method's name (`activities/`, `@activity.defn`).
    return str(getattr(function, "__name__", ""))


async def main(address: str, namespace: str, task_queue: str) -> None:
    client = await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)
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
    async with Worker(client, task_queue=task_queue, workflows=workflows.ALL, activities=activities):
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
