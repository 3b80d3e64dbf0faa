"""The inventory (`drivers.inventory`) as an activity, for workflows: `resolve_host_inventory`."""

from __future__ import annotations

from temporalio import activity

from activities.heartbeat import beats_while_running
from contracts.models.inventory import HostInventory, HostLookup
from drivers.inventory import Inventory


class InventoryActivities:
    """The inventory as an activity, for workflows."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory

    @activity.defn(name="resolve_host_inventory")
    @beats_while_running
    async def resolve_host_inventory(self, lookup: HostLookup) -> HostInventory:
        """The host's BMC, credential reference, DPUs, groups and instance (InvalidInput if unknown)."""
        return await self.inventory.resolve(lookup.host_id, lookup.source)
