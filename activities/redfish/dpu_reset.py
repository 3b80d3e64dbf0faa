"""A DPU's own resets as activities over `drivers/redfish/dpu_reset.py`: `read_dpu_system`,
`reset_dpu` (exactly once per call, across retried attempts: its progress is heartbeated and read
back before the reset is sent) and `wait_for_dpu_os` (polls inside one heartbeating call)."""

from __future__ import annotations

from typing import Any

from temporalio import activity

from activities.heartbeat import HeartbeatGate, heartbeating, wait_until_recorded
from activities.redfish.access import BMCSource, current_access
from contracts.models.inventory import BMCAccess
from contracts.models.redfish import (
    DPUResetInput,
    DPUResetProgress,
    DPUResetResult,
    DPUSystemState,
    ReadDPUInput,
    WaitDPUOSInput,
)
from drivers.redfish.client import RedfishClient
from drivers.redfish.dpu_reset import DPUReset, read_dpu, wait_for_os


def _resumed(details: Any) -> DPUResetProgress | None:
    return DPUResetProgress.model_validate(details[0]) if details else None


class DPUResetActivities:
    """The worker builds one, holding the worker's `RedfishClient` (as `PowerActivities`)."""

    def __init__(self, client: RedfishClient, inventory: BMCSource | None = None) -> None:
        self._client = client
        self._inventory = inventory

    async def _current(self, given: BMCAccess) -> BMCAccess:
        return await current_access(self._inventory, given)

    @activity.defn(name="read_dpu_system")
    async def read_dpu_system(self, request: ReadDPUInput) -> DPUSystemState:
        """The DPU's PowerState, Arm stage and reset marks."""
        bmc = await self._current(request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await read_dpu(connection)

    @activity.defn(name="reset_dpu")
    async def reset_dpu(self, request: DPUResetInput) -> DPUResetResult:
        """Reset the DPU once (ForceRestart, PowerCycle or SOC.ForceReset), resuming a previous attempt."""
        info = activity.info()
        bmc = await self._current(request.bmc)
        beat = HeartbeatGate()
        try:
            activity.client()
            confirm: Any = lambda progress, within: wait_until_recorded(  # noqa: E731
                progress,
                within_seconds=within,
                what=f"{request.reset_type} of {request.bmc.bmc_id}",
                beat=beat,
            )
        except RuntimeError:
            confirm = None  # no server (unit tests): nothing to read back
        async with self._client.connect(bmc) as connection:
            reset = DPUReset(
                connection, request, _resumed(info.heartbeat_details), persist=beat, confirm=confirm
            )
            connection.on_wait = lambda: beat(reset.progress)
            async with heartbeating(lambda: (reset.progress,)):
                return await reset.run()

    @activity.defn(name="wait_for_dpu_os")
    async def wait_for_dpu_os(self, request: WaitDPUOSInput) -> DPUSystemState:
        """The DPU once its Arm OS runs, or as it is at the deadline."""
        bmc = await self._current(request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await wait_for_os(connection, request.deadline, request.poll_seconds)
