"""Waits on a BMC that belong in an activity, not in workflow history.

`wait_for_power_state` reads the host's PowerState every `poll_seconds` until it is the target
or the deadline passes, heartbeating each poll: a host slow to come back costs the workflow one
activity (3 events per attempt), not one activity and one timer per poll.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from temporalio import activity

from activities.heartbeat import HeartbeatGate, heartbeating
from activities.redfish.access import BMCSource, current_access
from contracts.models.redfish import SystemPower, WaitPowerInput
from drivers.redfish.client import RedfishClient
from drivers.redfish.power import read_power


class PowerWaitActivities:
    """Waits for a power state; shares the worker's Redfish client (and its per-BMC limit)."""

    def __init__(self, client: RedfishClient, inventory: BMCSource | None = None) -> None:
        self._client = client
        self._inventory = inventory  # each attempt re-reads its BMC, as the power activities do

    @activity.defn(name="wait_for_power_state")
    async def wait_for_power_state(self, request: WaitPowerInput) -> SystemPower:
        """The host's power once it is `request.target`, or as it is at the deadline."""
        bmc = await current_access(self._inventory, request.bmc)
        while True:
            async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
                power = await read_power(connection)
            if power.power_state == request.target or datetime.now(UTC) >= request.deadline:
                return power
            activity.heartbeat(power.power_state)
            await asyncio.sleep(request.poll_seconds)
