"""One campaign per host: the claims of a campaign in the registry `campaign-claims`
(workflows/campaign_claims/workflow.py), mixed into `CampaignActivities` (activities/campaign.py).

`claim_campaign_hosts` claims the campaign's hosts (an update-with-start: the registry is created
on first use). For the hosts another campaign holds, it reads each holder's execution: a holder
that no longer runs (terminated, or it ended without its release) is taken over by a second
claim naming it in `take_from`; the hosts a running campaign holds are answered by holder, and
the campaign skips them naming it. `release_campaign_hosts` frees every host the campaign holds.

Cost per campaign: two or three updates of the registry and one describe per distinct holder;
payload ~15 bytes a host.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from contracts import names, workflow_api
from contracts.models.campaign import (
    ClaimAnswer,
    ClaimInput,
    ClaimRequest,
    ClaimResult,
    ClaimsInput,
    HostGroup,
    ReleaseInput,
    ReleaseRequest,
)


def held_reason(holder: str) -> str:
    return f"claimed by running campaign {holder} (one campaign per host): not touched"


class CampaignClaims:
    """Claims and releases; the Temporal client is set by `CampaignActivities`."""

    temporal: Client

    def _registry_start(self) -> WithStartWorkflowOperation[Any, None]:
        return WithStartWorkflowOperation(
            workflow_api.CampaignClaimsWorkflow.run,
            ClaimsInput(),
            id=names.campaign_claims_workflow_id(activity.info().task_queue),
            task_queue=activity.info().task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(names.OPERATION, names.CAMPAIGN_CLAIMS)]
            ),
            static_summary="campaign claims: which running campaign holds which host",
        )

    async def _claim(self, request: ClaimRequest) -> ClaimAnswer:
        answer: ClaimAnswer = await self.temporal.execute_update_with_start_workflow(
            workflow_api.CampaignClaimsWorkflow.claim,
            request,
            start_workflow_operation=self._registry_start(),
        )
        return answer

    async def _running(self, workflow_id: str) -> bool:
        try:
            described = await self.temporal.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING

    @activity.defn(name="claim_campaign_hosts")
    async def claim_campaign_hosts(self, request: ClaimInput) -> ClaimResult:
        """Claim every host no running campaign holds; the others by holder (see the module)."""
        claim = ClaimRequest(campaign=request.campaign_workflow_id, host_ids=request.host_ids)
        answer = await self._claim(claim)
        gone = [holder for holder in answer.held if not await self._running(holder)]
        if gone:
            retry = [h for holder in gone for h in answer.held[holder]]
            again = await self._claim(
                ClaimRequest(
                    campaign=request.campaign_workflow_id, host_ids=tuple(retry), take_from=tuple(gone)
                )
            )
            held = {k: v for k, v in answer.held.items() if k not in gone}
            for holder, hosts in again.held.items():
                held[holder] = held.get(holder, ()) + hosts
        else:
            held = dict(answer.held)
        return ClaimResult(
            held=tuple(
                HostGroup(reason=held_reason(holder), host_ids=hosts) for holder, hosts in held.items()
            )
        )

    @activity.defn(name="release_campaign_hosts")
    async def release_campaign_hosts(self, request: ReleaseInput) -> None:
        """Free every host the campaign holds (nothing when the registry does not run)."""
        handle = self.temporal.get_workflow_handle(
            names.campaign_claims_workflow_id(activity.info().task_queue)
        )
        try:
            await handle.execute_update(
                workflow_api.CampaignClaimsWorkflow.release,
                ReleaseRequest(campaign=request.campaign_workflow_id),
            )
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            activity.logger.info(
                "no campaign registry: nothing to release for %s", request.campaign_workflow_id
            )
