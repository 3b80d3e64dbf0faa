"""A newer `metalflow site check` holds a running campaign to the admission's rule (issue 36):
the campaign's `site_blocked` update skips each blocked host it has not started, with the check's
reason, and names those already running (a check cannot stop them), which stay in flight.
The wiring (the site check telling running campaigns) is metalflow/cli/site_campaigns.py."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.workflow import _Definition

from contracts.models.campaign import (
    SITE_BLOCKED_UPDATE,
    CampaignHost,
    CampaignInput,
    CampaignTarget,
    HostGroup,
    HostRequestOutcome,
    HostSelection,
    HostState,
    Limits,
    Roster,
    SiteBlockedRequest,
    SiteBlocks,
    TargetKind,
)
from workflows.campaign.admission import Admission
from workflows.campaign.state import CampaignState
from workflows.campaign.workflow import CampaignWorkflow

NOW = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
WHY = "reprovision is blocked on it by the site check of 2026-11-28T02:00:00Z: wrong credentials"
S = HostState


def _state(n: int) -> CampaignState:
    state = CampaignState.first(asker="campaign/c@run", limits=Limits(batch_size=1, max_per_bmc=0), now=NOW)
    state.admitted(Admission(roster=Roster.of([CampaignHost(host_id=f"h{i}") for i in range(n)])), 0)
    return state


def _start(state: CampaignState, host_id: str, outcome: str = "started") -> None:
    host = state.roster.host(state.roster.ids.index(host_id))
    answer = HostRequestOutcome(
        host_id=host_id,
        outcome=outcome,  # type: ignore[arg-type]
        workflow_id=f"reprovision/{host_id}",
        message=outcome,
    )
    start = CampaignInput(
        name="c", target=CampaignTarget(kind=TargetKind.REPROVISION), selection=HostSelection(all=True),
        requested_by="ops@dc",
    )  # fmt: skip
    state.answered([answer], [host], now=NOW, start=start)


def test_a_newer_check_skips_the_blocked_hosts_not_started_and_names_those_running() -> None:
    state = _state(5)
    _start(state, "h0")  # in flight
    _start(state, "h1", "refused")  # failed: `retry_failed` would start it again
    answer = state.site_blocked([HostGroup(reason=WHY, host_ids=("h0", "h1", "h3", "nobody"))])
    assert answer == (
        f"h0 already running (reprovision/h0); a check cannot stop it; h1 skipped: {WHY}; h3 skipped: {WHY}"
    )
    assert (state.state("h0"), state.state("h1"), state.state("h3")) == (S.IN_FLIGHT, S.SKIPPED, S.SKIPPED)
    assert "h0" in state.in_flight, "a host in flight is not skipped: it runs on"
    had = " (it had failed: refused: refused; the failure budget still counts it)"  # one truth
    assert [f.reason for f in state.recent_skipped][-2:] == [WHY + had, WHY]
    assert state.recent_failed == [], "h1 is named skipped, no longer failed"
    assert [h.host_id for h in state.pending()] == ["h2", "h4"], "a blocked host never starts"
    assert state.retry_failed() == "retrying 0 failed hosts", "the blocked failed host is not retried"


def test_a_check_that_blocks_none_of_its_waiting_hosts_changes_nothing() -> None:
    state = _state(2)
    before = state.model_dump()
    assert state.site_blocked([]) == "no host of this campaign waits that the check blocks"
    assert state.site_blocked([HostGroup(reason=WHY, host_ids=("other",))]).startswith("no host")
    assert state.model_dump() == before


def test_each_campaign_takes_the_blocks_of_its_own_operation_and_reboot_method() -> None:
    mine = (HostGroup(reason=WHY, host_ids=("h1",)),)
    request = SiteBlockedRequest(
        requested_by="ops@dc",
        blocks=(
            SiteBlocks(request="reprovision", groups=mine),
            SiteBlocks(request="reprovision", manual_reboot=True),
            SiteBlocks(request="firmware", groups=(HostGroup(reason="x", host_ids=("h2",)),)),
        ),
    )
    assert request.groups_for("reprovision", manual_reboot=False) == mine
    assert request.groups_for("reprovision", manual_reboot=True) == ()
    assert request.groups_for("firmware", manual_reboot=True) == (), "none sent: nothing blocked"


def test_the_campaign_workflow_takes_the_update() -> None:
    assert SITE_BLOCKED_UPDATE in _Definition.must_from_class(CampaignWorkflow).updates
