"""The host operation's decisions (`workflows/host_operation/state.py`), without a server: what a
DPU in Error calls for, the reboot-loop refusal, DPF's deadline and its escalation, the reboot's
method and re-issues, what a reboot does to the counts, resets nobody of ours made, the status.

The end-to-end tests (test_host_operation_e2e, _escalation, _v26, _barrier) prove the wiring;
these prove the rules, each on hand-written DPF states. The budgets and the unplanned-reset
memory are also invariants of a Hypothesis state machine over random sequences of observations.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from contracts.models.dpf import (
    Condition,
    DPUNodeState,
    DPUState,
    HoldState,
    HostDPFState,
    HostRef,
    RebootStatus,
)
from contracts.models.host import HostOperationInput, HostOperationKind, OperationPolicy
from contracts.models.inventory import BMCAccess, CredentialRef, DPUInventory, HostInventory
from workflows.host_operation.left_words import dpus_left
from workflows.host_operation.state import UNPLANNED_KEPT, HostOperationState

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
DPUS = ("d0", "d1")
POLICY = OperationPolicy(
    max_dpu_error_reprovisions=2,
    max_host_error_reprovisions=3,
    max_reboot_sequence_count=3,
    dpf_reboot_deadline_seconds=7200,
    escalate_before_deadline_seconds=1800,
    phase_timeout_seconds=3600,
    max_power_cycle_retries=2,
    force_off_from_retry=1,
)


def run_state(policy: OperationPolicy = POLICY, dpu_ids: tuple[str, ...] | None = DPUS) -> HostOperationState:
    request = HostOperationInput(
        host_id="h", kind=HostOperationKind.REPROVISION, dpu_ids=dpu_ids, requested_by="pytest",
        boot_generation=4, policy=policy,
    )  # fmt: skip
    return HostOperationState.start(request, T0)


STAMP = Condition(type="Rebooted", status="False", reason="WaitingForManualPowerCycleOrReboot")


def dpu(i: int | str, phase: str = "Rebooting", uid: str = "", **more: object) -> DPUState:
    """A DPU; one in `Rebooting` carries DPF's stamp, the `Rebooted` condition, unless told."""
    if phase == "Rebooting":
        more.setdefault("conditions", (STAMP,))
    dpu_id = i if isinstance(i, str) else f"d{i}"
    return DPUState(name=f"node-h-device-{dpu_id}", uid=uid or f"{dpu_id}-u1", dpu_id=dpu_id, phase=phase,
                    **more)  # type: ignore[arg-type]  # fmt: skip


def dpf(*dpus: DPUState, asks: bool = True, asked_at: str = "", method: str | None = None) -> HostDPFState:
    since = Condition(type="DPUNodeRebootInProgress", status="True", last_transition=asked_at)
    node = DPUNodeState(
        name="node-h", uid="n", reboot_required="true" if asks else None,
        conditions=(since,) if asked_at else (), reboot_method=method,
    )  # fmt: skip
    return HostDPFState(host_id="h", node=node, dpus=dpus, hold=HoldState(name="node-h-hold", hold="false"))


def in_error(i: int, reason: str = "FailToInstall", message: str = "the BFB did not install") -> DPUState:
    return dpu(
        i, "Error",
        conditions=(Condition(type="Ready", status="False", reason="Error", message=message),
                    Condition(type="BFBTransferred", status="False", reason=reason)),
    )  # fmt: skip


# -- the host ------------------------------------------------------------------------------------


def test_the_inventory_names_the_dpus_and_refuses_one_the_host_does_not_have() -> None:
    bmc = BMCAccess(bmc_id="h", endpoint="https://bmc", credentials=CredentialRef(file="/c"))
    inventory = HostInventory(host_id="h", site="s", bmc=bmc, dpus=(DPUInventory(id="d0", model="BF3"),))
    every = run_state(dpu_ids=None)
    assert every.take_inventory(inventory) is None and every.dpu_ids == ("d0",) and every.host is not None
    refused = run_state(dpu_ids=("d0", "d9"))
    assert refused.take_inventory(inventory) == "host h has no DPU d9 (it has d0)"
    none = run_state(dpu_ids=None)
    assert none.take_inventory(inventory.model_copy(update={"dpus": ()})) == "host h has no DPUs"


# -- DPUs in Error -------------------------------------------------------------------------------


def test_an_error_reprovisioning_cannot_fix_parks_the_run_and_spends_nothing() -> None:
    state = run_state()
    call = state.error_call(in_error(0, reason="UnsupportedNodeRebootMethod"))
    assert call.kind == "park" and call.dpu_id == "d0"
    assert "UnsupportedNodeRebootMethod" in call.words and "before a retry" in call.words
    assert state.error_reprovisions == {} and state.host_error_reprovisions == 0


def test_an_error_is_reprovisioned_while_the_dpus_budget_lasts_then_fails() -> None:
    state = run_state()
    for _ in range(POLICY.max_dpu_error_reprovisions):
        call = state.error_call(in_error(0))
        assert call.kind == "reprovision" and "reprovisioning it" in call.words
        state.spend_reprovision(call.dpu_id)
    failed = state.error_call(in_error(0))
    assert failed.kind == "fail"
    assert failed.words == (
        "DPU node-h-device-d0 in Error after 2 automatic reprovisions: "
        "BFBTransferred: FailToInstall: the BFB did not install"
    )
    assert state.error_call(in_error(1)).kind == "reprovision"  # the other DPU's budget is its own


def test_the_hosts_budget_ends_reprovisions_of_any_dpu() -> None:
    state = run_state()
    for i in (0, 0, 1):
        state.spend_reprovision(f"d{i}")
    call = state.error_call(in_error(1))  # d1 spent 1 of 2, but the host spent 3 of 3
    assert call.kind == "fail" and "the host's budget of 3 automatic reprovisions is spent" in call.words
    assert state.error_reprovisions == {"d0": 2, "d1": 1} and state.host_error_reprovisions == 3


def test_failed_are_the_current_dpus_in_error_not_those_replaced() -> None:
    state = run_state()
    state.deleted("d0", "d0-u1", "node-h-device-d0", "deleted")
    assert state.failed(dpf(in_error(0), in_error(1))) == [in_error(1)]
    assert state.changes == ["deleted DPU node-h-device-d0 (uid d0-u1)"]


# -- the reboot DPF asks for ---------------------------------------------------------------------


def test_a_reboot_loop_is_refused_past_the_policys_bound_only() -> None:
    """The bound counts the host reboots of ours a DPU asked for in one sequence: the fourth
    request passes the bound of 3, whatever the agent's count says."""
    state = run_state()
    for count in (1, 2, 3):  # three rounds of ours, DPU 1 asking each time
        asking = dpf(dpu(0), dpu(1, reboot_sequence_count=count))
        assert state.reboot_loop(asking) is None  # up to the bound
        state.round_started(asking)
    looping = dpu(1, reboot_sequence_count=4, agent_reboot_method="PowerCycle")
    refused = state.reboot_loop(dpf(dpu(0), looping))
    assert refused is not None and refused.startswith("DPU node-h-device-d1 asks for host reboot 4")
    assert "rebootSequenceCount 4" in refused and "method PowerCycle" in refused
    assert "allows 3 (max_reboot_sequence_count)" in refused
    assert state.reboot_loop(dpf(dpu(1, "Ready", reboot_sequence_count=9))) is None  # not Rebooting
    assert state.reboots_requested == 3
    # A recreated DPU (reprovisioned) starts a new sequence; so does one whose count went down.
    assert state.reboot_loop(dpf(dpu(1, uid="d1-u2", reboot_sequence_count=4))) is None
    assert state.reboot_loop(dpf(dpu(1, reboot_sequence_count=1))) is None


def test_the_dpus_own_reboots_are_not_counted_as_ours() -> None:
    """Issue 36 point 5: the agent's `rebootSequenceCount` also grows on the DPU's own
    FirmwareReset/DPUWarmReboot (DPF agent `checkRebootSequenceCount`; BEHAVIOUR.md A1): a DPU
    that rebooted itself three times, then asks for a host reboot twice, is at count 5 but has
    asked for two host reboots of ours: no reboot loop under a bound of 3."""
    state = run_state()
    first = dpf(dpu(0, reboot_sequence_count=4, agent_reboot_method="PowerCycle"), dpu(1, "DPU Config"))
    assert state.reboot_loop(first) is None
    state.round_started(first)
    second = dpf(dpu(0, reboot_sequence_count=5, agent_reboot_method="PowerCycle"), dpu(1, "DPU Config"))
    assert state.reboot_loop(second) is None
    # v25.10 reports no count: no bound of ours (nothing to tell a sequence by).
    assert state.reboot_loop(dpf(dpu(0), dpu(1))) is None
    # NoAction (count 0) ends the sequence: the next one starts from none.
    state.round_started(second)
    state.observe(dpf(dpu(0, "DPU Cluster Config", reboot_sequence_count=0)), T0)
    assert state.reboots_asked == {}


def test_dpf_asks_for_a_reboot_by_its_annotation() -> None:
    state = run_state()
    assert state.asks_for_reboot(dpf(dpu(0)))
    assert not state.asks_for_reboot(dpf(dpu(0), asks=False))
    assert not state.asks_for_reboot(HostDPFState(host_id="h"))


@pytest.mark.parametrize(
    ("method", "force_off", "warm_allowed", "warm"),
    [
        ("SystemLevelReset", False, True, True),
        ("DPUWarmReboot", False, True, True),
        ("PowerCycle", False, True, False),
        (None, False, True, False),  # DPF before v26 names none: cold
        ("SystemLevelReset", True, True, False),  # a re-issued reboot is always cold
        ("SystemLevelReset", False, False, False),  # the policy forbids warm resets
    ],
)
def test_the_reset_is_warm_only_where_the_method_the_policy_and_the_round_allow(
    method: str | None, force_off: bool, warm_allowed: bool, warm: bool
) -> None:
    state = run_state(POLICY.model_copy(update={"warm_reset": warm_allowed}))
    assert state.reboot_method(dpf(dpu(0), dpu(1), method=method), force_off=force_off) == (method, warm)


def test_re_issues_turn_to_force_off_then_to_an_operator() -> None:
    state = run_state()
    assert [state.force_off(retry) for retry in range(3)] == [False, True, True]  # force_off_from_retry 1
    assert run_state(POLICY.model_copy(update={"force_off_from_retry": 0})).force_off(0)
    assert state.after_silence(0, installing=False) == "reissue"
    assert state.after_silence(1, installing=True) == "barrier"  # a DPU installs: never cycled now
    assert state.after_silence(2, installing=False) == "ask"  # max_power_cycle_retries re-issues done
    assert state.after_silence(2, installing=True) == "ask"


def test_the_reboots_input_carries_the_request_and_the_rounds_choices() -> None:
    state = run_state()
    state.host = HostRef(host_id="h")
    reboot = state.reboot_input(5, force_off=True, warm=False, owed_since=T0, operation_id="reprovision/h")
    assert (reboot.boot_generation, reboot.force_off, reboot.owed_since) == (5, True, T0)
    assert reboot.escalate_bmc_failure and reboot.reason == "DPF asked for a reboot (reprovision/h)"


# -- DPF's deadline ------------------------------------------------------------------------------


def test_the_deadline_runs_from_when_dpf_asked_and_escalates_once_per_request() -> None:
    state = run_state()
    asking = dpf(dpu(0), dpu(1))
    assert state.deadline_at(asking) is None  # not seen asking yet
    state.observe(asking, T0)
    state.observe(asking, T0 + timedelta(minutes=30))  # the same request, seen again: the same deadline
    assert state.asked_at == T0 and state.deadline_at(asking) == T0 + timedelta(hours=2)
    # DPF's own stamp is earlier than this run's first sight of the request: it counts from there.
    stamped = dpf(dpu(0), dpu(1), asked_at="2026-12-01T07:30:00Z")
    assert state.deadline_at(stamped) == T0 + timedelta(minutes=90)
    # An hour in: the escalation (30 min before the deadline) comes before a phase timeout (1 h).
    now = T0 + timedelta(minutes=60)
    assert state.escalation_left(asking, now) == 1800.0
    assert state.wait_bound(asking, now) == (1800.0, True)
    state.escalated()
    assert state.escalation_left(asking, now) is None and state.wait_bound(asking, now) == (3600.0, False)
    # Acknowledged: the next request is a new one, escalated again.
    state.acknowledged(changed=True)
    assert state.deadline_at(asking) is None
    state.observe(asking, now)
    assert state.wait_bound(asking, now + timedelta(minutes=80)) == (600.0, True)
    words = state.deadline_words(asking, "every DPU to reach Rebooting")
    assert "must be done by 2026-12-01T11:00:00+00:00 (2 h after DPF asked)" in words
    assert words.endswith("Still waiting for every DPU to reach Rebooting")


def test_no_escalation_without_a_pending_request() -> None:
    state = run_state()
    quiet = dpf(dpu(0, "Ready"), asks=False)
    state.observe(quiet, T0)
    assert state.asked_at is None and state.wait_bound(quiet, T0) == (3600.0, False)


# -- reboots and their counts --------------------------------------------------------------------


def test_a_reboot_counts_an_attempt_and_the_restarts_it_explains() -> None:
    state = run_state()
    state.reboot_started()
    state.reboot_started()  # the BMC refused the first one
    assert state.reboot_attempts == 2 and state.restarts_owed == {"d0": 2, "d1": 2}


def test_a_reboot_moves_the_generation_once_and_counts_only_our_power_cycles() -> None:
    state = run_state()
    state.rebooted(5, power_cycle=True)
    assert (state.generation, state.reboots, state.power_cycles, state.cycled_without_ack) == (5, 1, 1, True)
    state.rebooted(6, power_cycle=False)  # by hand, or a reset someone else made
    assert (state.generation, state.reboots, state.power_cycles) == (6, 2, 1)
    assert state.next_ack() == 1 and state.next_ack() == 2
    state.acknowledged(changed=True)
    assert state.changes == ["removed the reboot-required annotation (generation 6)"]


def test_after_the_acknowledgement_the_watch_reads_on_from_no_annotation() -> None:
    state = run_state()
    after = state.after_acknowledgement(dpf(dpu(0)))
    assert not state.asks_for_reboot(after) and after.dpus == (dpu(0),)


# -- resets nobody of ours made ------------------------------------------------------------------


def test_an_agent_restart_our_reboot_explains_is_not_unplanned_one_more_is() -> None:
    state = run_state()
    state.observe(dpf(dpu(0, agent_started_at="t1"), dpu(1, agent_started_at="t1")), T0)
    state.reboot_started()
    later = T0 + timedelta(minutes=5)
    found = state.observe(dpf(dpu(0, agent_started_at="t2"), dpu(1, agent_started_at="t2")), later)
    assert found == [] and state.restarts_owed == {"d0": 0, "d1": 0}
    found = state.observe(dpf(dpu(0, agent_started_at="t3"), dpu(1, agent_started_at="t2")), later)
    assert found == ["DPU d0 restarted (agentStatus.lastStartupTime t3) in Rebooting"]
    assert state.unplanned == ["2026-12-01T08:05:00+00:00: DPU d0 restarted (agentStatus.lastStartupTime t3) "
                               "in Rebooting (not by metalflow)"]  # fmt: skip


def test_a_move_back_dpf_does_not_make_is_unplanned_a_recreated_dpu_is_not() -> None:
    state = run_state()
    state.observe(dpf(dpu(0, "DPU Cluster Config"), dpu(1, "DPU Cluster Config")), T0)
    found = state.observe(dpf(dpu(0, "Initializing"), dpu(1, "Initializing", uid="d1-u2")), T0)
    assert found == ["DPU d0 went back from DPU Cluster Config to Initializing"]


def test_the_memo_is_written_when_the_unplanned_resets_changed_and_keeps_the_newest() -> None:
    state = run_state()
    assert state.unplanned_to_show() is None
    for n in range(UNPLANNED_KEPT + 5):
        state.unplanned_reset(f"reset {n}", T0)
    shown = state.unplanned_to_show()
    assert shown is not None and len(shown) == UNPLANNED_KEPT
    assert shown[-1].endswith("reset 24 (not by metalflow)")
    assert state.unplanned_to_show() is None  # nothing new since


# -- what the run shows --------------------------------------------------------------------------


def test_the_status_shows_each_dpu_the_counts_and_the_deadline() -> None:
    state = run_state()
    asking = dpf(dpu(0), dpu(1))
    state.observe(asking, T0)
    state.spend_reprovision("d1")
    state.reboot_started()
    status = state.status(
        phase="rebooting-host", waiting_for="the reboot", dpf=asking,
        phases={"d0": ("Rebooting", T0 + timedelta(minutes=1))}, rebooting_to=5, intervention=None,
    )  # fmt: skip
    assert [(d.dpu_id, d.phase, d.since, d.error_reprovisions) for d in status.dpus] == [
        ("d0", "Rebooting", T0 + timedelta(minutes=1), 0),
        ("d1", "", T0, 1),  # not seen yet: since the run started
    ]
    assert (status.reboot_attempts, status.rebooting_to, status.boot_generation) == (1, 5, 4)
    assert status.reboot_deadline_at == T0 + timedelta(hours=2) and status.operation == "reprovision"
    assert state.left_behind() == (  # generation 4 is the previous run's (before attack 40f: named)
        "No boot generation reached by this run. Changed by this run: nothing. Each DPU: d0 not "
        "deleted (as it was); d1 not deleted (as it was). The host: not power-cycled by this run"
    )


def test_an_early_end_names_only_the_generation_this_run_reached() -> None:
    """Attack 40f (LOW): a reprovision aborted while waiting for the hold said `Boot generation 4
    reached`, the previous run's; it names none until this run reaches one, then that one."""
    state = run_state()
    assert state.left_behind().startswith("No boot generation reached by this run. Changed by this run: ")
    assert "generation 4" not in state.left_behind()
    state.rebooted(5, power_cycle=True)
    assert state.left_behind().startswith("Boot generation 5 reached. Changed by this run: ")


def test_a_reprovision_that_ends_early_names_each_dpu_it_deleted_and_the_host() -> None:
    """Issue 40 Deliver 2 (i40p item 3): a reprovision that failed after deleting a DPU said only
    `Changed by this run: deleted DPU ...`, nothing of the DPUs it did not delete, of what DPF
    showed of the deleted one since, nor of the host's power."""
    state = run_state()
    state.observe(dpf(dpu(0, "Ready"), dpu(1, "Ready")), T0)
    state.deleted("d0", "d0-u1", "node-h-device-d0", "deleted")
    assert state.left_behind() == (
        "No boot generation reached by this run. Changed by this run: deleted DPU node-h-device-d0 "
        "(uid d0-u1). Each DPU: d0 deleted (uid d0-u1), not seen recreated yet: DPF recreates it; "
        "d1 not deleted (as it was). The host: not power-cycled by this run"
    )
    state.observe(dpf(dpu(0, "Initializing", uid="d0-u2"), dpu(1, "Ready")), T0 + timedelta(seconds=5))
    state.power_cycles = 1
    assert dpus_left(state.dpu_ids, state.replaced, state.seen) == (
        "d0 deleted (uid d0-u1), recreated by DPF (uid d0-u2, Initializing); d1 not deleted (as it was)"
    )
    assert state.left_behind().endswith("The host: power-cycled 1 time by this run")


def test_the_words_of_a_reboot_that_did_not_restart_an_agent() -> None:
    state = run_state()
    state.generation = 4
    words = state.agents_silent_words(["d1"], {"d1": ("u", "2026-01-01T00:00:00Z")}, retries=1)
    assert words == (
        "the DPU agent of d1 (agentStatus.lastStartupTime still 2026-01-01T00:00:00Z) did not start "
        "again within 900 s of each of 2 reboots (last: generation 4): the reset did not reach the "
        "DPU, and DPF waits in DPU Config for a fresh agent start"
    )


def test_the_barriers_words_name_the_dpus_not_there_yet() -> None:
    state = run_state()
    words = state.barrier_words(dpf(dpu(0), dpu(1, "OS Installing")))
    assert words == (
        "every DPU to reach Rebooting (1 of 2) or Ready (0 of 2); not there yet: d1 in OS Installing"
    )
    assert state.ready_or_at_barrier(dpf(dpu(0), dpu(1)))
    shutting_down = dpu(1, reboot_status=RebootStatus(phase="WaitForShutdown"))
    assert not state.ready_or_at_barrier(dpf(dpu(0), shutting_down))


# -- invariants over random observations ---------------------------------------------------------

REASONS = ("FailToInstall", "UnsupportedNodeRebootMethod", "Timeout")


class ErrorBudgets(RuleBasedStateMachine):
    """DPUs go to Error, again and again, for any reason; the runbook's loop answers each
    (`error_call`, then `spend_reprovision` for a reprovision). Never more reprovisions than
    the budgets, a park never spends, a failure only once a budget is spent."""

    def __init__(self) -> None:
        super().__init__()
        self.state = run_state(POLICY.model_copy(update={"max_host_error_reprovisions": 3}))

    @rule(i=st.sampled_from((0, 1)), reason=st.sampled_from(REASONS))
    def a_dpu_goes_to_error(self, i: int, reason: str) -> None:
        before_dpu = self.state.error_reprovisions.get(f"d{i}", 0)
        before_host = self.state.host_error_reprovisions
        call = self.state.error_call(in_error(i, reason=reason))
        if call.kind == "reprovision":
            self.state.spend_reprovision(call.dpu_id)
        elif call.kind == "fail":
            assert before_dpu >= POLICY.max_dpu_error_reprovisions or before_host >= 3
        else:
            assert reason == "UnsupportedNodeRebootMethod"

    @invariant()
    def within_the_budgets(self) -> None:
        assert all(n <= POLICY.max_dpu_error_reprovisions for n in self.state.error_reprovisions.values())
        assert self.state.host_error_reprovisions <= 3
        assert self.state.host_error_reprovisions == sum(self.state.error_reprovisions.values())


TestErrorBudgets = ErrorBudgets.TestCase
TestErrorBudgets.settings = settings(max_examples=60, stateful_step_count=12, deadline=None)


class UnplannedMemory(RuleBasedStateMachine):
    """Reboots and agent restarts in any order: owed restarts never go negative, the memory
    stays bounded, and a restart is unplanned exactly when no reboot of ours owes it."""

    def __init__(self) -> None:
        super().__init__()
        self.state = run_state()
        self.start = 0
        self.state.observe(dpf(dpu(0, agent_started_at="t0"), dpu(1, agent_started_at="t0")), T0)

    @rule()
    def we_reboot(self) -> None:
        self.state.reboot_started()

    @rule()
    def the_agent_restarts(self) -> None:
        owed = self.state.restarts_owed.get("d0", 0)
        self.start += 1
        restarted = dpu(0, agent_started_at=f"t{self.start}")
        found = self.state.observe(dpf(restarted, dpu(1, agent_started_at="t0")), T0)
        assert bool(found) == (owed == 0)

    @invariant()
    def bounded(self) -> None:
        assert all(n >= 0 for n in self.state.restarts_owed.values())
        assert len(self.state.unplanned) <= UNPLANNED_KEPT


TestUnplannedMemory = UnplannedMemory.TestCase
TestUnplannedMemory.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


def test_a_reprovisioned_errors_words_are_kept_in_the_past_tense() -> None:
    """Issue 38 item 7: a completed reprovision's last line ended "...: reprovisioning it"."""
    state = run_state()
    call = state.error_call(in_error(0))
    state.spend_reprovision(call.dpu_id, call.words)
    kept = state.error_words[call.dpu_id]
    assert kept.startswith("DPU node-h-device-d0 was in Error (") and kept.endswith(": reprovisioned it"), (
        kept
    )


def test_a_hold_is_released_again_only_in_a_state_taken_since_the_last_release_began() -> None:
    """Issue 37: the state a release answered still shows its hold on (DPF's "false" comes with
    the watch's next change); releasing on it again costs an activity and a GET that find it
    released. A hold on in a newer state (DPF set it again) is released."""
    state = run_state()
    holding = HostDPFState(host_id="h", dpus=(dpu(0, "Node Effect"), dpu(1, "Node Effect")),
                           hold=HoldState(name="node-h-hold", hold="true"))  # fmt: skip
    assert state.release_owed(holding, seen_since_release=True)
    assert not state.release_owed(holding, seen_since_release=False)
    released = holding.model_copy(update={"hold": HoldState(name="node-h-hold", hold="false")})
    assert not state.release_owed(released, seen_since_release=True)
