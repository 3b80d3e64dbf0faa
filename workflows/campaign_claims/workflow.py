"""CampaignClaimsWorkflow (`campaign-claims`): which running campaign holds which host and which
DPUDeployment, and the changes it makes there.

One campaign per host: a campaign claims its selected hosts here before it touches any (the
update `claim`, answered at once, atomically: two campaigns that claim together get disjoint
hosts), and releases them when it ends, however it ends (`release`). A host another campaign
holds is not claimed: the asking campaign skips it, naming the holder (it does not wait: a
campaign runs for days, and the operator sees the conflict at once). A schedule's runs
(`campaign/<name>-<time>`) and manual campaigns claim alike, so they never both touch a host.

A holder that ended without releasing (terminated, or its worker lost its release) is found by
the claiming activity (activities/campaign_claims.py), which reads each holder's execution and
claims again with `take_from` naming the holders that no longer run.

A BFB or flavor campaign claims its DPUDeployments the same way (one campaign per deployment), and
records each change before it makes it (`record`: the deployment, the value it found, the value
it points). A campaign terminated mid-way leaves its records behind; the campaign that takes its
hosts or deployments over inherits them (the claim's `inherited`) and puts them back first.

What it knows and decides is its state, `ClaimsState` (state.py): holder -> its hosts, at most
one holder per host, so bounded by the fleet (~15 bytes a host: 150 KB for 10,000), and one record
per deployment, carried whole over continue-as-new. Cost per campaign: two updates (~4 history
events each, the claim's event carrying its host ids), a third for a campaign that points
deployments (`record`). Continues-as-new past MAX_EVENTS, or when Temporal suggests it, once no
handler runs.
"""

from __future__ import annotations

from typing import Final

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts import names
    from contracts.models.campaign import (
        CLAIM_UPDATE,
        HELD_QUERY,
        RECORD_UPDATE,
        RELEASE_UPDATE,
        ClaimAnswer,
        ClaimRequest,
        ClaimsInput,
        ClaimsStatus,
        RecordRequest,
        ReleaseAnswer,
        ReleaseRequest,
    )
    from contracts.models.control import STATUS_QUERY
    from workflows.campaign_claims.state import ClaimsState

MAX_EVENTS: Final = 2000


@workflow.defn(name="CampaignClaimsWorkflow")
class CampaignClaimsWorkflow:
    """The registry of campaign claims; see the module docstring."""

    @workflow.init
    def __init__(self, start: ClaimsInput) -> None:
        self.state = ClaimsState.carried(start)

    @workflow.run
    async def run(self, start: ClaimsInput) -> None:
        workflow.upsert_search_attributes([names.OPERATION.value_set(names.CAMPAIGN_CLAIMS)])
        await workflow.wait_condition(
            lambda: (
                workflow.info().is_continue_as_new_suggested()
                or workflow.info().get_current_history_length() > MAX_EVENTS
            )
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self.state)

    @workflow.update(name=CLAIM_UPDATE)
    def claim(self, request: ClaimRequest) -> ClaimAnswer:
        """Every host free (or held by `request.campaign` already, or by a holder in `take_from`)
        becomes the campaign's; the others are answered by holder."""
        return self.state.claim(request)

    @claim.validator
    def _validate_claim(self, request: ClaimRequest) -> None:
        if not request.campaign:
            raise ValueError("a claim names its campaign")

    @workflow.update(name=RECORD_UPDATE)
    def record(self, request: RecordRequest) -> int:
        """The changes a campaign is about to make on the DPUDeployments it holds (what it found
        there), so a campaign terminated mid-way leaves them to be put back."""
        return self.state.record(request)

    @workflow.update(name=RELEASE_UPDATE)
    def release(self, request: ReleaseRequest) -> ReleaseAnswer:
        """Every host and deployment the campaign holds is free again (or only `host_ids`)."""
        return self.state.release(request.campaign, request.host_ids)

    @workflow.query(name=HELD_QUERY)
    def held(self, request: ClaimRequest) -> ClaimAnswer:
        """Which of the hosts another campaign holds, changing nothing (`campaign plan`)."""
        return self.state.held(request)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> ClaimsStatus:
        return ClaimsStatus(holders=self.state.counts(), deployments=self.state.deployment_holders())
