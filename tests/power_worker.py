"""A worker with only the power activities, for the crash tests: run as a subprocess and SIGKILLed.

Usage: python tests/power_worker.py --task-queue TASK_QUEUE [--lifeline-fd N]
Connects as worker.py does (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE); started by
`worker_support.worker_process(..., script=POWER_WORKER)`, which also waits until it polls.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from takeover_support import sticky_timeout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.worker import Worker  # noqa: E402
from worker_support import special_worker_arguments, until_lifeline_cut  # noqa: E402

from activities.heartbeat import HEARTBEAT_THROTTLE  # noqa: E402
from activities.redfish import power_activities  # noqa: E402
from activities.redfish.power import PowerActivities  # noqa: E402
from drivers.credentials import CredentialResolver  # noqa: E402
from drivers.redfish.client import RedfishClient  # noqa: E402
from metalflow.client import connect  # noqa: E402


async def main() -> None:
    task_queue, lifeline_fd = special_worker_arguments()
    client = await connect()
    redfish = RedfishClient(CredentialResolver(), auth="basic")
    # The worker's own heartbeat throttle (metalflow/runtime/worker.py): steps are confirmed at once.
    worker = Worker(
        client,
        task_queue=task_queue,
        activities=power_activities(PowerActivities(redfish)),
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )
    async with worker:
        await until_lifeline_cut(lifeline_fd)


if __name__ == "__main__":
    asyncio.run(main())
