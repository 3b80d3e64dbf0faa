"""DPU firmware activities over the Redfish driver (`drivers/redfish/firmware.py`):
`read_dpu_firmware_versions`, `stage_dpu_firmware`."""

from __future__ import annotations

from temporalio import activity

from activities.heartbeat import HeartbeatGate, heartbeating
from activities.redfish.access import BMCSource, current_access
from contracts.models.redfish import (
    FirmwareVersions,
    ReadFirmwareInput,
    StageFirmwareInput,
    StageFirmwareResult,
)
from drivers.redfish.client import RedfishClient
from drivers.redfish.firmware import read_versions, stage


class FirmwareActivities:
    """DPU firmware activities; holds the worker's `RedfishClient`."""

    def __init__(self, client: RedfishClient, inventory: BMCSource | None = None) -> None:
        self._inventory = inventory  # each attempt re-reads the DPU's BMC from it
        self._client = client

    @activity.defn(name="read_dpu_firmware_versions")
    async def read_dpu_firmware_versions(self, request: ReadFirmwareInput) -> FirmwareVersions:
        """Read the running and staged firmware versions from a DPU's BMC."""
        bmc = await current_access(self._inventory, request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await read_versions(connection, request.component)

    @activity.defn(name="stage_dpu_firmware")
    async def stage_dpu_firmware(self, request: StageFirmwareInput) -> StageFirmwareResult:
        """Stage a firmware image on a DPU's BMC (skipped when already staged or running)."""
        bmc = await current_access(self._inventory, request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await stage(connection, request)
