"""The host entity's decisions (`workflows/host/state.py`), without a server: what test_host_entity
and test_host_entity_e2e show end to end (one operation at a time, the approval rule and its
window, the instance rules, withdrawal, expiry, the child's id and input, what is recorded and
shown, continue-as-new carrying the state whole), here one decision at a time, and the safety
rules as invariants of a Hypothesis state machine over the same calls the entity's handlers make.
"""

from __future__ import annotations

import dataclasses
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError, TerminatedError

from contracts.converter import DATA_CONVERTER
from contracts.errors import (
    DPUsRemoved,
    HostBusy,
    InstanceConflict,
    InvalidInput,
    NothingAwaitsApproval,
    OperationAborted,
    OperationStarted,
    ReasonNoLongerHolds,
)
from contracts.host_requests import ENTITY_REQUESTS, FIRMWARE, PROVISION, REBOOT, REMOVAL, REPROVISION, RESET
from contracts.models.dpf import DPUState, HostDPFState
from contracts.models.host import (
    AssignInstanceRequest,
    FirmwareInput,
    FirmwareRequest,
    HostEntityMemory,
    HostOperationInput,
    HostRebootInput,
    HostResetInput,
    HostWorkflowInput,
    OperationPolicy,
    OperationRequest,
    ResetRequest,
    ResetTarget,
    WithdrawRequest,
)
from contracts.models.removal import HostRemovalInput
from contracts.wording import CANCELLED_OUTCOME
from workflows.host.abort_rule import (
    ABORT_OPERATION,
    AWAITING_APPROVAL,
    WAIT_FOR_START,
    WITHDRAW_REQUEST,
    what_abort_reaches,
)
from workflows.host.outcome import generation_reported, outcome_of
from workflows.host.state import IDLE, RECENT_LIMIT, HostEntityState

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
HOST = "host-001"
ALICE = OperationRequest(requested_by="alice")


def entity(**start: Any) -> HostEntityState:
    return HostEntityState.of(HostWorkflowInput(host_id=HOST, **start))


def asked(state: HostEntityState, kind: Any = REPROVISION, request: Any = ALICE, now: datetime = T0) -> Any:
    """What a request handler does: refuse, record, then start at once or hold for approval."""
    state.refuse_request(kind, request)
    current = state.record_request(kind, request, now)
    if not state.needs_approval(kind, now):
        state.approve_at_once(current)
    return current


# -- one operation at a time ----------------------------------------------------------------------


def test_a_second_request_is_refused_naming_the_operation_in_flight() -> None:
    state = entity()
    state.refuse_request(PROVISION, ALICE)  # idle: accepted
    asked(state, PROVISION)
    with pytest.raises(HostBusy) as busy:
        state.refuse_request(REPROVISION, OperationRequest(requested_by="bob"))
    assert str(busy.value.message) == (
        f"host {HOST} is busy: provision is in flight (workflow provision/{HOST}, requested by alice); "
        "reprovision refused"
    )


def test_a_request_awaiting_approval_holds_the_host_too() -> None:
    state = entity(instance="i-1")
    asked(state, REPROVISION)
    with pytest.raises(HostBusy, match="reprovision awaits approval"):
        state.refuse_request(PROVISION, ALICE)


def test_a_campaign_that_skips_assigned_hosts_is_refused_on_one() -> None:
    skipping = OperationRequest(requested_by="campaign", refuse_if_assigned=True)
    entity().refuse_request(REPROVISION, skipping)  # no instance: accepted
    entity(instance="i-1").refuse_request(REPROVISION, ALICE)  # held for approval, not refused
    with pytest.raises(InstanceConflict, match="assigned to instance i-1; skipped"):
        entity(instance="i-1").refuse_request(REPROVISION, skipping)


# -- approval -------------------------------------------------------------------------------------


def test_an_assigned_host_waits_for_approval_unless_its_window_is_open() -> None:
    assert not entity().needs_approval(REPROVISION, T0)
    assigned = entity(instance="i-1")
    assert assigned.needs_approval(REPROVISION, T0)
    assigned.auto_approved_until = T0 + timedelta(minutes=10)
    assert not assigned.needs_approval(REPROVISION, T0 + timedelta(minutes=9))
    assert assigned.needs_approval(REPROVISION, T0 + timedelta(minutes=10))  # closed at its end


def test_a_request_that_disrupts_nothing_never_waits_for_approval() -> None:
    gentle = dataclasses.replace(REBOOT, approval=False)  # a row that says so
    assert not entity(instance="i-1").needs_approval(gentle, T0)


def test_the_record_says_where_the_operation_is() -> None:
    state = entity(instance="i-1")
    current = asked(state)
    assert (current.record.outcome, current.record.requested_at) == (AWAITING_APPROVAL, T0)
    state.approve("carol", T0)
    state.starting(current)
    assert current.record.outcome == "starting"
    state.started(current, T0 + timedelta(seconds=1))
    assert (current.record.outcome, current.record.started_at) == ("running", T0 + timedelta(seconds=1))
    rebooting = entity(boot_generation=1)
    reboot = asked(rebooting, REBOOT)
    rebooting.started(reboot, T0, workflow_id=f"reboot/{HOST}/generation-3")  # a spent generation skipped
    assert reboot.record.workflow_id == f"reboot/{HOST}/generation-3"


def test_approve_starts_what_awaits_and_opens_the_window_for_that_instance() -> None:
    state = entity(instance="i-1", auto_approval_window_seconds=600.0)
    with pytest.raises(NothingAwaitsApproval, match="nothing awaits approval"):
        state.awaiting_approval()
    held = asked(state)
    assert not held.approved and state.phase() == AWAITING_APPROVAL
    approved = state.approve("carol", T0)
    assert approved is held and held.approved and held.record.approved_by == "carol"
    assert state.auto_approved_until == T0 + timedelta(seconds=600)
    with pytest.raises(NothingAwaitsApproval):  # started: nothing left to approve
        state.approve("carol", T0)


def test_the_operation_awaiting_approval_is_named_until_it_starts_or_is_withdrawn() -> None:
    """Issue 38: `host list` showed OPERATION `-` for a host awaiting approval; the entity names
    the operation (its memo entry `awaiting`) while the request awaits, and nothing otherwise."""
    state = entity(instance="i-1")
    assert state.awaiting_operation() is None  # idle
    asked(state)
    assert state.awaiting_operation() == "reprovision"
    state.approve("carol", T0)
    assert state.awaiting_operation() is None  # started: in flight, its own run says it
    assert entity().awaiting_operation() is None
    unassigned = entity()
    asked(unassigned)  # no instance: starts at once, never awaits
    assert unassigned.awaiting_operation() is None


def test_without_a_window_an_approval_covers_its_request_only() -> None:
    state = entity(instance="i-1")
    asked(state)
    state.approve("carol", T0)
    assert state.auto_approved_until is None


def test_inside_the_window_a_request_starts_at_once_and_says_why() -> None:
    state = entity(instance="i-1")
    state.auto_approved_until = T0 + timedelta(minutes=10)
    current = asked(state)
    assert current.approved
    assert current.record.approved_by == "auto-approval window until 2026-11-27T03:10:00Z"
    unassigned = asked(entity())
    assert unassigned.approved and unassigned.record.approved_by is None  # nothing to approve


def test_a_request_expires_one_approval_timeout_after_it_was_made() -> None:
    state = entity(instance="i-1", policy=OperationPolicy(approval_timeout_seconds=3600.0))
    current = asked(state)
    assert state.approval_wait(current, T0 + timedelta(minutes=15)) == timedelta(minutes=45)
    assert state.approval_wait(current, T0 + timedelta(hours=2)) == timedelta(seconds=1)  # one timer still


def test_the_status_says_when_a_request_awaiting_approval_expires_and_nothing_once_approved() -> None:
    state = entity(instance="i-1", policy=OperationPolicy(approval_timeout_seconds=3600.0))
    assert state.status().approval_expires_at is None  # nothing awaits approval
    asked(state)
    assert state.status().approval_expires_at == T0 + timedelta(hours=1)
    state.approve("bob", T0 + timedelta(minutes=5))
    assert state.status().approval_expires_at is None


def test_withdraw_drops_only_the_named_request_still_awaiting_approval() -> None:
    state = entity(instance="i-1")
    held = asked(state)
    with pytest.raises(NothingAwaitsApproval, match=f"provision/{HOST} does not await approval"):
        state.to_withdraw(WithdrawRequest(requested_by="c", workflow_id=f"provision/{HOST}"))
    assert state.to_withdraw(WithdrawRequest(requested_by="c", workflow_id=held.record.workflow_id)) is held
    state.approve("carol", T0)
    with pytest.raises(OperationStarted, match="abort it instead"):
        state.to_withdraw(WithdrawRequest(requested_by="c", workflow_id=held.record.workflow_id))


def test_host_abort_withdraws_a_request_awaiting_approval_and_aborts_one_in_flight() -> None:
    """Issue 40: `host abort` of a request awaiting approval said "no operation in flight" and
    left the host refusing everything; every pending request can be withdrawn from the CLI."""
    state = entity(instance="i-1")
    assert what_abort_reaches(state.status().current) is None  # idle: nothing to abort
    held = asked(state)
    assert what_abort_reaches(state.status().current) == WITHDRAW_REQUEST
    state.approve("carol", T0)
    state.starting(held)
    # Its child is being started (one workflow task): the CLI waits it out and answers the run
    # (before: None, and `host abort` said "nothing to abort (... is starting)"; a full run saw it).
    assert what_abort_reaches(state.status().current) == WAIT_FOR_START
    state.started(held, T0)
    assert what_abort_reaches(state.status().current) == ABORT_OPERATION


def test_an_approval_of_a_withdrawn_request_is_refused_naming_who_withdrew_it_and_why() -> None:
    """Issue 40: an approval never runs a request whose reason no longer holds without saying so:
    the monitor withdraws its reprovision once the DPU is Ready again, and `approve` says that."""
    state = entity(instance="i-1")
    with pytest.raises(NothingAwaitsApproval) as plain:
        state.awaiting_approval()
    assert plain.value.message == "nothing awaits approval"
    held = asked(state, request=OperationRequest(requested_by="monitor/host-001"))
    why = "d1 is Ready again: the reprovision is no longer needed"
    state.finish(held, f"withdrawn by monitor/host-001: {why}", T0)
    with pytest.raises(NothingAwaitsApproval) as refused:
        state.awaiting_approval()
    assert refused.value.message == (
        f"nothing awaits approval: the last request, reprovision (reprovision/{HOST}) requested by "
        "monitor/host-001, was withdrawn by monitor/host-001: d1 is Ready again: the reprovision is "
        "no longer needed"
    )
    ran = asked(state)
    state.approve("carol", T0)
    state.started(ran, T0)
    state.finish(ran, "completed", T0)
    with pytest.raises(NothingAwaitsApproval) as after_a_run:
        state.awaiting_approval()
    assert after_a_run.value.message == "nothing awaits approval"


MONITORS = OperationRequest(
    requested_by="monitor/host-host-001",
    reason="critical DPU services down for more than 60 s",
    dpu_ids=("d1",),
    campaign_workflow_id="monitor/host-host-001",  # the monitor is told how its request ends
)


def dpf(**phases: str) -> HostDPFState:
    return HostDPFState(
        host_id=HOST,
        dpus=tuple(
            DPUState(name=f"node-{HOST}-device-{d}", uid=d, dpu_id=d, phase=p) for d, p in phases.items()
        ),
    )


def test_only_the_monitors_own_reprovision_is_checked_against_dpf_at_its_approval() -> None:
    """Issue 40: an approval never runs a request whose reason no longer holds. The monitor's
    reason is DPF's state, so an approval re-reads it; a person's reason is theirs."""
    state = entity(instance="i-1")
    assert state.reason_to_check(asked(state, request=MONITORS))
    for person in (
        ALICE,
        OperationRequest(requested_by="monitor/host-host-001", reason="a person typing the monitor's name"),
        OperationRequest(requested_by="bob", campaign="c1", campaign_workflow_id="campaign/c1"),
        OperationRequest(requested_by="x", campaign_workflow_id="monitor/host-host-002"),  # another host's
    ):
        state.current = None
        assert not state.reason_to_check(asked(state, request=person)), person
    state.current = None
    rebooted = asked(state, kind=REBOOT, request=MONITORS)
    assert not state.reason_to_check(rebooted)  # only a reprovision is the monitor's


def test_the_monitors_reason_holds_while_a_dpu_it_named_is_not_ready() -> None:
    state = entity(instance="i-1")
    held = asked(state, request=MONITORS.model_copy(update={"dpu_ids": ("d1", "d2")}))
    for still in (
        {"d1": "Node Effect", "d2": "Ready"},
        {"d1": "Ready", "d2": "Error"},
        {"d1": "Ready"} | {"d2": ""},
    ):
        assert state.reason_gone(held, dpf(**still)) is None, still
    assert state.reason_gone(held, dpf(d1="Ready", d2="Ready", d3="Node Effect")) == (
        "its reason (critical DPU services down for more than 60 s) no longer holds: "
        "DPF says d1 is Ready, d2 is Ready now"
    )
    assert state.reason_gone(held, dpf(d1="Ready")) == (
        "its reason (critical DPU services down for more than 60 s) no longer holds: "
        "DPF says d1 is Ready, d2 is gone now"
    )


def test_an_approval_that_finds_the_reason_gone_withdraws_the_request_and_says_why() -> None:
    state = entity(instance="i-1")
    held = asked(state, request=MONITORS)
    why = state.reason_gone(held, dpf(d1="Ready"))
    assert why is not None
    refusal = state.refuse_stale_approval(held, why)
    state.finish(held, state.withdrawn_at_approval("carol", why), T0)
    assert isinstance(refusal, ReasonNoLongerHolds)
    assert refusal.message == (
        f"reprovision of {HOST} (reprovision/{HOST}, requested by monitor/host-host-001) not approved: "
        f"{why}; the request is withdrawn, nothing started"
    )
    assert state.current is None and state.phase() == IDLE
    assert state.recent[-1].outcome == f"withdrawn at its approval by carol: {why}"
    with pytest.raises(NothingAwaitsApproval, match="was withdrawn at its approval by carol: its reason"):
        state.awaiting_approval()  # a second approve says what happened to it


def ran(state: HostEntityState, kind: Any, request: Any, outcome: str = "completed") -> None:
    """A request accepted, started and ended with `outcome`."""
    current = asked(state, kind, request)
    state.started(current, T0)
    state.finish(current, outcome, T0)


def test_no_reprovision_is_accepted_of_a_dpu_its_removal_took_out_of_dpf_whoever_asks() -> None:
    """Issue 40 item 3: after `host remove --dpus` of a DPU, the monitor's reprovision of it was
    accepted by the entity (the CLI refuses it) and waited for a hold that never came."""
    state = entity()
    d0, d1 = f"{HOST}-dpu-0", f"{HOST}-dpu-1"
    ran(state, REMOVAL, OperationRequest(requested_by="a", dpu_ids=(d1,)), outcome="failed: DPF never let go")
    state.refuse_request(REPROVISION, OperationRequest(requested_by="m", dpu_ids=(d1,)))  # not removed
    ran(state, REMOVAL, OperationRequest(requested_by="alice", dpu_ids=(d1,)))
    monitor = OperationRequest(requested_by="monitor/host-host-001", dpu_ids=(d1,))
    with pytest.raises(DPUsRemoved) as refused:
        state.refuse_request(REPROVISION, monitor)
    assert refused.value.message == (
        f"host {HOST}: DPF no longer has {d1} (removed by remove/{HOST}); reprovision refused "
        f"(bring it back with: metalflow host provision {HOST} --dpus {d1})"
    )
    assert refused.value.details == ({"dpu_ids": [d1]},)
    with pytest.raises(DPUsRemoved, match=f"no longer has {d1} "):  # every DPU: the removed one too
        state.refuse_request(REPROVISION, OperationRequest(requested_by="script"))
    state.refuse_request(REPROVISION, OperationRequest(requested_by="m", dpu_ids=(d0,)))  # still in DPF
    for other in (REBOOT, PROVISION, REMOVAL):
        state.refuse_request(other, monitor)
    carried = HostEntityState.of(HostWorkflowInput(host_id=HOST, state=state))  # continue-as-new
    with pytest.raises(DPUsRemoved):
        carried.refuse_request(REPROVISION, monitor)
    ran(state, PROVISION, OperationRequest(requested_by="alice", dpu_ids=(d1,)))  # back in DPF
    state.refuse_request(REPROVISION, monitor)
    ran(state, REMOVAL, OperationRequest(requested_by="alice"))  # the whole DPU node
    with pytest.raises(DPUsRemoved, match=f"DPF no longer has the DPU node of {HOST} "):
        state.refuse_request(REPROVISION, OperationRequest(requested_by="m", dpu_ids=(d0,)))
    ran(state, PROVISION, OperationRequest(requested_by="alice"))
    assert state.removed_from_dpf == {}


def test_no_reset_is_accepted_of_a_dpu_its_removal_took_out_of_dpf() -> None:
    """Task B of issue 40: `host reset HOST --dpu D` of a DPU removed with `host remove --dpus` was
    accepted and completed (a reprovision of it is refused); now refused alike, naming it."""
    state = entity()
    d0, d1 = f"{HOST}-dpu-0", f"{HOST}-dpu-1"
    ran(state, REMOVAL, OperationRequest(requested_by="alice", dpu_ids=(d1,)))
    with pytest.raises(DPUsRemoved) as refused:
        state.refuse_request(
            RESET, ResetRequest(requested_by="bob", target=ResetTarget.DPU, dpu_ids=(d0, d1))
        )
    assert refused.value.message == (
        f"host {HOST}: DPF no longer has {d1} (removed by remove/{HOST}); reset refused "
        f"(bring it back with: metalflow host provision {HOST} --dpus {d1})"
    )
    state.refuse_request(RESET, ResetRequest(requested_by="bob", target=ResetTarget.DPU, dpu_ids=(d0,)))
    state.refuse_request(RESET, ResetRequest(requested_by="bob", target=ResetTarget.HOST))
    ran(state, REMOVAL, OperationRequest(requested_by="alice"))  # the whole DPU node
    with pytest.raises(DPUsRemoved, match=f"DPF no longer has the DPU node of {HOST} "):
        state.refuse_request(RESET, ResetRequest(requested_by="bob", target=ResetTarget.DPU, dpu_ids=(d0,)))


def test_a_reset_of_every_dpu_leaves_out_those_dpf_no_longer_has() -> None:
    """L8 of issue 40's last attack: `host reset HOST --all-dpus` after `host remove HOST --dpus D`
    sent ForceRestart to D through its BMC. Every DPU now means the DPUs DPF still has: the reset
    run is handed the removed ones to leave out, the entity's answer says so, and with the whole
    node removed (none left) the request is refused."""
    state = entity()
    d1 = f"{HOST}-dpu-1"
    every = ResetRequest(requested_by="bob", target=ResetTarget.ALL_DPUS)
    assert state.left_out(every) == {} and state.left_out_said(every) == ""
    ran(state, REMOVAL, OperationRequest(requested_by="alice", dpu_ids=(d1,)))
    for target in (ResetTarget.ALL_DPUS, ResetTarget.BOTH):
        request = ResetRequest(requested_by="bob", target=target)
        current = asked(state, RESET, request)
        child = state.child_input(current)
        assert isinstance(child, HostResetInput) and child.left_out == {d1: f"remove/{HOST}"}
        assert state.left_out_said(request) == (
            f"; left out {d1}: DPF no longer has it (removed by remove/{HOST})"
        )
        state.started(current, T0)
        state.finish(current, "completed", T0)
    host_only = asked(state, RESET, ResetRequest(requested_by="bob", target=ResetTarget.HOST))
    assert state.left_out_said(host_only.request) == ""
    child = state.child_input(host_only)
    assert isinstance(child, HostResetInput) and child.left_out == {}
    state.started(host_only, T0)
    state.finish(host_only, "completed", T0)
    ran(state, REMOVAL, OperationRequest(requested_by="alice"))  # the whole DPU node: none is left
    for target in (ResetTarget.ALL_DPUS, ResetTarget.BOTH):
        with pytest.raises(DPUsRemoved) as refused:
            state.refuse_request(RESET, ResetRequest(requested_by="bob", target=target))
        assert refused.value.message == (
            f"host {HOST}: DPF no longer has the DPU node of {HOST} (removed by remove/{HOST}); reset "
            f"refused (bring it back with: metalflow host provision {HOST})"
        )
    state.refuse_request(RESET, ResetRequest(requested_by="bob", target=ResetTarget.HOST))
    ran(state, PROVISION, OperationRequest(requested_by="alice"))  # all back in DPF
    assert state.left_out(every) == {}


def test_a_removal_aborted_after_its_first_delete_counts_its_dpus_as_removed() -> None:
    """A removal takes `host abort` in every phase (issue 40); aborted once a delete was sent, DPF
    finishes the delete, so the DPU is as removed as after a completed removal. Aborted before
    any delete, nothing is removed."""
    state = entity()
    d1 = f"{HOST}-dpu-1"
    removal = OperationRequest(requested_by="alice", dpu_ids=(d1,))
    current = asked(state, REMOVAL, removal)
    state.started(current, T0)
    state.finish(current, "aborted by bob: debugging; nothing deleted", T0)
    state.refuse_request(REPROVISION, OperationRequest(requested_by="m", dpu_ids=(d1,)))
    current = asked(state, REMOVAL, removal)
    state.started(current, T0)
    state.finish(
        current, "aborted by bob: debugging; the deletes sent cannot be taken back", T0, deletes_sent=True
    )
    with pytest.raises(DPUsRemoved, match=f"DPF no longer has {d1} "):
        state.refuse_request(REPROVISION, OperationRequest(requested_by="m", dpu_ids=(d1,)))


# -- the instance ---------------------------------------------------------------------------------


def test_an_instance_is_taken_only_by_an_idle_host_holding_no_other() -> None:
    state = entity()
    asked(state)
    with pytest.raises(HostBusy, match="cannot take instance i-1: reprovision is in flight"):
        state.refuse_assignment(AssignInstanceRequest(instance="i-1", requested_by="tenant"))
    held = entity(instance="i-1")
    held.refuse_assignment(AssignInstanceRequest(instance="i-1", requested_by="tenant"))  # the same: fine
    with pytest.raises(InstanceConflict, match="assigned to instance i-1; release it first"):
        held.refuse_assignment(AssignInstanceRequest(instance="i-2", requested_by="tenant"))


def test_a_new_instance_is_not_covered_by_the_previous_ones_window() -> None:
    state = entity()
    assert state.assign("i-1") is True
    state.auto_approved_until = T0 + timedelta(hours=1)
    assert state.assign("i-1") is False and state.auto_approved_until is not None  # already: unchanged
    with pytest.raises(InstanceConflict, match="holds i-1, not i-2"):
        state.refuse_release(AssignInstanceRequest(instance="i-2", requested_by="tenant"))
    state.refuse_release(AssignInstanceRequest(instance="i-1", requested_by="tenant"))
    state.release()
    assert state.instance is None and state.auto_approved_until is None
    state.auto_approved_until = T0 + timedelta(hours=1)
    state.assign("i-2")
    assert state.auto_approved_until is None


# -- the child --------------------------------------------------------------------------------------


def test_a_reboot_is_keyed_by_the_next_generation_the_others_by_the_host() -> None:
    state = entity(boot_generation=4)
    assert state.child_id(REBOOT) == f"reboot/{HOST}/generation-5"
    assert state.child_id(REPROVISION) == f"reprovision/{HOST}"
    assert state.child_id(RESET) == f"reset/{HOST}"


def child_of(kind: Any, request: Any) -> Any:
    state = entity(boot_generation=2, policy=HOST_POLICY)
    return state.child_input(asked(state, kind, request))


HOST_POLICY = OperationPolicy(power_down_wait_seconds=7.0)


def test_each_request_gives_its_child_the_input_it_takes() -> None:
    own = OperationPolicy(power_down_wait_seconds=1.0)
    provision = child_of(PROVISION, OperationRequest(requested_by="a", dpu_ids=("d0",)))
    assert type(provision) is HostOperationInput and provision.kind == "provision"
    assert (provision.dpu_ids, provision.boot_generation, provision.policy) == (("d0",), 2, HOST_POLICY)
    reboot = child_of(REBOOT, OperationRequest(requested_by="a", policy=own))
    assert type(reboot) is HostRebootInput and reboot.boot_generation == 3 and reboot.policy == own
    removal = child_of(REMOVAL, OperationRequest(requested_by="a", force=True))
    assert type(removal) is HostRemovalInput and removal.force and removal.policy == HOST_POLICY
    firmware = child_of(
        FIRMWARE, FirmwareRequest(requested_by="a", target_version="1", image_uri="https://x/f")
    )
    assert (
        type(firmware) is FirmwareInput and firmware.target_version == "1" and firmware.boot_generation == 2
    )
    reset = child_of(RESET, ResetRequest(requested_by="a", target=ResetTarget.ALL_DPUS, full=True))
    assert type(reset) is HostResetInput and reset.dpu_ids == () and reset.full and reset.boot_generation == 2
    named = child_of(RESET, ResetRequest(requested_by="a", target=ResetTarget.DPU, dpu_ids=("d1",)))
    assert named.dpu_ids == ("d1",) and named.target == ResetTarget.DPU and not named.full
    assert named.policy == HOST_POLICY  # a reset that names no policy: the host's
    host = child_of(RESET, ResetRequest(requested_by="a", target=ResetTarget.HOST, policy=own))
    assert type(host) is HostResetInput and host.policy == own  # `--host --power-down-wait`
    state = entity()
    with pytest.raises(InvalidInput, match="applies to the host target only"):  # changing nothing
        asked(state, RESET, ResetRequest(requested_by="a", target=ResetTarget.ALL_DPUS, policy=own))
    assert state.current is None


def test_the_site_checks_words_reach_every_checked_operations_child_and_the_start_event() -> None:
    """Issue 36 deliver 4: a request started under the kept site check's degraded verdict hands the
    words to its child's input (its status and phases say them) and the entity's running details
    (its `OperationStarted` Event) end with them; a removal, which the check does not judge, takes none."""
    words = ("reboot is degraded on host-001 by the site check of 2026-11-29T10:00:00Z: slower",)
    requests = {
        PROVISION: OperationRequest(requested_by="a", site_check=words),
        REBOOT: OperationRequest(requested_by="a", site_check=words),
        FIRMWARE: FirmwareRequest(
            requested_by="a", target_version="1", image_uri="https://x/f", site_check=words
        ),
        RESET: ResetRequest(requested_by="a", target=ResetTarget.HOST, site_check=words),
    }
    for kind, request in requests.items():
        assert child_of(kind, request).site_check == words, kind
        state = entity()
        asked(state, kind, request)
        assert state.details().endswith(f"; site check: {words[0]}"), kind
    assert not hasattr(child_of(REMOVAL, OperationRequest(requested_by="a")), "site_check")
    plain = entity()
    asked(plain, PROVISION, ALICE)
    assert "site check" not in plain.details() and child_of(PROVISION, ALICE).site_check == ()


def test_the_boot_generation_only_moves_forward() -> None:
    state = entity(boot_generation=3)
    state.reached(None)
    state.reached(2)  # a failed operation that reports an older generation
    assert state.boot_generation == 3
    state.reached(5)
    assert state.boot_generation == 5


def ended(cause: BaseException) -> ChildWorkflowError:
    err = ChildWorkflowError(
        "child ended",
        namespace="default",
        workflow_id=f"reprovision/{HOST}",
        run_id="r",
        workflow_type="HostOperationWorkflow",
        initiated_event_id=5,
        started_event_id=6,
        retry_state=None,
    )
    err.__cause__ = cause
    return err


def test_how_a_child_ended_in_the_entitys_words() -> None:
    # Task B3: a cancel in Temporal is no operator's abort (before: "aborted", read as one).
    assert outcome_of(ended(CancelledError())) == CANCELLED_OUTCOME
    assert CANCELLED_OUTCOME.startswith("cancelled") and "no operator's abort" in CANCELLED_OUTCOME
    assert outcome_of(ended(TerminatedError("by hand"))) == "terminated"
    abort = OperationAborted("aborted by carol: maintenance")
    assert outcome_of(ended(abort)) == "aborted by carol: maintenance"  # an operator's abort: no failure
    failure = ApplicationError("DPU d0 in Error", type="DPUFailed")
    assert outcome_of(ended(failure)) == "failed: DPUFailed: DPU d0 in Error"


def test_a_failed_operation_reports_the_generation_it_reached() -> None:
    reached = ApplicationError("BMC refused", {"boot_generation": 4}, type="BMCRebootFailed")
    assert generation_reported(ended(reached)) == 4
    assert generation_reported(ended(ApplicationError("x", {"other": 1}))) is None
    assert generation_reported(ended(TerminatedError("by hand"))) is None


# -- what is recorded and shown ---------------------------------------------------------------------


def test_an_ended_operation_is_recorded_and_the_host_is_idle_again() -> None:
    state = entity()
    for n in range(RECENT_LIMIT + 3):
        current = asked(state)
        state.started(current, T0)
        state.finish(current, f"failed: {n}", T0 + timedelta(minutes=n))
    assert state.current is None and state.phase() == IDLE
    assert len(state.recent) == RECENT_LIMIT and state.recent[-1].outcome == f"failed: {RECENT_LIMIT + 2}"
    assert state.recent[-1].finished_at == T0 + timedelta(minutes=RECENT_LIMIT + 2)


def test_a_child_that_could_not_start_leaves_no_record() -> None:
    state = entity()
    asked(state)
    state.drop()
    assert state.current is None and state.recent == []


def test_the_phase_and_details_say_what_the_entity_does() -> None:
    state = entity(instance="i-1", boot_generation=2)
    assert (state.phase(), state.details()) == (IDLE, "instance i-1; boot generation 2")
    current = asked(state)
    assert state.phase() == AWAITING_APPROVAL
    assert state.details() == f"reprovision (reprovision/{HOST}) requested by alice; instance i-1"
    state.approve("carol", T0)
    state.started(current, T0)
    assert state.phase() == "running reprovision" and state.status().current == current.record
    state.finish(current, "completed", T0)
    assert state.details() == "instance i-1; boot generation 2; last: reprovision completed"


def test_phase_since_moves_with_the_phase_only() -> None:
    state = entity()
    assert state.show(IDLE, T0) == T0
    assert state.show(IDLE, T0 + timedelta(minutes=5)) == T0  # the same phase shown again
    assert state.show("running reboot", T0 + timedelta(minutes=6)) == T0 + timedelta(minutes=6)


def test_the_status_is_the_entitys_view() -> None:
    state = entity(instance="i-1", site="lab")
    current = asked(state)
    status = state.status()
    assert (status.host_id, status.site, status.instance, status.phase) == (
        HOST,
        "lab",
        "i-1",
        AWAITING_APPROVAL,
    )
    assert status.current == current.record and status.recent == ()


# -- continue-as-new carries the state whole --------------------------------------------------------


def test_a_new_entity_starts_from_its_start_a_continued_one_from_the_state_it_carries() -> None:
    fresh = entity(instance="i-1", boot_generation=3)
    assert (fresh.instance, fresh.boot_generation, fresh.phase_since) == ("i-1", 3, None)
    current = asked(fresh)
    fresh.approve("carol", T0)
    fresh.finish(current, "completed", T0)
    fresh.show(IDLE, T0)
    start = HostWorkflowInput(host_id=HOST, instance="ignored", boot_generation=0)
    continued = HostEntityState.of(start.model_copy(update={"state": fresh}))
    assert continued.model_dump() == fresh.model_dump() and continued.host_id == HOST


def test_the_carried_state_is_serialized_as_its_contract_and_read_back_with_no_warning() -> None:
    state = entity(instance="i-1")
    asked(state, RESET, ResetRequest(requested_by="a", target=ResetTarget.DPU, dpu_ids=("d0",), full=True))
    start = HostWorkflowInput(host_id=HOST).model_copy(update={"state": state})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pydantic warns when it serializes a value not of its field's type
        [payload] = DATA_CONVERTER.payload_converter.to_payloads([start])
        [back] = DATA_CONVERTER.payload_converter.from_payloads([payload], [HostWorkflowInput])
    assert isinstance(back, HostWorkflowInput) and type(back.state) is HostEntityMemory
    assert back.state.model_dump() == HostEntityMemory.model_validate(state.model_dump()).model_dump()
    assert back.state.current is not None and isinstance(back.state.current.request, ResetRequest)


# -- the safety rules, over any sequence of requests, approvals and assignments ----------------------


EXAMPLES: dict[type, Any] = {  # a request of each payload model the rows name
    OperationRequest: OperationRequest(requested_by="a"),
    FirmwareRequest: FirmwareRequest(requested_by="a", target_version="1", image_uri="https://x/f"),
    ResetRequest: ResetRequest(requested_by="a", target=ResetTarget.HOST),
}


class EntityRules(RuleBasedStateMachine):
    """The entity's handlers as they call the state; invariants checked after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.state = entity(auto_approval_window_seconds=600.0)
        self.now = T0
        self.generation = 0
        self.approved_for: str | None = None  # the instance of the last explicit approval

    @rule(
        kind=st.sampled_from(ENTITY_REQUESTS),
        skip_assigned=st.booleans(),
        dpus=st.sampled_from([None, (f"{HOST}-dpu-0",), (f"{HOST}-dpu-1",)]),
        aim=st.sampled_from(list(ResetTarget)),
    )
    def request(self, kind: Any, skip_assigned: bool, dpus: Any, aim: ResetTarget) -> None:
        before = self.state.current
        assert kind.request in EXAMPLES, f"add an example {kind.request.__name__} to EXAMPLES"
        update: dict[str, Any] = {"refuse_if_assigned": skip_assigned}
        if kind.request in (OperationRequest, ResetRequest):  # removals of some DPUs, or of the node
            update["dpu_ids"] = dpus
        if kind.request is ResetRequest:
            update["target"] = aim
        request = EXAMPLES[kind.request].model_copy(update=update)
        try:
            current = asked(self.state, kind, request, self.now)
        except (HostBusy, InstanceConflict, DPUsRemoved) as refused:
            assert self.state.current is before  # a refusal changes nothing
            assert not isinstance(refused, DPUsRemoved) or kind in (REPROVISION, RESET)
            return
        assert before is None, "a second operation was accepted"
        removed = self.state.removed_from_dpf
        if kind is REPROVISION:  # never of a DPU a completed removal took out of DPF
            named = request.dpu_ids or tuple(removed)
            assert "" not in removed and not any(d in removed for d in named), (request, removed)
        if kind is RESET and request.target == ResetTarget.DPU:  # nor a reset naming one
            named = request.dpu_ids or tuple(removed)
            assert "" not in removed and not any(d in removed for d in named), (request, removed)
        if kind is RESET and request.target in (ResetTarget.ALL_DPUS, ResetTarget.BOTH):
            # every DPU: those DPF still has; the removed ones handed to the run to leave out
            child = self.state.child_input(current)
            assert isinstance(child, HostResetInput), child
            assert "" not in removed and child.left_out == removed, (request, removed)
        assert not (skip_assigned and self.state.instance is not None), "an assigned host was not skipped"
        if kind.approval and current.approved and self.state.instance is not None:
            # A disruptive request started at once on an assigned host: only inside the window an
            # approval for this very instance opened.
            assert (current.record.approved_by or "").startswith("auto-approval window"), current.record
            assert self.approved_for == self.state.instance

    @rule()
    def approve(self) -> None:
        try:
            self.state.approve("carol", self.now)
        except NothingAwaitsApproval:
            return
        self.approved_for = self.state.instance

    @rule()
    def withdraw(self) -> None:
        current = self.state.current
        if current is None:
            return
        try:
            self.state.to_withdraw(WithdrawRequest(requested_by="c", workflow_id=current.record.workflow_id))
        except OperationStarted:
            return
        self.state.finish(current, "withdrawn", self.now)

    @rule(instance=st.sampled_from(["i-1", "i-2"]))
    def assign(self, instance: str) -> None:
        try:
            self.state.refuse_assignment(AssignInstanceRequest(instance=instance, requested_by="t"))
        except (HostBusy, InstanceConflict):
            return
        assert self.state.current is None, "an instance was taken while an operation holds the host"
        self.state.assign(instance)

    @rule()
    def release(self) -> None:
        if self.state.instance is not None:
            self.state.refuse_release(AssignInstanceRequest(instance=self.state.instance, requested_by="t"))
            self.state.release()

    @precondition(lambda self: self.state.current is not None and self.state.current.approved)
    @rule(reported=st.one_of(st.none(), st.integers(min_value=0, max_value=8)))
    def operation_ends(self, reported: int | None) -> None:
        """The child ends, reporting a boot generation (an older one too: a failed operation's)."""
        current = self.state.current
        assert current is not None
        self.state.started(current, self.now)
        self.state.reached(reported)
        self.state.finish(current, "completed", self.now)
        assert self.state.current is None and self.state.recent[-1].workflow_id == current.record.workflow_id

    @precondition(lambda self: self.state.current is None)
    @rule(dpus=st.sampled_from([None, (f"{HOST}-dpu-0",), (f"{HOST}-dpu-1",)]))
    def a_removal_completes(self, dpus: tuple[str, ...] | None) -> None:
        """`host remove` of some DPUs (or the node) run to its end: what the DPF rules act on,
        more often than a removal drawn among every request reaches it."""
        removal = OperationRequest(requested_by="alice", dpu_ids=dpus)
        current = asked(self.state, REMOVAL, removal, self.now)
        if not current.approved:
            self.state.approve("carol", self.now)
            self.approved_for = self.state.instance
        self.state.started(current, self.now)
        self.state.finish(current, "completed", self.now)
        assert all(d in self.state.removed_from_dpf for d in dpus or ("",))

    @rule(minutes=st.integers(min_value=1, max_value=20))
    def time_passes(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)

    @invariant()
    def an_assigned_hosts_operation_runs_only_approved(self) -> None:
        current = self.state.current
        if current is not None and current.approved and self.state.instance is not None:
            assert current.record.approved_by is not None, current.record

    @invariant()
    def records_are_bounded_and_generations_only_grow(self) -> None:
        assert len(self.state.recent) <= RECENT_LIMIT
        assert self.state.boot_generation >= self.generation
        self.generation = self.state.boot_generation

    @invariant()
    def the_phase_names_the_one_operation(self) -> None:
        current = self.state.current
        expected = IDLE if current is None else AWAITING_APPROVAL if not current.approved else None
        assert self.state.phase() == (expected or f"running {current.record.operation}")  # type: ignore[union-attr]


EntityRules.TestCase.settings = settings(
    max_examples=40, stateful_step_count=60, deadline=None, database=None
)
test_the_entitys_safety_rules_hold_over_any_sequence = EntityRules.TestCase


# -- a host its last run left OFF (`host list`'s mark, `host status`'s warning) -------------------


def _left_off_by_a_reset(state: HostEntityState) -> None:
    first = asked(state, RESET, ResetRequest(requested_by="alice", target=ResetTarget.HOST))
    state.started(first, T0)
    state.finish(first, f"aborted by bob: ...; the host {HOST} is OFF: metalflow turned it off", T0)


def test_an_idle_host_its_last_run_left_off_is_marked_until_a_run_powers_it_on() -> None:
    """`left_off()` (the memo `host list` reads, the `status` query's `left_off_by`) names the
    run whose outcome says the host is OFF while the host is idle; not while another runs, and
    no longer once a later run reached a boot generation (the host booted: it was On)."""
    state = entity()
    assert state.left_off() is None and state.status().left_off_by == ""
    _left_off_by_a_reset(state)
    assert state.left_off() == f"reset/{HOST}" and state.status().left_off_by == f"reset/{HOST}"
    request = ResetRequest(requested_by="alice", target=ResetTarget.HOST)
    second = asked(state, RESET, request, T0 + timedelta(minutes=1))
    assert state.left_off() is None  # an operation runs: its own status speaks
    state.started(second, T0 + timedelta(minutes=1))
    state.reached(state.boot_generation + 1)
    state.finish(second, "completed", T0 + timedelta(minutes=2))
    assert state.left_off() is None and state.status().left_off_by == ""


@pytest.mark.parametrize(
    ("outcome", "cleared"),
    [
        ("aborted by alice: ... Done: nothing was reset; host power not touched by this run", False),
        ("completed", False),  # a reset of DPUs only: no boot generation, no word on the host
        ("failed: BMC h-dpu-0: 401. Done: nothing was reset; host power not touched by this run", False),
        ("aborted by alice: ... Done: host host-001: generation 1 by ForceOff+On; the host is on", True),
    ],
)
def test_only_a_run_that_says_the_host_is_on_clears_the_mark(outcome: str, cleared: bool) -> None:
    """issue 40: an aborted `host reset --dpu` (it never touches the host's power) wiped the
    mark of a host an earlier run left OFF: the BMC still said Off, `host list` said `idle`."""
    state = entity()
    _left_off_by_a_reset(state)
    dpu_only = ResetRequest(requested_by="alice", target=ResetTarget.DPU, dpu_ids=(f"{HOST}-dpu-0",))
    later = asked(state, RESET, dpu_only)
    state.started(later, T0 + timedelta(minutes=1))
    state.reached(state.boot_generation)  # no new generation
    state.finish(later, outcome, T0 + timedelta(minutes=2))
    assert state.left_off() == (None if cleared else f"reset/{HOST}")
    revived = HostEntityState.model_validate(state.model_dump())  # continue-as-new carries it
    assert revived.left_off_by == ("" if cleared else f"reset/{HOST}")


def test_a_reboot_started_under_a_degraded_site_check_says_its_words_in_host_status_json() -> None:
    """Issue 36 (low findings item 3): a degraded `host reboot` showed no `site_check` in `host
    status --json` (a reboot has no `status` query of its own; reset, reprovision and firmware
    say it in theirs). The entity's status carries its current request's words, and the JSON of
    an operation read without a status (`seen_json`) says them; idle, none."""
    from metalflow.cli.host_status import render_status, seen_json
    from metalflow.seen import Seen

    words = ("reboot is degraded on host-001 by the site check of 2026-11-29T07:00:00Z: no PowerCycle",)
    state = entity()
    assert state.status().site_check == ()
    asked(state, REBOOT, OperationRequest(requested_by="alice", site_check=words))
    status = state.status()
    assert status.site_check == words
    seen = Seen("powering-off", "", phase="powering-off", details="ForceOff of host-001")
    assert seen_json(seen, status) == {
        "phase": "powering-off", "waiting_for": "", "details": "ForceOff of host-001",
        "site_check": list(words),
    }  # fmt: skip
    assert f"    site check     {words[0]}" in render_status(status, None, seen=seen).splitlines()
    assert seen_json(seen, entity().status())["site_check"] == []
