"""An approval never runs the monitor's reprovision of a DPU whose reason no longer holds (issue
40, an attack's finding): `metalflow approve HOST` sent 1-2 s after the DPU recovered ran the
reprovision. The approval reads DPF then (not the monitor's last reading), and the DPU was
still on its way back to Ready (`DPU Cluster Config`, `Node Effect Removal`: 1 s each in the
demo's DPF) - out of Node Effect, its services back - which the check counted as "still not
Ready: the reason holds". Now a DPU past Node Effect has lost the reason too
(`ApprovalReason.reason_gone`); the approval withdraws the request and says what DPF says.
The check itself end to end: tests/test_monitor_operator.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from contracts.host_requests import REPROVISION
from contracts.models.dpf import PAST_NODE_EFFECT, DPUNodeState, DPUState, HostDPFState
from contracts.models.host import HostWorkflowInput, OperationRequest, PendingOperation
from contracts.models.monitor import HostMonitorInput, MonitorPolicy
from workflows.host.state import HostEntityState
from workflows.monitor.state import MonitorState

T0 = datetime(2026, 11, 30, 0, 10, tzinfo=UTC)
HOST = "host-001"
MONITORS = OperationRequest(
    requested_by="monitor/host-host-001",
    reason="critical DPU services down for more than 60 s",
    dpu_ids=("d1", "d2"),
    campaign_workflow_id="monitor/host-host-001",
)


def dpf(**phases: str) -> HostDPFState:
    dpus = tuple(
        DPUState(name=f"node-{HOST}-device-{d}", uid=d, dpu_id=d, phase=p) for d, p in phases.items()
    )
    return HostDPFState(host_id=HOST, dpus=dpus)


def held() -> tuple[HostEntityState, PendingOperation]:
    state = HostEntityState.of(HostWorkflowInput(host_id=HOST, instance="i-1"))
    current = state.record_request(REPROVISION, MONITORS, T0)
    assert state.needs_approval(REPROVISION, T0) and state.reason_to_check(current)
    return state, current


@pytest.mark.parametrize("phase", PAST_NODE_EFFECT)
def test_a_dpu_past_node_effect_on_its_way_to_ready_has_lost_the_monitors_reason(phase: str) -> None:
    state, current = held()
    assert state.reason_gone(current, dpf(d1=phase, d2="Ready")) == (
        "its reason (critical DPU services down for more than 60 s) no longer holds: DPF says "
        f"d1 is in {phase} (past Node Effect, on its way to Ready), d2 is Ready now"
    )


@pytest.mark.parametrize("phase", ["Node Effect", "Error", "OS Installing", "Initializing", ""])
def test_a_dpu_still_down_keeps_the_reason_and_the_approval_runs(phase: str) -> None:
    state, current = held()
    assert state.reason_gone(current, dpf(d1="DPU Cluster Config", d2=phase)) is None


def test_the_monitor_asks_for_no_reprovision_of_a_dpu_on_its_way_back_to_ready() -> None:
    """Its request refused at the approval (above), the monitor asked again at once for the same
    DPU, still degraded to it until Ready: a second request awaited approval for seconds, then was
    withdrawn. It stays out of the pool until Ready, but asks nothing, with no deadline, meanwhile;
    back in Node Effect its deadline (passed) asks again."""
    state = MonitorState.of(
        HostMonitorInput(host_id="h1", policy=MonitorPolicy(reprovision_after_seconds=60)), T0
    )

    def seen(phase: str) -> HostDPFState:
        dpus = (
            DPUState(name="n-d0", uid="u0", dpu_id="d0", phase=phase),
            DPUState(name="n-d1", uid="u1", dpu_id="d1", phase="Ready"),
        )
        return HostDPFState(host_id="h1", node=DPUNodeState(name="node-h1", uid="n"), dpus=dpus)

    state.observe(seen("Ready"), T0)
    state.observe(seen("Node Effect"), T0)
    later = T0 + timedelta(minutes=5)
    assert [d.dpu_id for d in state.overdue(later)] == ["d0"]
    for phase in PAST_NODE_EFFECT:
        state.observe(seen(phase), later)
        assert state.overdue(later) == [] and state.next_deadline() is None, phase
        assert [d.dpu_id for d in state.degraded] == ["d0"]  # out of the pool until Ready
    state.observe(seen("Node Effect"), later)  # down again: asked at once
    assert [d.dpu_id for d in state.overdue(later)] == ["d0"] and state.next_deadline() == T0 + timedelta(
        minutes=1
    )
