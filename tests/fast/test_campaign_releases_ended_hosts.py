"""A host that ended in a running campaign is free for another (issue 36, the attack on README's
remedy for a skipped host: "run it in a new campaign" found the host still claimed by the campaign
that skipped it, and the new campaign "completed" on 0 hosts of 1, exit 0).

- The campaign gives up the claim of each host that ended in it (done, at the target, skipped)
  while it runs on (`to_release`), never in a BFB or flavor campaign, whose DPUDeployment may still
  select the host (rule 1: a deployment never selects a host the campaign does not hold).
- The registry frees only those hosts of that campaign (`release` with `host_ids`).
- A campaign whose every host another running campaign holds is refused (exit 1), not a campaign
  that completes having done nothing.
The end-to-end: tests/test_campaign_site_blocked_e2e.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from test_site_verdicts import dpu_bmc, host_bmc, site

from contracts.campaign_claims import held_reason
from contracts.models.campaign import (
    CampaignHost,
    CampaignInput,
    CampaignTarget,
    ClaimRequest,
    ClaimResult,
    FailureBudget,
    HostGroup,
    HostSelection,
    HostState,
    Limits,
    OperatorRequest,
    Roster,
    SelectHostsResult,
    TargetKind,
)
from metalflow.site_check import save_findings
from metalflow.site_groups import campaign_degraded
from metalflow.site_verdicts import degraded_hosts
from workflows.campaign.admission import Admission, admit
from workflows.campaign.state import CampaignState
from workflows.campaign_claims.state import ClaimsState

NOW = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
S = HostState


def _state(n: int) -> CampaignState:
    state = CampaignState.first(asker="campaign/c8@run", limits=Limits(batch_size=1, max_per_bmc=0), now=NOW)
    state.admitted(Admission(roster=Roster.of([CampaignHost(host_id=f"h{i}") for i in range(n)])), 0)
    state.claimed = True
    return state


def test_a_host_that_ended_here_is_released_once_and_never_in_a_deployment_campaign() -> None:
    state = _state(4)
    assert state.to_release(points_deployment=False) == ()
    state.skip_host("h2", OperatorRequest(requested_by="alice", reason="bad disk"))
    state.reached("h3")
    assert state.to_release(points_deployment=True) == (), "its deployment may still select them"
    assert state.to_release(points_deployment=False) == ("h2", "h3")
    state.marked_released(("h2", "h3"))
    assert state.to_release(points_deployment=False) == (), "released once"
    state.succeed("h0")
    assert state.to_release(points_deployment=False) == ("h0",)
    state.claimed = False
    assert state.to_release(points_deployment=False) == (), "nothing claimed: nothing to release"


def test_the_registry_frees_only_the_named_hosts_of_that_campaign() -> None:
    claims = ClaimsState()
    claims.claim(ClaimRequest(campaign="campaign/c8", host_ids=("h1", "h2", "h3"), deployments=("d",)))
    claims.claim(ClaimRequest(campaign="campaign/other", host_ids=("h4",)))
    answer = claims.release("campaign/c8", ("h3", "h4", "nobody"))
    assert answer.released == 1, "h4 is another campaign's, nobody is no one's"
    assert claims.holders == {"campaign/c8": ["h1", "h2"], "campaign/other": ["h4"]}
    assert claims.deployment_holders() == {"d": "campaign/c8"}, "its deployments stay held"
    assert claims.claim(ClaimRequest(campaign="campaign/c9", host_ids=("h3",))).held == {}
    assert claims.release("campaign/c8", ("h1", "h2")).released == 2
    assert "campaign/c8" not in claims.holders
    assert claims.release("campaign/c8").released == 0 and claims.deployment_holders() == {}


def test_a_campaign_whose_every_host_is_held_elsewhere_is_refused() -> None:
    start = CampaignInput(
        name="c9", target=CampaignTarget(kind=TargetKind.REPROVISION), selection=HostSelection(all=True),
        requested_by="ops",
    )  # fmt: skip
    selected = SelectHostsResult(roster=Roster.of([CampaignHost(host_id="host-003")]))
    held = ClaimResult(held=(HostGroup(reason=held_reason("campaign/c8"), host_ids=("host-003",)),))
    decided = admit(start, selected, held, None, NOW)
    assert decided.refusal is not None and decided.refusal.startswith(
        "every selected host is claimed by another running campaign, so nothing would run: "
        "host-003 claimed by running campaign campaign/c8 (one campaign per host)"
    ), decided.refusal
    two = SelectHostsResult(roster=Roster.of([CampaignHost(host_id=h) for h in ("host-003", "host-004")]))
    some = admit(start, two, held, None, NOW)
    assert some.refusal is None, "one host still runs: the held one is left out, as before"
    assert [g.host_ids for g in some.left_out] == [("host-003",)]


def test_a_host_the_check_degrades_is_listed_and_its_request_says_why(tmp_path: Path) -> None:
    """Issue 36 attack item 2: a host the kept check degrades the campaign's operation on runs,
    and its request carries the words `metalflow host` would print (its status and
    `OperationStarted` Event say them); `campaign_degraded` groups them, as `campaign_blocks` does
    for the blocked."""
    no_cycle = ("On", "ForceOff", "ForceRestart")
    findings = site(host_bmc("h1", reset_types=no_cycle), dpu_bmc("h1"), host_bmc("h2"), dpu_bmc("h2"),
                    host_bmc("h10", reset_types=no_cycle), dpu_bmc("h10"))  # fmt: skip
    assert set(degraded_hosts(findings, "reprovision")) == {"h1", "h10"}
    path = tmp_path / "findings.json"
    save_findings(path, findings)
    [group] = campaign_degraded("reprovision", path)
    assert group.host_ids == ("h1", "h10"), "hosts alike share one group (a fleet is not one per host)"
    assert group.reason.startswith("reprovision is degraded on <host> by the site check of"), group.reason
    assert "[redfish P1" in group.reason, group.reason
    start = CampaignInput(
        name="c", target=CampaignTarget(kind=TargetKind.REPROVISION), selection=HostSelection(all=True),
        requested_by="ops", site_degraded=(group,),
    )  # fmt: skip
    state = _state(3)
    asked = {
        r.host_id: r.site_check
        for r in state.asks(state.pending(), start, name="c", workflow_id="campaign/c")
    }
    assert asked["h0"] == () and asked["h2"] == ()
    [words] = asked["h1"]
    assert words.startswith("reprovision is degraded on h1 by the site check of") and "[redfish P1" in words
    assert "host BMC h1 has no PowerCycle" in words and "<host>" not in words, words


def test_a_failed_host_skipped_is_named_skipped_only_and_the_budget_says_failures_counted() -> None:
    """Issue 36 attack item 3 (last): `campaign status` said "0 failed, 1 skipped" and still
    "failure budget spent: 1 failed" and a "failed host-004" line. One truth: the host is named
    skipped (saying it had failed), and the budget counts failures, in those words."""
    state = _state(2)
    state.fail("h1", "reprovision failed: DPU stuck")
    assert (
        state.check_budget(FailureBudget(max_failures=0))
        == "failure budget spent: 1 failure counted; halts past 0"
    )
    state.skip_host("h1", OperatorRequest(requested_by="alice"))
    assert (state.failed, state.skipped, state.recent_failed) == (0, 1, [])
    [skipped] = state.recent_skipped
    assert skipped.reason == (
        "skipped by alice (it had failed: reprovision failed: DPU stuck; the failure budget still counts it)"
    )
    assert state.budget_failures() == 1, "the budget still counts it"
