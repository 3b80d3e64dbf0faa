"""The BMC an attempt talks to: as the inventory says now, not as the workflow read it.

Workflow inputs carry a `BMCAccess` (endpoint, credential reference, TLS, auth, system) read
when the operation started. An operator who fixes a wrong endpoint or credential reference in
the site file must not have to restart the operation: each activity attempt asks the inventory
again by the BMC's id and uses what it finds. The workflow's copy still identifies the
BMC, and is used as it is when the inventory cannot say (unknown BMC, unreadable site file),
with a warning in the worker's log. Cost: one site-file read (or one DPUNode GET) per attempt.
"""

from __future__ import annotations

from typing import Protocol

from temporalio import activity

from contracts.errors import MetalflowError
from contracts.models.inventory import BMCAccess


class BMCSource(Protocol):
    """Where a BMC's current access comes from (`drivers.inventory.Inventory`)."""

    async def bmc_access(self, bmc_id: str) -> BMCAccess | None: ...


async def current_access(inventory: BMCSource | None, given: BMCAccess) -> BMCAccess:
    """The BMC's access as `inventory` says now; `given` when there is no inventory or it cannot say."""
    if inventory is None:
        return given
    try:
        found = await inventory.bmc_access(given.bmc_id)
    except MetalflowError as err:  # an unreadable site file must not stop a running operation
        activity.logger.warning(
            "inventory unreadable (%s); using BMC %s as the workflow gave it", err, given.bmc_id
        )
        return given
    if found is None:
        activity.logger.warning(
            "BMC %s is not in the inventory now; using it as the workflow gave it", given.bmc_id
        )
        return given
    if found != given:
        activity.logger.info("BMC %s changed in the inventory since the workflow read it", given.bmc_id)
    return found
