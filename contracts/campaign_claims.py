"""The one client of the campaign claims registry (`campaign-claims`, `CampaignClaimsWorkflow`),
for the campaign's activities (activities/campaign_claims.py) and `metalflow campaign plan` and
`start` (metalflow/cli/campaign_plan.py), so a claim and its preview find the same holders:

- `claim`: claim the hosts and DPUDeployments; a holder that no longer runs (terminated, or it
  ended without its release) is taken over by a second claim naming it in `take_from`: its hosts
  become this campaign's and its recorded changes are answered as `inherited`, to be put back.
- `preview`: what `claim` would answer, changing nothing (the registry's `held` query, and the
  same check of each holder's execution).
- `record`, `release`: a campaign's changes before it makes them; everything it holds, at its end
  (or, while it runs, the hosts that ended in it: another campaign may take them).

Why in `contracts`: an activity and the CLI need the same rule, and the floors forbid either to
import the other (as `contracts/host_entity.py` does for the hosts' entities).

Cost: per claim two or three updates of the registry and one describe per distinct holder; a
preview one query and the same describes.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from contracts import names, workflow_api
from contracts.models.campaign_facts import (
    ClaimAnswer,
    ClaimRequest,
    ClaimResult,
    ClaimsInput,
    DeploymentHeld,
    DeploymentRecord,
    HostGroup,
    RecordRequest,
    ReleaseRequest,
)
from contracts.with_start import execute_update_with_start


def held_reason(holder: str) -> str:
    return f"claimed by running campaign {holder} (one campaign per host): not touched"


class ClaimsClient:
    """The registry of one task queue's campaigns.

    Args:
        client: A Temporal client.
        task_queue: The workers' queue (the registry is `campaign-claims` on it).
    """

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue
        self.workflow_id = names.campaign_claims_workflow_id(task_queue)

    def _start(self) -> WithStartWorkflowOperation[Any, None]:
        return WithStartWorkflowOperation(
            workflow_api.CampaignClaimsWorkflow.run,
            ClaimsInput(),
            id=self.workflow_id,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(names.OPERATION, names.CAMPAIGN_CLAIMS)]
            ),
            static_summary="campaign claims: which running campaign holds which host",
        )

    async def _claim(self, request: ClaimRequest) -> ClaimAnswer:
        answer: ClaimAnswer = await execute_update_with_start(
            self.client, workflow_api.CampaignClaimsWorkflow.claim, request, start=self._start()
        )
        return answer

    async def running(self, workflow_id: str) -> bool:
        """Whether a holder's campaign still runs (its latest run; a continued one is itself)."""
        try:
            described = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING

    async def _gone(self, answer: ClaimAnswer) -> set[str]:
        holders = set(answer.held) | set(answer.held_deployments)
        return {holder for holder in sorted(holders) if not await self.running(holder)}

    async def claim(
        self, campaign: str, host_ids: tuple[str, ...], deployments: tuple[str, ...] = ()
    ) -> ClaimResult:
        """Claim every host and deployment no running campaign holds (see the module docstring)."""
        request = ClaimRequest(campaign=campaign, host_ids=host_ids, deployments=deployments)
        answer = await self._claim(request)
        gone = await self._gone(answer)
        if gone:
            again = await self._claim(
                ClaimRequest(
                    campaign=campaign,
                    host_ids=tuple(h for holder in gone for h in answer.held.get(holder, ())),
                    deployments=tuple(d for holder in gone for d in answer.held_deployments.get(holder, ())),
                    take_from=tuple(sorted(gone)),
                )
            )
            answer = merged(answer, again, gone)
        return as_result(answer, set())

    async def preview(
        self, campaign: str, host_ids: tuple[str, ...], deployments: tuple[str, ...] = ()
    ) -> ClaimResult:
        """What `claim` would answer now, changing nothing (no registry yet: nothing held)."""
        handle = self.client.get_workflow_handle(self.workflow_id)
        request = ClaimRequest(campaign=campaign, host_ids=host_ids, deployments=deployments)
        try:
            answer = await handle.query(workflow_api.CampaignClaimsWorkflow.held, request)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return ClaimResult()
            raise
        gone = await self._gone(answer)
        if any(r.holder == campaign for r in answer.records) and not await self.running(campaign):
            gone.add(campaign)  # an earlier run of this name left changes: this one takes them over
        inherited = tuple(r for r in answer.records if r.holder in gone)
        return as_result(answer.model_copy(update={"inherited": inherited}), gone)

    async def record(self, campaign: str, changes: tuple[DeploymentRecord, ...]) -> None:
        """Record the changes `campaign` is about to make (it holds their deployments)."""
        handle = self.client.get_workflow_handle(self.workflow_id)
        await handle.execute_update(
            workflow_api.CampaignClaimsWorkflow.record, RecordRequest(campaign=campaign, changes=changes)
        )

    async def release(self, campaign: str, host_ids: tuple[str, ...] | None = None) -> bool:
        """Free everything `campaign` holds (or only `host_ids`, hosts that ended in it); False
        when no registry runs (nothing to free)."""
        handle = self.client.get_workflow_handle(self.workflow_id)
        try:
            await handle.execute_update(
                workflow_api.CampaignClaimsWorkflow.release,
                ReleaseRequest(campaign=campaign, host_ids=host_ids),
            )
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return True


def merged(first: ClaimAnswer, again: ClaimAnswer, gone: set[str]) -> ClaimAnswer:
    """The first answer without the holders that ended, with what the take-over answered."""
    held = {k: v for k, v in first.held.items() if k not in gone}
    for holder, hosts in again.held.items():
        held[holder] = held.get(holder, ()) + hosts
    deployments = {k: v for k, v in first.held_deployments.items() if k not in gone}
    for holder, names_held in again.held_deployments.items():
        deployments[holder] = deployments.get(holder, ()) + names_held
    inherited = {r.deployment: r for r in (*first.inherited, *again.inherited)}  # one record per deployment
    return ClaimAnswer(held=held, held_deployments=deployments, inherited=tuple(inherited.values()))


def as_result(answer: ClaimAnswer, gone: set[str]) -> ClaimResult:
    """The answer as the campaign reads it: what running holders hold, and what it inherits."""
    return ClaimResult(
        held=tuple(
            HostGroup(reason=held_reason(holder), host_ids=hosts)
            for holder, hosts in answer.held.items()
            if holder not in gone
        ),
        held_deployments=tuple(
            DeploymentHeld(deployment=name, holder=holder)
            for holder, held_names in answer.held_deployments.items()
            if holder not in gone
            for name in held_names
        ),
        inherited=answer.inherited,
    )
