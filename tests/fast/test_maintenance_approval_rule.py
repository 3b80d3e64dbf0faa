"""An `approve` on a host in maintenance (issue 39): a request that awaited approval since before
`host maintenance on` starts only when it or its approval says `in_maintenance` (`metalflow approve
--in-maintenance`), the one rule of every disruptive request (`maintenance_refusal`, through
`approved_in_maintenance`); an approval that says it is recorded with the operation (its history,
its start's Event). Pure: the entity's state, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from contracts.errors import InMaintenance
from contracts.host_requests import REBOOT, REPROVISION
from contracts.models.host import ApproveRequest, HostWorkflowInput, MaintenanceRequest, OperationRequest
from workflows.host.maintenance_rules import leaves_running
from workflows.host.state import HostEntityState, maintenance_words

T0 = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
HOST = "host-001"
ON = MaintenanceRequest(on=True, requested_by="alice", reason="replacing a fan")


def awaiting(in_maintenance: bool = False, maintenance_first: bool = False) -> HostEntityState:
    """An assigned host with a reboot awaiting approval, then in maintenance (or before it)."""
    state = HostEntityState.of(HostWorkflowInput(host_id=HOST))
    state.assign("instance-1")
    if maintenance_first:
        state.set_maintenance(ON, T0)
    request = OperationRequest(requested_by="carol", in_maintenance=in_maintenance)
    state.refuse_request(REBOOT, request)
    state.record_request(REBOOT, request, T0 + timedelta(minutes=1))
    assert state.needs_approval(REBOOT, T0)
    if not maintenance_first:
        state.set_maintenance(ON, T0 + timedelta(minutes=2))
        assert f"its approval needs: metalflow approve {HOST} --in-maintenance" in str(
            leaves_running(state.host_id, state.current)
        )
    return state


def test_approving_a_request_made_before_the_maintenance_is_refused_naming_it() -> None:
    state = awaiting()
    with pytest.raises(InMaintenance) as refused:
        state.awaiting_approval(ApproveRequest(requested_by="dave"))  # the validator's question
    with pytest.raises(InMaintenance) as again:
        state.approve("dave", T0 + timedelta(minutes=3))
    message = str(refused.value)
    assert message == str(again.value)
    assert "in maintenance since 2026-11-29T06:02:00Z, set by alice: replacing a fan" in message
    assert f"approval of reboot ({state.current.record.workflow_id}) refused" in message  # type: ignore[union-attr]
    assert f"metalflow approve {HOST} --in-maintenance" in message
    assert state.current is not None and not state.current.approved  # nothing changed
    assert state.current.record.approved_by is None and state.current.record.in_maintenance == ""


def test_approving_in_maintenance_starts_it_and_records_the_maintenance() -> None:
    state = awaiting()
    current = state.approve("dave", T0 + timedelta(minutes=3), in_maintenance=True)
    assert current.approved and current.record.approved_by == "dave"
    assert current.record.in_maintenance == maintenance_words(state.maintenance)  # type: ignore[arg-type]
    assert "asked with --in-maintenance while in maintenance since" in state.details()


def test_a_request_that_said_in_maintenance_needs_no_flag_again_at_its_approval() -> None:
    state = awaiting(in_maintenance=True, maintenance_first=True)
    current = state.approve("dave", T0 + timedelta(minutes=3))
    assert current.approved and current.record.in_maintenance.startswith("in maintenance since")


def test_without_maintenance_an_approval_is_as_before_and_records_nothing() -> None:
    state = HostEntityState.of(HostWorkflowInput(host_id=HOST))
    state.assign("instance-1")
    state.record_request(REPROVISION, OperationRequest(requested_by="carol"), T0)
    current = state.approve("dave", T0, in_maintenance=True)
    assert current.approved and current.record.in_maintenance == ""
