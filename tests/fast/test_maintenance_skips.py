"""Nothing disruptive starts by itself on a host in maintenance: a campaign (and `campaign plan`,
which calls the same `admit`) leaves it out naming the maintenance and who set it; an entity's
`InMaintenance` refusal of a campaign's ask skips the host (never a failure); the monitor records
the reprovision it would have asked for and does not count it asked. Pure decisions, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.host_requests import REPROVISION
from contracts.models.campaign import (
    CampaignHost,
    CampaignInput,
    CampaignTarget,
    ClaimResult,
    HostRequestOutcome,
    HostSelection,
    Limits,
    Roster,
    SelectHostsResult,
    TargetKind,
)
from contracts.models.dpf import DPUNodeState, DPUState, HostDPFState
from contracts.models.host import Maintenance
from contracts.models.monitor import HostMonitorInput, MonitorPolicy, OwnerReprovisionResult
from workflows.campaign.admission import admit, to_claim
from workflows.campaign.ledger import S
from workflows.campaign.state import CampaignState, maintenance_skip
from workflows.host.state import maintenance_refusal
from workflows.monitor.state import MonitorState

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
HOSTS = ["host-001", "host-002", "host-003"]
START = CampaignInput(
    name="fleet", target=CampaignTarget(kind=TargetKind.REPROVISION), selection=HostSelection(all=True),
    limits=Limits(batch_size=3, max_in_flight=3, max_per_bmc=0), requested_by="ops",
)  # fmt: skip
HELD = Maintenance(by="alice", reason="replacing a fan", since=NOW)
REFUSAL = maintenance_refusal("host-002", HELD, REPROVISION, in_maintenance=False) or ""


def selected(**maintenance: tuple[str, datetime | None]) -> SelectHostsResult:
    roster = Roster.of([CampaignHost(host_id=h) for h in HOSTS])
    return SelectHostsResult(
        roster=roster, maintenance={h.replace("_", "-"): v for h, v in maintenance.items()}
    )


def test_a_campaign_and_its_plan_leave_a_host_in_maintenance_out_naming_who_set_it() -> None:
    chosen = selected(host_002=("alice", NOW))
    decided = admit(START, chosen, ClaimResult(), None, NOW)
    assert decided.runs == ("host-001", "host-003")
    assert decided.why_out["host-002"] == (
        "in maintenance since 2026-11-29T06:00:00Z, set by alice; "
        "a campaign never takes a host in maintenance"
    )
    assert "host-002" not in to_claim(START, chosen)  # not claimed either
    assert admit(START, selected(), ClaimResult(), None, NOW).runs == tuple(HOSTS)


def test_the_entitys_maintenance_refusal_of_a_campaigns_ask_skips_the_host_never_fails_it() -> None:
    state = CampaignState.first(asker="campaign/fleet", limits=START.limits, now=NOW)
    state.admitted(admit(START, selected(), ClaimResult(), None, NOW), canary=0)
    hosts = [CampaignHost(host_id=h) for h in HOSTS]
    outcome = HostRequestOutcome(host_id="host-002", outcome="maintenance", message=REFUSAL)
    assert state.answered([outcome], hosts, now=NOW, start=START) is None
    assert state.state("host-002") == S.SKIPPED and state.failed == 0
    assert maintenance_skip(REFUSAL) == (
        "in maintenance since 2026-11-29T06:00:00Z, set by alice: replacing a fan; "
        "a campaign never takes a host in maintenance"
    )


def test_the_monitor_records_what_it_would_have_done_and_does_not_count_it_asked() -> None:
    state = MonitorState.of(
        HostMonitorInput(host_id="host-002", policy=MonitorPolicy(reprovision_after_seconds=60.0)), NOW
    )
    node = DPUNodeState(name="node-host-002", uid="n")

    def seen(phase: str) -> HostDPFState:
        dpu = DPUState(name="n-d0", uid="u-d0", dpu_id="d0", phase=phase, agent_started_at="t1")
        return HostDPFState(host_id="host-002", node=node, dpus=(dpu,))

    state.observe(seen("Ready"), NOW)
    state.observe(seen("Node Effect"), NOW)
    later = NOW + timedelta(minutes=1)
    due = state.overdue(later)
    assert [d.dpu_id for d in due] == ["d0"]
    words = state.reprovision_answered(
        due, OwnerReprovisionResult(outcome="maintenance", message=REFUSAL), later
    )
    assert words.startswith("would have asked for a reprovision; not asked: host host-002 is in maintenance")
    assert "set by alice: replacing a fan" in words
    assert state.reprovisions_requested == 0 and state.asked is None
    assert state.requests[-1] == f"d0: {words}"
