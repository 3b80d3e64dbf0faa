"""The campaign's reads of the inventory and the fleet, mixed into `CampaignActivities`
(activities/campaign.py): which hosts a selection names (`select_campaign_hosts`) and which of
them already run the target (`check_campaign_hosts`: DPF's DPUs, or each DPU's BMC for firmware).

Cost: selection reads the site file once (or lists the DPUNodes once), then resolves each host
from the inventory; the at-target check lists one host's DPUs per host (DPF) or reads each DPU's
firmware from its BMC (one Redfish session per DPU, at most PARALLEL_REQUESTS hosts at once).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from contracts.errors import InvalidInput, MetalflowError
from contracts.models.campaign import (
    CampaignHost,
    CheckHostsInput,
    CheckHostsResult,
    HostSelection,
    SelectHostsInput,
    SelectHostsResult,
    TargetKind,
)
from contracts.models.dpf import DPUNODE_NAME_LABEL, HOST_ID_LABEL
from contracts.models.inventory import HostInventory
from contracts.models.redfish import ReadFirmwareInput
from drivers.inventory import Inventory
from drivers.kube import DPU, DPUNODE, Kube
from drivers.redfish.client import RedfishClient
from drivers.redfish.firmware import read_versions

PARALLEL_REQUESTS = 20  # hosts read (here) or asked (activities/campaign.py) at once from one activity
NIC_FIRMWARE = ReadFirmwareInput.model_fields["component"].default  # what the firmware workflow reads


def matches(host: HostInventory, selection: HostSelection) -> bool:
    """Whether the host belongs to the selection (`hosts` is checked by the caller)."""
    if selection.group:
        return selection.group in host.groups
    if selection.selector:
        return all(host.labels.get(k) == v for k, v in selection.selector.items())
    return True


def campaign_host(host: HostInventory) -> CampaignHost:
    return CampaignHost(
        host_id=host.host_id,
        site=host.site or "default",
        group=host.groups[0] if host.groups else "",
        bmc=host.bmc.endpoint,
    )


class CampaignSelection:
    """Selection and the at-target check; the clients are set by `CampaignActivities`."""

    inventory: Inventory
    kube: Kube
    redfish: RedfishClient | None

    # -- selection ----------------------------------------------------------------------------------
    async def _all_hosts(self) -> list[HostInventory]:
        settings = self.inventory.settings
        if settings.inventory == "site":
            site = await asyncio.to_thread(self.inventory.site_file.site)
            ids = [h.id for h in site.hosts]
        else:
            listed = await self.kube.list(
                "campaign", DPUNODE, settings.dpf_namespace, label_selector=HOST_ID_LABEL
            )
            ids = [item["metadata"]["labels"][HOST_ID_LABEL] for item in listed.get("items") or []]
        return [await self.inventory.resolve(host_id) for host_id in ids]

    @activity.defn(name="select_campaign_hosts")
    async def select_campaign_hosts(self, request: SelectHostsInput) -> SelectHostsResult:
        """The selected hosts, in inventory order (a list: in its own order).

        Raises:
            InvalidInput: An unknown host is listed, or the selection matches no host.
        """
        selection = request.selection
        known = await self._all_hosts()
        source = f"the {self.inventory.settings.inventory} inventory"
        if selection.hosts:
            by_id = {h.host_id: h for h in known}
            unknown = [h for h in selection.hosts if h not in by_id]
            if unknown:
                raise InvalidInput(f"unknown hosts {', '.join(unknown)}: not in {source}")
            chosen = [by_id[h] for h in dict.fromkeys(selection.hosts)]
        else:
            chosen = [h for h in known if matches(h, selection)]
        if not chosen:
            hint = ""
            if selection.group:
                groups = sorted({g for h in known for g in h.groups})
                hint = f" (groups there: {', '.join(groups) or 'none'})"
            raise InvalidInput(f"{selection.describe()} matches no host in {source}{hint}")
        return SelectHostsResult(
            hosts=tuple(campaign_host(h) for h in chosen),
            assigned=tuple(h.host_id for h in chosen if h.instance),
        )

    # -- at target ----------------------------------------------------------------------------------
    @activity.defn(name="check_campaign_hosts")
    async def check_campaign_hosts(self, request: CheckHostsInput) -> CheckHostsResult:
        """Hosts already at the target: every DPU runs the target BFB or flavor and is not
        Outdated (DPF), or every DPU's own BMC reports the target firmware running (Redfish).
        A reprovision has no such state: none is at target."""
        target = request.target
        if target.kind == TargetKind.FIRMWARE:
            return await self._firmware_at_target(request)
        field = {TargetKind.BFB: "bfb", TargetKind.FLAVOR: "dpuFlavor"}.get(target.kind)
        if field is None:
            return CheckHostsResult(at_target=())
        ns = self.inventory.settings.dpf_namespace
        done = []
        for host_id in request.host_ids:
            listed = await self.kube.list(
                host_id, DPU, ns, label_selector=f"{DPUNODE_NAME_LABEL}=node-{host_id}"
            )
            dpus = list(listed.get("items") or [])
            if dpus and all(_runs(dpu, field, target.value) for dpu in dpus):
                done.append(host_id)
        return CheckHostsResult(at_target=tuple(done))

    async def _firmware_at_target(self, request: CheckHostsInput) -> CheckHostsResult:
        """Read each DPU's running firmware from its BMC (at most PARALLEL_REQUESTS hosts at once;
        the Redfish client's cap per BMC holds). A host whose BMC cannot say is not at target: its
        firmware operation runs and reports the BMC's words."""
        redfish = self.redfish
        if redfish is None:
            raise ApplicationError(
                "no Redfish client: this worker cannot read DPU firmware", non_retryable=True
            )
        gate = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def runs_target(host_id: str) -> bool:
            async with gate:
                host = await self.inventory.resolve(host_id)
                bmcs = [d.bmc for d in host.dpus if d.bmc is not None]
                if not host.dpus or len(bmcs) != len(host.dpus):
                    return False
                try:
                    for access in bmcs:
                        async with redfish.connect(access, on_wait=activity.heartbeat) as bmc:
                            versions = await read_versions(bmc, NIC_FIRMWARE)
                        if versions.running != request.target.value:
                            return False
                except MetalflowError as err:
                    activity.logger.info("firmware of %s unknown, not at target: %s", host_id, err)
                    return False
                return True

        async with heartbeating():
            found = await asyncio.gather(*(runs_target(h) for h in request.host_ids))
        return CheckHostsResult(
            at_target=tuple(h for h, ok in zip(request.host_ids, found, strict=True) if ok)
        )


def _runs(dpu: dict[str, Any], field: str, value: str) -> bool:
    spec = dpu.get("spec") or {}
    conditions = (dpu.get("status") or {}).get("conditions") or []
    outdated = any(c.get("type") == "Outdated" and c.get("status") == "True" for c in conditions)
    return spec.get(field) == value and not outdated and not dpu["metadata"].get("deletionTimestamp")
