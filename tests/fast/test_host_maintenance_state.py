"""Maintenance mode's decisions in the host entity (`workflows/host/state.py`), without a server:
may a request start on a host in maintenance (`maintenance_refusal`, asked by `refuse_request`),
what `set_maintenance` records and answers, and what the entity shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.errors import HostBusy, InMaintenance, InvalidInput
from contracts.events import PhaseChange
from contracts.host_requests import ENTITY_REQUESTS, REBOOT, REPROVISION
from contracts.models.host import (
    FirmwareRequest,
    HostWorkflowInput,
    MaintenanceRequest,
    OperationRequest,
    ResetRequest,
    ResetTarget,
)
from metalflow.runtime.events import describe
from workflows.host.maintenance_rules import leaves_running
from workflows.host.state import HostEntityState, maintenance_refusal, maintenance_words

T0 = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
HOST = "host-001"
ON = MaintenanceRequest(on=True, requested_by="alice", reason="replacing a fan")
OFF = MaintenanceRequest(on=False, requested_by="bob")


def entity() -> HostEntityState:
    return HostEntityState.of(HostWorkflowInput(host_id=HOST))


def request_of(kind: Any, **changes: Any) -> Any:
    if kind.request is FirmwareRequest:
        return FirmwareRequest(requested_by="carol", target_version="1", image_uri="https://x/f", **changes)
    if kind.request is ResetRequest:
        return ResetRequest(requested_by="carol", target=ResetTarget.HOST, **changes)
    return OperationRequest(requested_by="carol", **changes)


@pytest.mark.parametrize("kind", ENTITY_REQUESTS, ids=lambda k: k.operation)
def test_every_operation_request_is_refused_in_maintenance_naming_it(kind: Any) -> None:
    state = entity()
    state.set_maintenance(ON, T0)
    with pytest.raises(InMaintenance) as refused:
        state.refuse_request(kind, request_of(kind))
    message = str(refused.value)
    assert "in maintenance since 2026-11-29T06:00:00Z, set by alice: replacing a fan" in message
    assert f"{kind.operation} refused" in message
    assert f"metalflow host {kind.command} {HOST} --in-maintenance" in message
    assert state.current is None  # nothing recorded


@pytest.mark.parametrize("kind", ENTITY_REQUESTS, ids=lambda k: k.operation)
def test_an_operators_in_maintenance_request_starts_and_records_the_maintenance(kind: Any) -> None:
    state = entity()
    state.set_maintenance(ON, T0)
    request = request_of(kind, in_maintenance=True)
    state.refuse_request(kind, request)  # no refusal
    current = state.record_request(kind, request, T0 + timedelta(minutes=1))
    assert current.record.in_maintenance == maintenance_words(state.maintenance)  # type: ignore[arg-type]
    assert "asked with --in-maintenance while in maintenance since" in state.details()


def test_not_in_maintenance_every_request_may_start_and_records_nothing() -> None:
    for kind in ENTITY_REQUESTS:
        assert maintenance_refusal(HOST, None, kind, in_maintenance=False) is None
    state = entity()
    request = OperationRequest(requested_by="carol", in_maintenance=True)
    assert state.record_request(REBOOT, request, T0).record.in_maintenance == ""


def test_the_monitors_and_a_campaigns_requests_are_refused_they_never_say_in_maintenance() -> None:
    state = entity()
    state.set_maintenance(ON, T0)
    monitor = OperationRequest(
        requested_by="monitor/host-host-001", campaign_workflow_id="monitor/host-host-001"
    )
    campaign = OperationRequest(
        requested_by="campaign c (dave)", campaign="c", campaign_workflow_id="campaign/c"
    )
    for request in (monitor, campaign):
        with pytest.raises(InMaintenance, match="set by alice"):
            state.refuse_request(REPROVISION, request)


def test_busy_is_said_first_one_operation_at_a_time_still_holds() -> None:
    state = entity()
    running = OperationRequest(requested_by="carol")
    state.record_request(REBOOT, running, T0)
    state.set_maintenance(ON, T0)
    with pytest.raises(HostBusy):
        state.refuse_request(REPROVISION, OperationRequest(requested_by="carol", in_maintenance=True))


def test_maintenance_on_records_who_why_since_and_shows_it() -> None:
    state = entity()
    words = state.set_maintenance(ON, T0)
    assert words == "in maintenance since 2026-11-29T06:00:00Z, set by alice: replacing a fan"
    assert state.status().maintenance == state.maintenance
    assert state.maintenance is not None and state.maintenance.since == T0
    assert state.details().endswith(f"; {words}")
    # Again: the first who and why stand, nothing changes.
    assert (
        state.set_maintenance(ON.model_copy(update={"requested_by": "eve"}), T0 + timedelta(hours=1)) is None
    )
    assert state.maintenance.by == "alice"


def test_maintenance_off_ends_it_and_replays_nothing() -> None:
    state = entity()
    state.set_maintenance(ON, T0)
    words = state.set_maintenance(OFF, T0 + timedelta(hours=2))
    assert words is not None and words.startswith("maintenance ended by bob (it was in maintenance since")
    assert state.maintenance is None and state.current is None  # nothing skipped is started
    assert state.status().maintenance is None
    assert state.set_maintenance(OFF, T0) is None  # not in maintenance: nothing changes
    state.refuse_request(REBOOT, OperationRequest(requested_by="carol"))  # may start again


def test_maintenance_on_needs_a_reason_and_changes_nothing_without_one() -> None:
    state = entity()
    with pytest.raises(InvalidInput, match="maintenance on needs a reason"):
        state.refuse_maintenance(MaintenanceRequest(on=True, requested_by="alice", reason="  "))
    assert state.maintenance is None
    state.refuse_maintenance(OFF)  # off needs none


def test_maintenance_on_while_an_operation_runs_says_it_is_not_stopped_and_how_to_abort() -> None:
    state = entity()
    assert leaves_running(state.host_id, state.current) is None
    state.record_request(REBOOT, OperationRequest(requested_by="carol"), T0)
    state.set_maintenance(ON, T0)
    running = leaves_running(state.host_id, state.current)
    assert running is not None
    assert "is not stopped by maintenance" in running
    assert f"metalflow host abort {HOST}" in running


def test_maintenance_on_and_off_are_events_on_the_hosts_dpunode_and_an_in_maintenance_start_says_so() -> None:
    def change(phase: str, details: str) -> PhaseChange:
        return PhaseChange(
            workflow_id=f"host/{HOST}", run_id="r1", workflow_type="HostWorkflow", phase=phase,
            details=details, at=T0, history_length=9, host_id=HOST, operation="host",
        )  # fmt: skip

    state = entity()
    words = state.set_maintenance(ON, T0) or ""
    on = describe(change("maintenance-on", words), "dpf")
    assert on is not None and (on.reason, on.type, on.action) == ("MaintenanceOn", "Normal", "Maintenance")
    assert on.regarding is not None and on.regarding.name == f"node-{HOST}"
    assert "set by alice: replacing a fan" in on.note
    request = OperationRequest(requested_by="carol", in_maintenance=True)
    current = state.record_request(REBOOT, request, T0)
    state.approve_at_once(current)
    started = describe(change(state.phase(), state.details()), "dpf")
    assert started is not None and started.reason == "OperationStarted"
    assert "asked with --in-maintenance while in maintenance since" in started.note
    off = describe(change("maintenance-off", state.set_maintenance(OFF, T0) or ""), "dpf")
    assert off is not None and off.reason == "MaintenanceOff" and "maintenance ended by bob" in off.note
