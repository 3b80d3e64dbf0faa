"""`read_host_versions`: what a host runs (per DPU identity, BFB, flavor, DPU firmware, DPU BMC
firmware; the host BMC's firmware), read from DPF and the BMCs (drivers/versions.py), for a
workflow that keeps or shows them (e.g. the host entity's memo: not wired yet).

Cost per call: drivers/versions.py (one DPU list, one BMC session and FirmwareInventory per DPU),
heartbeating.
"""

from __future__ import annotations

from temporalio import activity

from activities.heartbeat import heartbeating
from contracts.models.inventory import HostVersions, ReadVersionsInput
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.redfish.client import RedfishClient
from drivers.versions import VersionReader


class VersionActivities:
    def __init__(self, inventory: Inventory, kube: Kube, redfish: RedfishClient) -> None:
        self.inventory = inventory
        self.reader = VersionReader(kube, redfish, on_wait=None)

    @activity.defn(name="read_host_versions")
    async def read_host_versions(self, request: ReadVersionsInput) -> HostVersions:
        """The host's versions; a source that cannot be read is named in `errors`, not raised."""
        async with heartbeating():
            return await self.reader.host(await self.inventory.resolve(request.host_id))
