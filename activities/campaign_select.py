"""The campaign's reads of the inventory and the fleet, mixed into `CampaignActivities`
(activities/campaign.py): adapters over `drivers.campaign.Fleet` (which `metalflow campaign
plan` calls too). `select_campaign_hosts`: which hosts a selection names, and which of them are
left out before anything is asked (assigned in the inventory, unknown to DPF, in maintenance or
held back by an operator as their entities show: `contracts.host_entity.with_maintenance`);
`check_campaign_hosts`: which run the target (DPF's DPUs, or each DPU's BMC for firmware), also
used to read a host back after its operation completed. Costs: drivers/campaign.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import activity
from temporalio.client import Client

from activities.heartbeat import heartbeating
from contracts.host_entity import with_maintenance
from contracts.models.campaign import CheckHostsInput, CheckHostsResult, SelectHostsInput, SelectHostsResult
from drivers.campaign import Fleet
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.redfish.client import RedfishClient

PARALLEL_REQUESTS = 20  # hosts asked at once from one activity (activities/campaign.py)


class CampaignSelection:
    """Selection and the at-target check; the clients are set by `CampaignActivities`."""

    inventory: Inventory
    kube: Kube
    redfish: RedfishClient | None
    # The hosts DPF knows (a DPUNode); a test worker without DPF may give its own.
    dpf_hosts: Callable[[], Awaitable[set[str]]] | None = None

    temporal: Client

    def fleet(self) -> Fleet:
        return Fleet(self.inventory, self.kube, self.redfish, self.dpf_hosts)

    @activity.defn(name="select_campaign_hosts")
    async def select_campaign_hosts(self, request: SelectHostsInput) -> SelectHostsResult:
        """The selected hosts and those left out (`Fleet.select`).

        Raises:
            InvalidInput: An unknown host is listed, the selection matches no host, or DPF knows
                none of the hosts of a campaign that reprovisions.
        """
        async with heartbeating():
            return await with_maintenance(self.temporal, await self.fleet().select(request))

    @activity.defn(name="check_campaign_hosts")
    async def check_campaign_hosts(self, request: CheckHostsInput) -> CheckHostsResult:
        """Hosts at the target, and what the others read (`Fleet.check`), heartbeating."""
        async with heartbeating():
            return await self.fleet().check(request, on_wait=activity.heartbeat)
