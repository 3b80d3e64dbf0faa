"""Issue 36ae: a reboot barrier that waits on a step only DPF takes says so within minutes
(workflows/parts/dpf_barrier.py `dpf_step_owed`, workflows/host_operation/dpf_owed.py
`OwedWait`), not at the 3600 s phase timeout restarted by every DPF change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.events import PhaseChange
from contracts.models.dpf import DPUNodeState, DPUState, HostDPFState, RebootStatus
from metalflow.runtime.events import describe
from workflows.host_operation.dpf_owed import DPF_STEP_OVERDUE, OwedWait
from workflows.parts import dpf_barrier as barrier

T0 = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)
IDS = ("d0", "d1")
STAMPED = RebootStatus(phase="Pending", method="PowerCycle", reason="WaitingForManualPowerCycleOrReboot")
REQUESTED = RebootStatus(phase="Pending", method="PowerCycle", reason="RebootRequested")
SHUTTING = RebootStatus(phase="WaitForShutdown", method="SystemLevelReset", reason="WaitingForDPUArmShutdown")


def _dpu(i: int, phase: str = "Rebooting", reboot: RebootStatus | None = None) -> DPUState:
    name = f"node-h-device-d{i}"
    return DPUState(name=name, uid=f"u{i}", dpu_id=f"d{i}", phase=phase, reboot_status=reboot)


def _state(*dpus: DPUState, asked: bool = True) -> HostDPFState:
    node = DPUNodeState(name="node-h", uid="n", reboot_required="true" if asked else None)
    return HostDPFState(host_id="h", node=node, dpus=dpus)


def after(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_attackers_state_is_a_step_dpf_owes_and_names_the_dpu_it_did_not_stamp() -> None:
    """dpu-0 waits for the host reboot, dpu-1 only `RebootRequested`, DPF's request on the node:
    the barrier does not reboot (a removal now is undone by DPF's Step 1), and what it waits for
    is DPF's Step 2 on dpu-1."""
    seen = _state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=REQUESTED))
    assert not barrier.reboot_barrier_reached(seen, IDS, {})
    owed = barrier.dpf_step_owed(seen, IDS, {})
    assert owed is not None and owed.key == ("stamp", "node-h-device-d1") and owed.grace == 0
    assert "node-h-device-d1 (rebootStatus Pending/RebootRequested)" in owed.words
    assert "node-h-device-d0" not in owed.words
    # No request yet with every DPU in Rebooting: DPF's Step 1 is owed.
    unasked = barrier.dpf_step_owed(_state(_dpu(0, reboot=REQUESTED), _dpu(1, "Ready"), asked=False), IDS, {})
    assert unasked is not None and unasked.key == ("ask",)
    # An Arm shutting down: DPF's own 300 s bound comes first.
    shutting = barrier.dpf_step_owed(_state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=SHUTTING)), IDS, {})
    assert shutting is not None and shutting.key[0] == "shutdown" and shutting.grace == 300


def test_nothing_is_owed_by_dpf_while_a_dpu_installs_or_has_not_reached_the_barrier() -> None:
    for seen in (
        _state(_dpu(0, reboot=STAMPED), _dpu(1, "OS Installing")),  # an install: HandleRebootSync waits
        _state(_dpu(0, reboot=STAMPED), _dpu(1, "DPU Cluster Config")),  # on its way: not DPF's stall
        _state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=STAMPED)),  # the barrier holds: ours to act
        _state(_dpu(0, "Ready"), _dpu(1, "Ready"), asked=False),  # done
    ):
        assert barrier.dpf_step_owed(seen, IDS, {}) is None, seen


def test_an_owed_step_is_said_once_after_the_bound_from_when_it_began_whatever_changes_meanwhile() -> None:
    """The history the attacker saw: every DPF change restarted the 3600 s wait. Here a change that
    leaves the same step owed keeps its start; the step is said once at `since + bound`; another
    step (or none) starts over."""
    stuck = _state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=REQUESTED))
    wait = OwedWait()
    wait.take(stuck, IDS, {}, T0)
    assert wait.due_in(after(10), 180) == 170 and wait.overdue(after(10), 180) is None
    wait.take(stuck, IDS, {}, after(100))  # a DPF change, the same step owed: the start stays
    assert wait.due_in(after(100), 180) == 80 and wait.shown() == ""
    said = wait.overdue(after(180), 180)
    assert said is not None
    assert said.startswith("DPF has not moved for 180 s (since 2026-11-29T18:00:00+00:00)")
    assert "node-h-device-d1 (rebootStatus Pending/RebootRequested)" in said
    assert wait.overdue(after(240), 180) is None and wait.due_in(after(240), 180) is None  # once
    wait.take(stuck, IDS, {}, after(300))
    assert wait.shown() == f"; {said}"  # the details keep it while it stays owed
    wait.take(_state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=STAMPED)), IDS, {}, after(301))
    assert wait.shown() == "" and wait.due_in(after(301), 180) is None  # stamped: nothing owed
    wait.take(stuck, IDS, {}, after(400))  # owed again: a new wait
    assert wait.due_in(after(400), 180) == 180
    shutting = _state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=SHUTTING))
    wait.take(shutting, IDS, {}, after(410))  # another step: starts over, with DPF's own bound
    assert wait.due_in(after(410), 180) == 480


def test_the_overdue_step_is_a_warning_event_on_the_dpunode() -> None:
    change = PhaseChange(
        "reprovision/h1", "r", "HostOperationWorkflow", DPF_STEP_OVERDUE, "DPF has not moved", T0, 9, "h1"
    )
    spec = describe(change, "dpf-operator-system")
    assert spec is not None and (spec.reason, spec.type) == ("DPFStepOverdue", "Warning")
