"""CampaignClaimsWorkflow (`campaign-claims`): which running campaign holds which host.

One campaign per host: a campaign claims its selected hosts here before it touches any (the
update `claim`, answered at once, atomically: two campaigns that claim together get disjoint
hosts), and releases them when it ends, however it ends (`release`). A host another campaign
holds is not claimed: the asking campaign skips it, naming the holder (it does not wait: a
campaign runs for days, and the operator sees the conflict at once). A schedule's runs
(`campaign/<name>-<time>`) and manual campaigns claim alike, so they never both touch a host.

A holder that ended without releasing (terminated, or its worker lost its release) is found by
the claiming activity (activities/campaign_claims.py), which reads each holder's execution and
claims again with `take_from` naming the holders that no longer run.

State: holder -> its hosts, at most one holder per host, so bounded by the fleet (~15 bytes a
host: 150 KB for 10,000). Cost per campaign: two updates (~4 history events each, the claim's
event carrying its host ids). Continues-as-new past MAX_EVENTS, or when Temporal suggests it,
once no handler runs.
"""

from __future__ import annotations

from typing import Final

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts import names
    from contracts.models.campaign import (
        CLAIM_UPDATE,
        HELD_QUERY,
        RELEASE_UPDATE,
        ClaimAnswer,
        ClaimRequest,
        ClaimsInput,
        ClaimsStatus,
        ReleaseAnswer,
        ReleaseRequest,
    )
    from contracts.models.control import STATUS_QUERY

MAX_EVENTS: Final = 2000


@workflow.defn(name="CampaignClaimsWorkflow")
class CampaignClaimsWorkflow:
    """The registry of campaign claims; see the module docstring."""

    @workflow.init
    def __init__(self, start: ClaimsInput) -> None:
        self._holder_of: dict[str, str] = {h: c for c, hosts in start.holders.items() for h in hosts}

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
        workflow.continue_as_new(ClaimsInput(holders=self._holders()))

    def _holders(self) -> dict[str, tuple[str, ...]]:
        holders: dict[str, list[str]] = {}
        for host, campaign in self._holder_of.items():
            holders.setdefault(campaign, []).append(host)
        return {c: tuple(hosts) for c, hosts in holders.items()}

    @workflow.update(name=CLAIM_UPDATE)
    def claim(self, request: ClaimRequest) -> ClaimAnswer:
        """Every host free (or held by `request.campaign` already, or by a holder in `take_from`)
        becomes the campaign's; the others are answered by holder."""
        gone = set(request.take_from) - {request.campaign}
        held: dict[str, list[str]] = {}
        for host in request.host_ids:
            holder = self._holder_of.get(host)
            if holder is None or holder == request.campaign or holder in gone:
                self._holder_of[host] = request.campaign
            else:
                held.setdefault(holder, []).append(host)
        if gone:  # a holder that ended holds nothing
            for host in [h for h, c in self._holder_of.items() if c in gone]:
                del self._holder_of[host]
        return ClaimAnswer(held={c: tuple(hosts) for c, hosts in held.items()})

    @claim.validator
    def _validate_claim(self, request: ClaimRequest) -> None:
        if not request.campaign:
            raise ValueError("a claim names its campaign")

    @workflow.update(name=RELEASE_UPDATE)
    def release(self, request: ReleaseRequest) -> ReleaseAnswer:
        """Every host the campaign holds is free again."""
        mine = [h for h, c in self._holder_of.items() if c == request.campaign]
        for host in mine:
            del self._holder_of[host]
        return ReleaseAnswer(released=len(mine))

    @workflow.query(name=HELD_QUERY)
    def held(self, request: ClaimRequest) -> ClaimAnswer:
        """Which of the hosts another campaign holds, changing nothing (`campaign plan`)."""
        held: dict[str, list[str]] = {}
        for host in request.host_ids:
            holder = self._holder_of.get(host)
            if holder is not None and holder != request.campaign:
                held.setdefault(holder, []).append(host)
        return ClaimAnswer(held={c: tuple(hosts) for c, hosts in held.items()})

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> ClaimsStatus:
        counts: dict[str, int] = {}
        for campaign in self._holder_of.values():
            counts[campaign] = counts.get(campaign, 0) + 1
        return ClaimsStatus(holders=counts)
