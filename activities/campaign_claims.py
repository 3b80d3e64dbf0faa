"""One campaign per host and per DPUDeployment: the claims of a campaign in the registry
`campaign-claims` (workflows/campaign_claims/workflow.py), mixed into `CampaignActivities`
(activities/campaign.py), through the registry's one client (`contracts.campaign_claims`, which
`metalflow campaign plan` previews with).

`claim_campaign_hosts` claims the campaign's hosts and deployments (an update-with-start: the
registry is created on first use); a holder that no longer runs is taken over, and its recorded
changes are answered as `inherited`, for the campaign to put back. `record_campaign_changes`
records the changes a campaign is about to make; `release_campaign_hosts` frees everything it
holds.

Cost per campaign: two or three updates of the registry and one describe per distinct holder to
claim, one update to record, one to release; payload ~15 bytes a host.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client

from activities.heartbeat import beats_while_running
from contracts.campaign_claims import ClaimsClient
from contracts.models.campaign import ClaimInput, ClaimResult, RecordInput, ReleaseInput


class CampaignClaims:
    """Claims, records and releases; the Temporal client is set by `CampaignActivities`."""

    temporal: Client

    def registry(self) -> ClaimsClient:
        return ClaimsClient(self.temporal, activity.info().task_queue)

    @activity.defn(name="claim_campaign_hosts")
    @beats_while_running
    async def claim_campaign_hosts(self, request: ClaimInput) -> ClaimResult:
        """Claim every host and deployment no running campaign holds (see the module docstring)."""
        return await self.registry().claim(
            request.campaign_workflow_id, request.host_ids, request.deployments
        )

    @activity.defn(name="record_campaign_changes")
    @beats_while_running
    async def record_campaign_changes(self, request: RecordInput) -> None:
        """Record the changes the campaign is about to make on the deployments it holds."""
        await self.registry().record(request.campaign_workflow_id, request.changes)

    @activity.defn(name="release_campaign_hosts")
    @beats_while_running
    async def release_campaign_hosts(self, request: ReleaseInput) -> None:
        """Free everything the campaign holds, or only `host_ids` (hosts that ended in it);
        nothing when the registry does not run."""
        if not await self.registry().release(request.campaign_workflow_id, request.host_ids):
            activity.logger.info(
                "no campaign registry: nothing to release for %s", request.campaign_workflow_id
            )
