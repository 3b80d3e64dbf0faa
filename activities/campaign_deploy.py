"""What a BFB or flavor campaign changes outside its hosts: the DPUDeployments it points, mixed
into `CampaignActivities` (activities/campaign.py).

`read_campaign_deployments` reads each deployment before anything changes: its strategy, current
value and the hosts it selects (`drivers.campaign.Fleet.read_deployments`, which `metalflow
campaign plan` and `start` call too; the campaign's admission decides on it).
`point_campaign_deployment` points one (its strategy checked again: still OnDelete) or puts its
previous value back, compare-and-set both ways: it points only where the deployment holds the
value the change recorded as found, and restores only where it holds the value the campaign set.

Cost: per point or restore one get and one conditional edit (plus one get of the BFB or flavor).
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity

from activities.heartbeat import beats_while_running
from contracts.errors import InvalidInput
from contracts.models.campaign import DeploymentChange, DeploymentsInput, DeploymentsRead, PointInput
from contracts.models.campaign_target import kind_of_field
from drivers import campaign as fleet
from drivers.inventory import Inventory
from drivers.kube import DEPLOYMENT, SITE_KEY, Kube, Object
from drivers.redfish.client import RedfishClient


class CampaignDeployments:
    """The deployment checks and edits; the clients are set by `CampaignActivities`."""

    inventory: Inventory
    kube: Kube
    redfish: RedfishClient | None

    @activity.defn(name="read_campaign_deployments")
    @beats_while_running
    async def read_campaign_deployments(self, request: DeploymentsInput) -> DeploymentsRead:
        """The deployments a BFB or flavor campaign would point, as read; changes nothing."""
        return await fleet.Fleet(self.inventory, self.kube).read_deployments(request)

    @activity.defn(name="point_campaign_deployment")
    @beats_while_running
    async def point_campaign_deployment(self, request: PointInput) -> DeploymentChange:
        """Point the deployment at the change's value (its strategy checked again: still
        OnDelete), or put the previous value back (`restore`). Idempotent: a value already in
        place is not written."""
        change = request.change
        reads = fleet.Fleet(self.inventory, self.kube)
        ns = reads.namespace
        value = change.previous if request.restore else change.value
        if not request.restore:
            fleet.check_strategy(change.deployment, await reads.deployment(change.deployment))
        kind = fleet.POINTED[kind_of_field(change.field).dpf_object]  # the BFB or DPUFlavor named
        if value and await self.kube.get(SITE_KEY, kind, ns, value, missing_ok=True) is None:
            raise InvalidInput(
                f"no {kind.kind} {value} in namespace {ns}: DPUDeployment {change.deployment} left as it is"
            )

        found: list[str] = []  # what the (last) conditional edit read

        def edit(obj: Object) -> Object | None:
            current = fleet.field_of(obj, change.field)
            found[:] = [current]
            # Compare-and-set both ways (`DeploymentChange.restore_write`, `point_write`): never
            # over a value someone else set since, nor (a restore) a change recorded but never made.
            write = change.restore_write(current) if request.restore else change.point_write(current)
            if write is None or current == write:
                return None
            return {"spec": {"dpus": {change.field: write}}}

        await self.kube.edit(SITE_KEY, DEPLOYMENT, ns, change.deployment, edit)
        now = datetime.now(UTC)
        if request.restore:
            return change.restored(found[0] if found else change.value, now)
        return change.pointed_over(found[0] if found else change.value, now)
