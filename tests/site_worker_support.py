"""Support for the end-to-end tests against a running simulated site (firmware, monitor, removal,
site watch, campaigns, the CLI): a real worker (every workflow and activity) in this process, and
the user's views of the site (DPF objects read with the product's own Kubernetes client, DPU
firmware read from the BMCs)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from sim_support import RunningSim
from takeover_support import sticky_timeout
from temporalio.client import Client
from temporalio.worker import Worker

import workflows
from activities import build_activities
from activities.redfish import build_redfish_client
from contracts.models.dpf import SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS
from contracts.models.host import OperationPolicy
from contracts.models.inventory import DPF_NAMESPACE
from drivers.kube import DPU, DPUDEVICE, DPUNODE, Kind, Kube
from drivers.redfish.firmware import read_versions
from drivers.settings import Settings
from metalflow.runtime.worker import HEARTBEAT_THROTTLE

T = TypeVar("T")
HISTORIES = Path(__file__).parent / "histories"
FAST_POLICY = OperationPolicy(power_down_wait_seconds=0.0, phase_timeout_seconds=60.0)
__all__ = ["DPU", "DPUDEVICE", "DPUNODE"]


def settings_for(sim: RunningSim) -> Settings:
    # The site watch's heartbeat timeout as the test environment's (tests/conftest.py).
    takeover = float(
        os.environ.get("METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS", SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS)
    )
    return Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, site_watch_heartbeat_timeout_seconds=takeover
    )


def all_workflows() -> list[type]:
    """`workflows.ALL`, plus the reboot child the firmware workflow needs if ALL lacks it yet."""
    found = list(workflows.ALL)
    names = {getattr(w, "__temporal_workflow_definition").name for w in found}
    if "HostRebootWorkflow" not in names:
        from workflows.host_reboot.workflow import HostRebootWorkflow

        found.append(HostRebootWorkflow)
    return found


@asynccontextmanager
async def site_worker(client: Client, task_queue: str, sim: RunningSim) -> AsyncIterator[Worker]:
    """A worker with every workflow and activity, pointed at the simulated site."""
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=all_workflows(),
        activities=build_activities(temporal_client=client, settings=settings_for(sim)),
        max_concurrent_activities=50,
        # As the product's worker: a heartbeat (and the cancel its answer brings) is not held
        # back for 0.8 x the heartbeat timeout.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )
    async with worker:
        yield worker


async def eventually(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], timeout: float = 30
) -> T:
    """Ask `probe` until `accept` holds for its answer; fail with the last answer past `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s; last: {value!r}")
        await asyncio.sleep(0.1)


class SiteView:
    """What an operator sees of the site: DPF objects (through the API) and DPU firmware (Redfish)."""

    def __init__(self, sim: RunningSim) -> None:
        self.sim = sim
        self.settings = settings_for(sim)
        self.kube = Kube(self.settings)

    async def get(self, kind: Kind, name: str) -> dict[str, Any] | None:
        return await self.kube.get("test", kind, DPF_NAMESPACE, name, missing_ok=True)

    async def node_labels(self, host_id: str) -> dict[str, str]:
        node = await self.get(DPUNODE, f"node-{host_id}")
        assert node is not None, f"no DPUNode node-{host_id}"
        return dict(node["metadata"].get("labels") or {})

    async def get_node_reason(self, host_id: str) -> str | None:
        """The reason metalflow wrote with the host's pool label."""
        node = await self.get(DPUNODE, f"node-{host_id}")
        assert node is not None, f"no DPUNode node-{host_id}"
        return (node["metadata"].get("annotations") or {}).get("metalflow.io/pool-reason")

    async def dpu_phase(self, host_id: str, dpu_id: str) -> str | None:
        obj = await self.get(DPU, f"node-{host_id}-device-{dpu_id}")
        return None if obj is None else str((obj.get("status") or {}).get("phase", ""))

    async def running_firmware(self, host_id: str) -> dict[str, str | None]:
        """Each DPU's running NIC firmware, from its own BMC."""
        from drivers.inventory import host_from_site_file

        inventory = host_from_site_file(self.sim.site_file, host_id, DPF_NAMESPACE)
        client = build_redfish_client(self.settings)
        found: dict[str, str | None] = {}
        for dpu in inventory.dpus:
            assert dpu.bmc is not None
            async with client.connect(dpu.bmc) as connection:
                found[dpu.id] = (await read_versions(connection, "DPU_NIC")).running
        return found

    def power_cycles(self, host_id: str) -> int:
        """Completed power cycles in the host BMC's power log (each Off followed by On)."""
        return sum(
            1 for entry in self.sim.power_log(host_id) if entry["to"] == "On" and entry["from"] == "Off"
        )

    def close(self) -> None:
        self.kube.close()
