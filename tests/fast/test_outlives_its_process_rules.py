"""Issue 40, what must outlive the process holding it, one pure rule at a time (the end-to-end
cases: tests/test_outlives_its_process.py):

- an operator's abort of the monitor's request holds automation back in the entity
  (`workflows/host/automation_hold.py`): every automatic request refused naming it, until `host
  retry` of the idle host or an operator's own request;
- a new entity takes over what its terminated predecessor's memo carried
  (`workflows/host/takeover_rules.py`), the boot generation never going back.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.campaign import REFUSALS
from contracts import names
from contracts.errors import AutomationHeldBack, InvalidInput
from contracts.host_requests import PROVISION, REBOOT, REPROVISION
from contracts.models.bmc_lease import RebootRunSeen
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
from contracts.models.host import (
    EntityPredecessor,
    HostEntityMemory,
    HostWorkflowInput,
    Maintenance,
    OperationRequest,
)
from workflows.campaign.admission import admit
from workflows.campaign.ledger import S
from workflows.campaign.state import CampaignState
from workflows.host.automation_hold import hold_after
from workflows.host.outcome import off_when_cut
from workflows.host.state import HostEntityState
from workflows.host.takeover_rules import carried, take_over
from workflows.parts.reboot_rounds import RebootLeft

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
HOST = "host-001"
MONITOR = names.monitor_workflow_id(HOST)
MONITORS = OperationRequest(requested_by=MONITOR, campaign_workflow_id=MONITOR, reason="DPU down")
CAMPAIGNS = OperationRequest(requested_by="campaign/fw", campaign_workflow_id="campaign/fw")
ALICE = OperationRequest(requested_by="alice")


def entity(**start: Any) -> HostEntityState:
    return HostEntityState.of(HostWorkflowInput(host_id=HOST, **start))


def ended(state: HostEntityState, request: OperationRequest, outcome: str, kind: Any = REPROVISION) -> None:
    """A request recorded, started and ended with `outcome`, as the entity's handlers do."""
    state.refuse_request(kind, request)
    current = state.record_request(kind, request, T0)
    state.approve_at_once(current)
    state.started(current, T0)
    state.finish(current, outcome, T0 + timedelta(seconds=5))


# -- an operator's abort of the monitor's request -------------------------------------------------


def test_an_operators_abort_of_the_monitors_request_holds_automation_back_naming_who_and_why() -> None:
    state = entity()
    said = "aborted by alice: debugging. Boot generation 0 reached. Changed by this run: nothing"
    ended(state, MONITORS, said)
    hold = state.automation_held_back
    assert hold is not None
    assert (hold.by, hold.reason, hold.after, hold.asked_by) == (
        "alice",
        "debugging",
        "reprovision/host-001",
        MONITOR,
    )
    for automatic, kind in ((MONITORS, REPROVISION), (CAMPAIGNS, REBOOT)):  # the monitor's, a campaign's
        with pytest.raises(AutomationHeldBack) as refused:
            state.refuse_request(kind, automatic)
        words = str(refused.value)
        assert "automation held back by alice: debugging (since 2026-11-29T12:00:05Z" in words, words
        assert f"until metalflow host retry {HOST}, or an operator's own request" in words, words
    assert state.status().automation_held_back == hold


@pytest.mark.parametrize(
    "outcome",
    [
        "aborted by alice: debugging; the host is on",
        "withdrawn by alice: not now",
        "aborted",  # cancelled by hand
        "terminated",
    ],
)
def test_every_operators_no_to_the_monitor_holds_it_back(outcome: str) -> None:
    state = entity()
    ended(state, MONITORS, outcome)
    assert state.automation_held_back is not None, outcome
    assert ";" not in state.automation_held_back.reason


@pytest.mark.parametrize(
    ("request_", "outcome"),
    [
        (MONITORS, "completed"),
        (MONITORS, "failed: the DPU BMC rejected the credentials"),
        (MONITORS, "expired: not approved within 1:00:00"),
        (MONITORS, f"withdrawn by {MONITOR}: its DPUs are Ready again"),  # the monitor's own
        (MONITORS, f"withdrawn at its approval by bob: its reason ({MONITOR}) no longer holds"),
        (ALICE, "aborted by bob: wrong host"),  # a person's request: nothing automatic to hold
        (CAMPAIGNS, "aborted by bob: campaign aborted"),  # a campaign aborts its own in the operator's name
    ],
)
def test_no_hold_after_anything_but_an_operators_no_to_the_monitor(request_: Any, outcome: str) -> None:
    state = entity()
    ended(state, request_, outcome)
    assert state.automation_held_back is None
    assert hold_after(HOST, state_current(request_), outcome, T0) is None


def state_current(request: OperationRequest) -> Any:
    state = entity()
    return state.record_request(REPROVISION, request, T0)


def test_an_operators_own_request_ends_the_hold() -> None:
    state = entity()
    ended(state, MONITORS, "aborted by alice: debugging")
    state.refuse_request(PROVISION, ALICE)  # a person's request is never refused by the hold
    state.record_request(PROVISION, ALICE, T0)
    assert state.automation_held_back is None


def test_a_campaigns_ask_refused_by_the_hold_skips_the_host_never_fails_it() -> None:
    """The hold is an operator's no, not a failure: it counts against no campaign's budget."""
    state = entity()
    ended(state, MONITORS, "aborted by alice: debugging")
    with pytest.raises(AutomationHeldBack) as refused:
        state.refuse_request(REPROVISION, CAMPAIGNS)
    start = CampaignInput(
        name="fleet", target=CampaignTarget(kind=TargetKind.REPROVISION), selection=HostSelection(all=True),
        limits=Limits(batch_size=1, max_in_flight=1, max_per_bmc=0), requested_by="ops",
    )  # fmt: skip
    campaign = CampaignState.first(asker="campaign/fleet", limits=start.limits, now=T0)
    hosts = [CampaignHost(host_id=HOST)]
    campaign.admitted(
        admit(start, SelectHostsResult(roster=Roster.of(hosts)), ClaimResult(), None, T0), canary=0
    )
    kind = REFUSALS[type(refused.value).__name__]
    told = HostRequestOutcome(host_id=HOST, outcome=kind, message=str(refused.value))
    assert campaign.answered([told], hosts, now=T0, start=start) is None
    assert campaign.state(HOST) == S.SKIPPED and campaign.failed == 0


def test_the_hold_reads_the_reason_before_an_end_that_reached_no_generation() -> None:
    """An abort before any reboot names no generation (attack 40f): the reason still ends there."""
    state = entity()
    ended(state, MONITORS, "aborted by alice: debugging. No boot generation reached by this run. Changed by")
    assert state.automation_held_back is not None and state.automation_held_back.reason == "debugging"


def test_host_retry_of_the_idle_host_ends_the_hold_and_is_refused_without_one() -> None:
    state = entity()
    with pytest.raises(
        InvalidInput, match="no operation in flight and automation is not held back; nothing to retry"
    ):
        state.release_automation("alice")
    ended(state, MONITORS, "aborted by alice: debugging")
    assert state.release_automation("alice", dry=True).startswith("automation no longer held back")
    assert state.automation_held_back is not None  # the validator's dry run changes nothing
    words = state.release_automation("alice")
    assert words.startswith(
        "automation no longer held back: host retry by alice (it was automation held back by"
    )
    assert state.automation_held_back is None
    state.refuse_request(REPROVISION, MONITORS)  # asked again: accepted


def test_host_retry_after_someone_elses_abort_names_that_abort_who_and_when() -> None:
    """Attack 40f (LOW): `host retry` sent as `host abort` ended the run read only "no operation in
    flight ... nothing to retry"; it names the run that ended, who aborted it and when."""
    state = entity()
    said = "aborted by bob: wrong host. The host was not rebooted by metalflow (its power not touched)"
    ended(state, ALICE, said, kind=REBOOT)
    with pytest.raises(InvalidInput) as refused:
        state.release_automation("alice")
    words = str(refused.value)
    assert (
        "host host-001: no operation in flight and automation is not held back; nothing to retry: "
        f"the last operation, {state.recent[-1].workflow_id} (reboot requested by alice), ended at "
        f"2026-11-29T12:00:05Z: {said}"
    ) in words, words


def test_host_retry_is_refused_while_an_operation_is_in_flight() -> None:
    state = entity()
    ended(state, MONITORS, "aborted by alice: debugging")
    state.record_request(PROVISION, ALICE, T0)  # (ends the hold too; put one back to see the refusal)
    state.automation_held_back = hold_after(HOST, state_current(MONITORS), "aborted by alice: x", T0)
    with pytest.raises(InvalidInput, match=r"provision/host-001 awaits approval: nothing to retry here"):
        state.release_automation("alice")


# -- a new entity takes over its predecessor's record ---------------------------------------------


def _left(**memory: Any) -> EntityPredecessor:
    return EntityPredecessor(
        run_id="r1", status="TERMINATED", closed_at=T0, carried=carried(HostEntityMemory(**memory))
    )


def test_a_new_entity_takes_over_the_host_off_generation_maintenance_and_hold() -> None:
    old = entity()
    ended(old, MONITORS, "aborted by alice: debugging")
    old.boot_generation, old.left_off_by = 4, "reboot/host-001/generation-4"
    old.maintenance = Maintenance(by="carol", reason="cabling", since=T0)
    before = EntityPredecessor(run_id="r1", status="TERMINATED", closed_at=T0, carried=carried(old))

    new = entity()
    words = take_over(new, before)
    assert (new.boot_generation, new.left_off_by) == (4, "reboot/host-001/generation-4")
    assert new.maintenance == old.maintenance and new.automation_held_back == old.automation_held_back
    assert words == (
        "took over from run r1 (terminated at 2026-11-29T12:00:00Z): boot generation 4; the host is "
        "OFF as reboot/host-001/generation-4 left it; maintenance by carol: cabling; automation held "
        "back by alice"
    )
    assert new.status().taken_over == words and new.left_off() == "reboot/host-001/generation-4"


def test_a_boot_generation_never_goes_back_and_what_the_new_entity_holds_stands() -> None:
    new = entity(boot_generation=7)
    new.maintenance = Maintenance(by="dave", reason="mine", since=T0)
    take_over(new, _left(boot_generation=3, maintenance=Maintenance(by="carol", reason="old", since=T0)))
    assert new.boot_generation == 7 and new.maintenance is not None and new.maintenance.by == "dave"


@pytest.mark.parametrize(
    "before",
    [EntityPredecessor(), EntityPredecessor(run_id="r0", status="TERMINATED", carried=None), _left()],
)
def test_nothing_to_take_over_says_nothing(before: EntityPredecessor) -> None:
    new = entity()
    assert take_over(new, before) == "" and new.taken_over == "" and new.boot_generation == 0


def test_a_new_entity_takes_over_the_instance_and_the_dpus_removed_from_dpf() -> None:
    """Before: the successor started with no instance (a campaign's `--assigned skip` then
    reprovisioned the tenant's host unasked) and forgot the removal (a reprovision of the
    removed DPU was accepted and hung)."""
    old = entity()
    old.assign("tenant-3")
    old.removed_from_dpf["host-001-dpu-1"] = "remove/host-001"
    new = entity()
    before = EntityPredecessor(run_id="r1", status="TERMINATED", closed_at=T0, carried=carried(old))
    words = take_over(new, before)
    assert new.instance == "tenant-3" and new.removed_from_dpf == {"host-001-dpu-1": "remove/host-001"}
    assert "instance tenant-3; removed from DPF: host-001-dpu-1" in words, words
    with pytest.raises(Exception, match="assigned to instance tenant-3"):
        new.refuse_request(REPROVISION, OperationRequest(requested_by="campaign/fw", refuse_if_assigned=True))
    with pytest.raises(Exception, match="DPF no longer has"):
        new.refuse_request(REPROVISION, OperationRequest(requested_by="alice"))


def test_what_the_new_entity_was_started_with_stands_over_the_carried_instance() -> None:
    new = entity(instance="tenant-9")
    take_over(new, _left(instance="tenant-3"))
    assert new.instance == "tenant-9"


# -- an operation terminated by hand while the host was OFF by its hand ---------------------------


@pytest.mark.parametrize("operation", ["reboot", "reset"])
def test_a_reboot_or_reset_terminated_in_manual_intervention_leaves_the_host_marked_off(
    operation: str,
) -> None:
    words = off_when_cut("terminated", operation, "manual-intervention-required", HOST)
    assert words.startswith("terminated while the host was OFF (manual-intervention-required)"), words
    state = entity()
    ended(state, ALICE, words, kind=REBOOT)
    assert state.left_off_by == "reboot/host-001/generation-1" and state.left_off() == state.left_off_by


@pytest.mark.parametrize(
    ("outcome", "operation", "phase"),
    [
        ("terminated", "reboot", "powering"),  # its last status claimed nothing of the power
        ("aborted", "reboot", "manual-intervention-required"),  # a cancelled run powers it on itself
        ("terminated", "reprovision", "manual-intervention-required"),  # not OFF-only for it
    ],
)
def test_no_off_mark_from_anything_else(outcome: str, operation: str, phase: str) -> None:
    assert off_when_cut(outcome, operation, phase, HOST) == outcome


# -- the OFF mark and the world -------------------------------------------------------------------


def test_a_power_watch_reading_on_at_rest_clears_the_off_mark() -> None:
    """Before: `metalflow bmc power H on` (the WARNING's advice) left the host `idle (host OFF)`
    for ever: only a run's words cleared the mark. A reading is the world."""
    state = entity()
    state.left_off_by = "reboot/host-001/generation-2"
    assert state.read_at_rest("Off") == "" and state.left_off() == "reboot/host-001/generation-2"
    assert state.read_at_rest(None) == ""  # no power state read: nothing known
    words = state.read_at_rest("On")
    assert words == "the host is On at rest: no longer OFF as reboot/host-001/generation-2 left it"
    assert state.left_off() is None and carried(state)["left_off_by"] == ""
    assert state.read_at_rest("On") == ""  # nothing left to clear


# -- an operation terminated while its reboot had the host OFF (reprovision, provision, firmware) ---

_REBOOT_ID = names.host_reboot_workflow_id(HOST, 2)
_OFF_SAID = f"BMCRebootFailed: the BMC of {HOST} rejected the credentials; the host {HOST} is OFF: ..."


@pytest.mark.parametrize(
    ("operation", "seen"),
    [
        # a reprovision's (or provision's) reboot escalated, failing with the host OFF, and the
        # operation waited for a person: the reboot's failure says it
        ("reprovision", RebootRunSeen(end="failed", phase="failed", said=_OFF_SAID)),
        ("provision", RebootRunSeen(end="failed", phase="failed", said=_OFF_SAID)),
        # a firmware run's reboot is abandoned with it: it still waits for a person, the host OFF
        ("firmware", RebootRunSeen(end="running", phase="manual-intervention-required")),
        # a reboot cut by hand itself in that wait
        ("firmware", RebootRunSeen(end="terminated", phase="manual-intervention-required")),
    ],
)
def test_an_operation_terminated_while_its_reboot_had_the_host_off_leaves_it_marked_off(
    operation: str, seen: RebootRunSeen
) -> None:
    """Before: a reprovision (provision, firmware) terminated by hand while it, or its reboot,
    waited for a person with the host OFF left the host idle, no OFF mark: only a reboot's or a
    reset's own last Phase was read. Now its last reboot run's end says it."""
    words = off_when_cut("terminated", operation, "", HOST, RebootLeft(_REBOOT_ID, seen))
    assert words.startswith("terminated ") and _REBOOT_ID in words, words
    assert f"the host {HOST} is OFF: power it on (`metalflow bmc power {HOST} on`)" in words, words
    still = f"{_REBOOT_ID} still waits for a person: `temporal workflow cancel --workflow-id {_REBOOT_ID}`"
    assert (still in words) == (seen.end == "running"), words
    state = entity()
    ended(state, ALICE, words, kind=REPROVISION)
    assert state.left_off() == names.reprovision_workflow_id(HOST), state.left_off_by


@pytest.mark.parametrize(
    "seen",
    [
        RebootRunSeen(end="running", phase="powering"),  # its parent's close cancels it: it powers on
        RebootRunSeen(end="failed", phase="failed", said="BMCRebootFailed: unreachable; power not touched"),
        RebootRunSeen(end="cancelled", phase="cancelled"),  # a cancel powered the host on again
        RebootRunSeen(end="running", phase="waiting-for-manual-reboot"),  # never turned off by us
    ],
)
def test_a_terminated_operation_whose_reboot_did_not_leave_the_host_off_is_not_marked(
    seen: RebootRunSeen,
) -> None:
    assert off_when_cut("terminated", "reprovision", "", HOST, RebootLeft(_REBOOT_ID, seen)) == "terminated"
    # a cancel, not a terminate: the run's own end says what it left
    assert off_when_cut("aborted", "reprovision", "", HOST, RebootLeft(_REBOOT_ID, seen)) == "aborted"


def test_the_taken_over_line_says_when_and_goes_once_a_later_operation_completes() -> None:
    """An attack found it (issue 40): `host status` kept `taken over ... boot generation 4; the
    host is OFF as ... left it` after later operations had powered the host and moved the
    generation, with no time: a reader took it for now. It says when it happened, and goes once
    a later operation completes (a failed one leaves it: what it said may still hold)."""
    old = entity()
    old.boot_generation, old.left_off_by = 4, "reboot/host-001/generation-4"
    before = EntityPredecessor(run_id="r1", status="TERMINATED", closed_at=T0, carried=carried(old))
    new = entity()
    words = take_over(new, before, T0 + timedelta(minutes=3))
    assert words.startswith(
        "took over from run r1 (terminated at 2026-11-29T12:00:00Z) at 2026-11-29T12:03:00Z: "
        "boot generation 4"
    ), words
    ended(new, ALICE, "failed: BMCUnreachable: no answer", kind=REBOOT)
    assert new.status().taken_over == words
    ended(new, ALICE, "completed", kind=REBOOT)
    assert new.status().taken_over == ""
