"""Reads of what a host runs (per DPU BFB, flavor, DPU firmware, DPU BMC firmware; the host BMC's
firmware), from DPF and the BMCs (drivers/versions.py):

- `read_host_versions`: everything `metalflow host versions` shows, each DPU's identity too.
- `read_host_versions_brief`: what the host entity shows in its memo (`workflows/host/workflow.py`,
  `workflows/host/versions.py`): the same without identity, only the sources its `scope` names
  (the entity asks only what can have changed, see `VersionsScope`), with the site's targets
  (site file `versions.targets`; none for the cluster inventory).

Cost per call, per host, for each source its scope names (`VersionsScope`; a source not named
costs nothing): DPF, one DPU list of the host's DPUNode (Kubernetes, label selector); per DPU
BMC read one BMC session (login and logout where the BMC has sessions) and its
FirmwareInventory: the service root, the UpdateService, the collection, one GET per member (2 on
the simulated site, 6 to 8 on a BlueField); the host BMC the same (a BMC that serves no
FirmwareInventory answers one 404). `read_host_versions` reads everything and adds one or two
identity GETs per DPU, in a second session. A source that cannot be read is named in `errors`,
never raised: only an unknown host (InvalidInput) fails the call. Heartbeating.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.heartbeat import heartbeating
from contracts.models.inventory import HostVersions, HostVersionsBrief, ReadVersionsInput, VersionTargets
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

    @activity.defn(name="read_host_versions_brief")
    async def read_host_versions_brief(self, request: ReadVersionsInput) -> HostVersionsBrief:
        """The host's versions without the DPUs' identity, and the site's targets."""
        async with heartbeating():
            host = await self.inventory.resolve(request.host_id)
            versions = await self.reader.host(host, identity=False, scope=request.scope)
            return HostVersionsBrief(versions=versions, targets=await self._targets())

    async def _targets(self) -> VersionTargets:
        if self.inventory.settings.inventory != "site":
            return VersionTargets()
        site = await asyncio.to_thread(self.inventory.site_file.site)
        return VersionTargets(**site.versions.targets.model_dump())
