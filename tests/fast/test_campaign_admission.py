"""The campaign's admission (workflows/campaign/admission.py), without a server: who is left out and
why, each refusal in its words, the changes and the canary, and what a campaign that no longer
runs left behind, taken over; and `campaign plan`'s rounds (metalflow/cli/campaign_plan.py), the
campaign's own state driven as its runbook drives it. `plan`, `start` and the workflow call the
same `admit` on the same facts: these are the rules they share (issue 35 items 2, 3, 4, 7)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from contracts.dpf_presence import not_in_dpf
from contracts.models.campaign import (
    CampaignHost,
    CampaignInput,
    CampaignTarget,
    ClaimRequest,
    ClaimResult,
    DeploymentFacts,
    DeploymentHeld,
    DeploymentRecord,
    DeploymentsRead,
    HostGroup,
    HostSelection,
    Limits,
    RecordRequest,
    Roster,
    SelectHostsResult,
    TargetKind,
)
from metalflow.cli.campaign_plan import rounds_of
from workflows.campaign.admission import Admission, admit, to_claim
from workflows.campaign_claims.state import ClaimsState

NOW = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
HOSTS = [f"host-00{i}" for i in range(1, 8)]  # the site: 001 the canary, 002..006 the fleet
CANARY, FLEET = HOSTS[:1], HOSTS[1:6]
X = "campaign/x"  # another running campaign


def _start(canary: int = 1, **target: Any) -> CampaignInput:
    values: dict[str, Any] = {"kind": TargetKind.BFB, "value": "bf-new", "deployment": "gpu-compute"}
    if canary:
        values["canary_deployment"] = "canary"
    values.update(target)
    return CampaignInput(
        name="fleet", target=CampaignTarget(**values), selection=HostSelection(all=True),
        canary=canary, limits=Limits(batch_size=2, max_in_flight=2, max_per_bmc=0), requested_by="ops",
    )  # fmt: skip


def _selected(hosts: list[str] = HOSTS[:6], **facts: tuple[str, ...]) -> SelectHostsResult:
    return SelectHostsResult(roster=Roster.of([CampaignHost(host_id=h) for h in hosts]), **facts)


def _read(
    canary: tuple[str, ...] = tuple(CANARY), fleet: tuple[str, ...] = tuple(FLEET), **fleet_facts: Any
) -> DeploymentsRead:
    facts = {
        "role": "fleet",
        "name": "gpu-compute",
        "strategy": "OnDelete",
        "value": "bf-old",
        "covered": fleet,
    }
    facts.update(fleet_facts)
    return DeploymentsRead(
        namespace="dpf",
        deployments=(
            DeploymentFacts(
                role="canary", name="canary", strategy="OnDelete", value="bf-old", covered=canary
            ),
            DeploymentFacts.model_validate(facts),
        ),
    )


def _admit(start: CampaignInput | None = None, selected: SelectHostsResult | None = None,
           claims: ClaimResult | None = None, read: DeploymentsRead | None = None) -> Admission:  # fmt: skip
    return admit(start or _start(), selected or _selected(), claims or ClaimResult(), read or _read(), NOW)


def test_a_host_dpf_does_not_know_is_left_out_and_refuses_nothing() -> None:
    """Item 7: `plan` left it out, the workflow refused the deployment over it: one rule now."""
    decided = _admit(selected=_selected(HOSTS[:7], no_dpf=(HOSTS[6],)))
    assert decided.refusal is None and decided.runs == tuple(HOSTS[:6])
    [group] = decided.left_out
    assert group.host_ids == (HOSTS[6],) and f"metalflow host provision {HOSTS[6]}" in group.reason
    assert [(c.role, c.deployment, c.previous) for c in decided.changes] == [
        ("canary", "canary", "bf-old"), ("fleet", "gpu-compute", "bf-old"),
    ]  # fmt: skip
    assert decided.canary_pool == tuple(CANARY)


@pytest.mark.parametrize(
    ("facts", "claims", "words"),
    [
        ({"assigned": (HOSTS[2],)}, ClaimResult(), f"{HOSTS[2]} (left out: instance assigned in the"),
        ({}, ClaimResult(held=(HostGroup(reason=f"claimed by running campaign {X}", host_ids=(HOSTS[3],)),)),
         f"{HOSTS[3]} (left out: claimed by running campaign {X}"),
    ],
)  # fmt: skip
def test_a_deployment_that_selects_a_host_the_campaign_leaves_out_is_refused(
    facts: dict[str, tuple[str, ...]], claims: ClaimResult, words: str
) -> None:
    """Item 3: a skipped host selected by the deployment would turn Outdated and take the new BFB
    at its next reprovision; unless the whole deployment is asked for by name."""
    decided = _admit(selected=_selected(**facts), claims=claims)
    assert decided.refusal is not None and "DPUDeployment gpu-compute also selects 1 host " in decided.refusal
    assert words in decided.refusal
    # Found by an independent reviewer's second attack (item 3): a held host was advised
    # `--whole-deployment`, which is refused too; only advice that would be accepted is given.
    advice = "--whole-deployment gpu-compute" in decided.refusal
    assert advice != bool(claims.held), decided.refusal
    assert not claims.held or "held by another running campaign: wait for it to end" in decided.refusal
    whole = _admit(_start(whole_deployment=("gpu-compute",)), _selected(**facts), claims)
    if claims.held:  # never over a host another running campaign holds, whole or not
        assert whole.refusal is not None and f"{HOSTS[3]} (claimed by running campaign {X})" in whole.refusal
    else:
        assert whole.refusal is None


def test_whole_deployment_names_the_deployment_it_lifts_and_never_lifts_a_held_host() -> None:
    """An independent reviewer's attack (item 4): `--whole-deployment` was a flag that lifted
    rule 1 for the canary deployment too, and pointed `canary` over c1, held by running campaign
    H3 (H3's reprovision would have installed the new BFB)."""
    held = ClaimResult(held=(HostGroup(reason=f"claimed by running campaign {X}", host_ids=(CANARY[0],)),))
    fleet_only = _admit(_start(whole_deployment=("gpu-compute",)), claims=held)
    assert (
        fleet_only.refusal is not None and "DPUDeployment canary also selects 1 host " in fleet_only.refusal
    )
    both = _admit(_start(whole_deployment=("gpu-compute", "canary")), claims=held)
    assert both.refusal is not None and both.refusal.startswith(
        f"DPUDeployment canary selects {CANARY[0]} (claimed by running campaign {X})"
    )
    with pytest.raises(ValueError, match="whole deployment other is neither"):
        _start(whole_deployment=("other",))
    earlier = CampaignTarget.model_validate(
        {"kind": "bfb", "value": "b", "deployment": "d", "canary_deployment": "c", "whole_deployment": True}
    )
    assert earlier.whole_deployment == ("c", "d"), "an earlier worker's flag reads as both names"


def test_a_canary_whose_hosts_are_all_left_out_is_refused_never_skipped() -> None:
    """Item 2: the canary was taken as passed and the fleet pointed in the same second."""
    decided = _admit(_start(whole_deployment=("canary",)), _selected(assigned=(CANARY[0],)))
    assert decided.refusal is not None and decided.refusal.startswith(
        "the canary cannot run: DPUDeployment canary"
    )
    assert f"{CANARY[0]} (instance assigned in the inventory)" in decided.refusal
    assert _admit(read=_read(canary=())).refusal is not None, "a canary deployment that selects none"


@pytest.mark.parametrize(
    ("read", "claims", "words"),
    [
        (_read(strategy="RollingUpdate"), ClaimResult(), "has dpuSetStrategy RollingUpdate"),
        (_read(found=False), ClaimResult(), "no DPUDeployment gpu-compute in namespace dpf"),
        (_read().model_copy(update={"target_found": False}), ClaimResult(), "no BFB bf-new in namespace dpf"),
        (_read(outside=3, outside_named=("h-x", "h-y", "h-z")), ClaimResult(), "also selects 3 hosts"),
        (_read(), ClaimResult(held_deployments=(DeploymentHeld(deployment="gpu-compute", holder=X),)),
         f"is held by running campaign {X}"),
        (_read(fleet=tuple(HOSTS[:6])), ClaimResult(), "are selected by both canary and gpu-compute"),
        (_read(fleet=tuple(FLEET[1:])), ClaimResult(), f"hosts {FLEET[0]} are not selected by DPUDeployment"),
    ],
)  # fmt: skip
def test_each_refusal_names_why(read: DeploymentsRead, claims: ClaimResult, words: str) -> None:
    decided = _admit(read=read, claims=claims)
    assert decided.refusal is not None and words in decided.refusal, decided.refusal


def test_the_selection_refusals() -> None:
    reprovision = _start(canary=0, kind=TargetKind.REPROVISION, value="", deployment="")
    nobody = admit(reprovision, _selected(HOSTS[:2], no_dpf=tuple(HOSTS[:2])), ClaimResult(), None, NOW)
    assert nobody.refusal is not None and nobody.refusal.startswith("DPF knows none of the 2 selected hosts")
    broken = _admit(selected=_selected(rule_breaks=(f"{HOSTS[1]} dpu-0 BMC firmware BF-24 < BF-25",)))
    assert broken.refusal is not None and "breaks the site's compatibility rule on 1 DPU:" in broken.refusal


def test_what_a_terminated_campaign_left_pointed_is_put_back_first_and_its_value_kept() -> None:
    """Terminated after pointing: the registry's record is taken over; the change is put back
    before any host starts, and this campaign's own change restores to what was there before."""
    left = DeploymentRecord(
        deployment="gpu-compute", holder="campaign/fleet", field="bfb", previous="bf-orig", value="bf-new"
    )
    decided = _admit(claims=ClaimResult(inherited=(left,)), read=_read(value="bf-new"))
    assert [(c.role, c.deployment, c.previous, c.value) for c in decided.changes] == [
        ("leftover", "gpu-compute", "bf-orig", "bf-new"),
        ("canary", "canary", "bf-old", "bf-new"),
        ("fleet", "gpu-compute", "bf-orig", "bf-new"),
    ]  # fmt: skip
    assert decided.changes[0].pointed_at == NOW and decided.changes[0].restored_at is None
    assert [(r.deployment, r.previous) for r in decided.records()] == [
        ("canary", "bf-old"),
        ("gpu-compute", "bf-orig"),
    ]


def test_plan_runs_the_campaigns_own_rounds_and_a_canary_at_the_target_stops_it() -> None:
    """`plan` drives the campaign's state: the canary, then batches; a canary already at the
    target proves nothing: the campaign would stop, so `plan` and `start` refuse it (item 1)."""
    start = _start()
    state, rounds = rounds_of(start, _admit(), set(), NOW)
    assert rounds == [tuple(CANARY), tuple(FLEET[:2]), tuple(FLEET[2:4]), tuple(FLEET[4:])]
    assert state.stopped_reason is None and state.outcome() == "completed"
    state, rounds = rounds_of(start, _admit(), {CANARY[0], FLEET[0]}, NOW)
    assert rounds[0] == () and state.stopped_reason is not None
    assert (
        f"{CANARY[0]}: already at the target" in state.stopped_reason
        and "--canary 0" not in state.stopped_reason
    )
    assert state.pointed(("fleet",)) == [], "the fleet's deployment is never pointed"
    reprovision = _start(canary=1, kind=TargetKind.REPROVISION, value="", deployment="", canary_deployment="")
    plain = admit(reprovision, _selected(), ClaimResult(), None, NOW)
    expected = [(HOSTS[0],), tuple(HOSTS[1:3]), tuple(HOSTS[3:5]), (HOSTS[5],)]
    assert rounds_of(reprovision, plain, set(), NOW)[1] == expected


def test_a_restore_is_compare_and_set_and_names_who_made_the_change() -> None:
    """An independent reviewer's attack (item 2): TK3 was terminated before it pointed
    gpu-compute, an operator patched gpu-compute to 3-1-0, and other1 "restored" TK3's recorded
    change (2-9-0) over it, its status naming itself as the campaign taken over. A restore puts
    `previous` back only where the deployment still holds the value the campaign set."""
    registry = ClaimsState()
    tk3 = "campaign/TK3"
    registry.claim(ClaimRequest(campaign=tk3, host_ids=("c1",), deployments=("gpu-compute",)))
    record = DeploymentRecord(deployment="gpu-compute", field="bfb", previous="2-9-0", value="3-0-0")
    registry.record(RecordRequest(campaign=tk3, changes=(record,)))
    answer = registry.claim(ClaimRequest(campaign="campaign/other1", host_ids=("c1",), take_from=(tk3,)))
    [leftover] = _admit(claims=ClaimResult(inherited=answer.inherited)).changes[:1]
    assert leftover.role == "leftover" and f"taken over from {tk3}," in leftover.note
    assert leftover.restore_write("3-1-0") is None, "an operator's value is left as it is"
    kept = leftover.restored("3-1-0", NOW)
    assert kept.left_as_found and "not restored: changed since by someone else (now 3-1-0)" in kept.describe()
    assert leftover.restore_write("2-9-0") is None, "a change recorded but never made is not restored"
    assert leftover.restored("2-9-0", NOW).left_as_found
    assert leftover.restore_write("3-0-0") == "2-9-0"
    assert not leftover.restored("3-0-0", NOW).left_as_found


def test_a_firmware_campaign_leaves_out_a_host_dpf_lacks_a_dpu_of_naming_it() -> None:
    """Issue 40: a firmware campaign on a host whose DPU was removed from DPF (`host remove
    --dpus`) staged the image, then ended `DPUsNotInDPF`. The admission now decides as `host
    firmware` refuses (`contracts.dpf_presence`): the host is left out up front, the DPU named."""
    start = _start(canary=0, kind=TargetKind.FIRMWARE, value="32.45.1020", deployment="",
                   image_uri="http://firmware.example.test/bf-fw-32.45.1020.bfb")  # fmt: skip
    gone = f"{HOSTS[1]}-dpu-1"
    selected = _selected(HOSTS[:3], not_in_dpf={HOSTS[1]: (gone,)})  # type: ignore[arg-type]
    decided = admit(start, selected, ClaimResult(), None, NOW)
    assert decided.refusal is None and decided.runs == (HOSTS[0], HOSTS[2])
    [group] = decided.left_out
    assert group.host_ids == (HOSTS[1],), group
    assert group.reason.startswith(f"DPF has no DPU {gone} (removed, or never provisioned)"), group.reason
    assert f"metalflow host provision {HOSTS[1]}" in group.reason, group.reason
    assert to_claim(start, selected) == (HOSTS[0], HOSTS[2])


def test_the_dpus_dpf_lacks_are_decided_once_for_the_cli_and_the_campaign() -> None:
    assert not_in_dpf(["h-dpu-0", "h-dpu-1", "h-dpu-2"], {"h-dpu-1"}) == ["h-dpu-0", "h-dpu-2"]
    assert not_in_dpf(["h-dpu-0"], {"h-dpu-0"}) == []


def test_a_host_held_back_is_left_out_naming_who_and_why_and_the_canary_is_the_next() -> None:
    """An attack found it (issue 40): `campaign plan` named a host an operator held automation
    back on (`AutomationHeldBack`: an abort of the monitor's reprovision) as the canary, while
    `campaign start` asked it, was refused and skipped it. The hold is read with the selection
    (`contracts.host_entity.with_maintenance`, both commands' read) and the one admission leaves it
    out, saying who and why: the canary is the next host, in the plan as in the run."""
    since = datetime(2026, 11, 28, 1, 0, tzinfo=UTC)
    reprovision = _start(canary=1, kind=TargetKind.REPROVISION, value="", deployment="", canary_deployment="")
    held = _selected(held_back={HOSTS[0]: ("alice", "debugging its DPU", since)})
    decided = admit(reprovision, held, ClaimResult(), None, NOW)
    assert decided.runs == tuple(HOSTS[1:6]) and HOSTS[0] not in to_claim(reprovision, held)
    [group] = decided.left_out
    assert group.host_ids == (HOSTS[0],), group
    assert group.reason.startswith(
        "automation held back by alice since 2026-11-28T01:00:00Z: debugging its DPU; "
        "a campaign never asks such a host"
    ), group.reason
    assert rounds_of(reprovision, decided, set(), NOW)[1][0] == (HOSTS[1],)


def test_a_campaign_leaves_out_a_host_the_kept_site_check_blocks_for_its_kind(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36 (re-attack): a firmware campaign ran on a host whose DPU BMC the kept site check
    found dead, where `metalflow host firmware` refuses it. `plan` and `start` read the kept
    verdicts per host for the kind's operation (`with_site_check`), the admission leaves those
    hosts out naming the finding; a degraded host runs; the site's own block refuses it all."""
    from dataclasses import replace as changed

    from metalflow.cli.campaign_plan import SiteRefused, with_site_check
    from metalflow.site_check import save_findings
    from metalflow.site_groups import campaign_blocks
    from metalflow.site_verdicts import BMCFinding, DPFFinding, SiteFindings

    def bmcs(host: str, **dpu: Any) -> tuple[BMCFinding, ...]:
        host_bmc = BMCFinding(bmc_id=host, host_id=host, reset_types=("On", "ForceOff", "PowerCycle"),
                              last_reset_time=True, update_service=True)  # fmt: skip
        dpu_bmc = BMCFinding(bmc_id=f"{host}-dpu-0", host_id=host, dpu=f"{host}-dpu-0",
                             reset_types=("ForceRestart", "PowerCycle"), boot_progress=True,
                             update_service=True)  # fmt: skip
        return host_bmc, changed(dpu_bmc, **dpu)

    path = tmp_path / "site-check.json"
    kept = SiteFindings(
        site="s", checked_at="2026-11-28T01:00:00Z", dpf=DPFFinding(version="26"),
        bmcs=bmcs(HOSTS[0]) + bmcs(HOSTS[1], reachable=False, error="no answer") + bmcs(HOSTS[2]),
    )  # fmt: skip
    save_findings(path, kept)
    firmware = _start(canary=0, kind=TargetKind.FIRMWARE, value="32.45.1020", deployment="",
                      image_uri="http://firmware.example.test/bf-fw-32.45.1020.bfb")  # fmt: skip
    blocked = campaign_blocks("firmware", path)
    assert [g.host_ids for g in blocked] == [(HOSTS[1],)]
    start = firmware.model_copy(update={"site_blocked": blocked})
    selected = _selected(HOSTS[:3])
    decided = admit(start, selected, ClaimResult(), None, NOW)
    assert decided.refusal is None and decided.runs == (HOSTS[0], HOSTS[2])
    [group] = decided.left_out
    reason = group.reason
    assert group.host_ids == (HOSTS[1],), group
    assert reason.startswith("firmware is blocked on it by the site check of 2026-11-28T01:00:00Z: "), reason
    assert f"BMC {HOSTS[1]}-dpu-0 unreachable (no answer) [redfish F3]" in reason, reason
    assert "metalflow site check" in reason and to_claim(start, selected) == (HOSTS[0], HOSTS[2])
    # A reprovision campaign: that DPU only degrades its reprovision (runs); a dead host BMC blocks it.
    assert campaign_blocks("reprovision", path) == ()
    save_findings(path, changed(kept, bmcs=bmcs(HOSTS[0]) + (changed(bmcs(HOSTS[1])[0], reachable=False),)))
    assert [g.host_ids for g in campaign_blocks("reprovision", path)] == [(HOSTS[1],)]
    assert campaign_blocks("reprovision", path, manual_reboot=True) == ()  # a person reboots
    # The CLI's `plan` and `start` both go through `with_site_check` (the kept file of the state dir).
    monkeypatch.setenv("METALFLOW_STATE_DIR", str(tmp_path))
    save_findings(path, kept)
    request, said = with_site_check(firmware)
    assert request.site_blocked == blocked and said[0].startswith(
        "the site check of 2026-11-28T01:00:00Z is "
    )
    save_findings(path, changed(kept, dpf=DPFFinding(readable=False, error="refused")))
    with pytest.raises(SiteRefused, match="bfb-campaign is blocked on the site"):
        with_site_check(_start())


def test_the_plan_says_the_soak_follows_the_canary_and_each_batch() -> None:
    """`campaign plan` shows the soak where the campaign waits it: after the canary and after each
    batch (issue 38: it was waited between batches only, and the plan did not say it at all)."""
    from metalflow.cli.campaign_plan import CampaignPlan, render

    plan = CampaignPlan(
        name="c", target="reprovision", selection="--all", selected=3, left_out=(), at_target=(),
        canary=("h0",), batches=(("h1",), ("h2",)), windows=(), changes=(), budget="none",
        soak_seconds=300,
    )  # fmt: skip
    assert "soak: 5m after the canary and each batch, before the next batch starts" in render(plan)
    assert plan.model_dump()["soak_seconds"] == 300  # --json says it too
    without = plan.model_copy(update={"canary": (), "soak_seconds": 0.0})
    assert "soak: none (each batch starts once the one before it ended)" in render(without)
