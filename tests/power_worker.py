"""A worker with only the power activities, for the crash tests: run as a subprocess and SIGKILLed.

Usage: python tests/power_worker.py ADDRESS NAMESPACE TASK_QUEUE
Prints `ready` once polling.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from activities.heartbeat import HEARTBEAT_THROTTLE  # noqa: E402
from activities.redfish import power_activities  # noqa: E402
from activities.redfish.power import PowerActivities  # noqa: E402
from drivers.credentials import CredentialResolver  # noqa: E402
from drivers.redfish.client import RedfishClient  # noqa: E402


async def main(address: str, namespace: str, task_queue: str) -> None:
    client = await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)
    redfish = RedfishClient(CredentialResolver(), auth="basic")
    # The worker's own heartbeat throttle (metalflow/runtime/worker.py): steps are confirmed at once.
    worker = Worker(
        client,
        task_queue=task_queue,
        activities=power_activities(PowerActivities(redfish)),
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
