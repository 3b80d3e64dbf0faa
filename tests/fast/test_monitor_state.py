"""The host monitor's decisions (`workflows/monitor/state.py`), without a server: what
test_monitor and test_monitor_unplanned show end to end (a fall from Ready takes the host out of
the pool and recovery puts it back, the label written once per run, the reprovision past the
deadline, resets at rest recorded, the memory carried to the next run), one decision at a time.
(`reset_at_rest` on consecutive states of one DPU: test_monitor_unplanned.)"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta

import pytest

from contracts.converter import DATA_CONVERTER
from contracts.models.campaign import HostFinished
from contracts.models.control import OperatorRequest
from contracts.models.dpf import DPUNodeState, DPUState, HostDPFState
from contracts.models.monitor import (
    IN_POOL,
    OUT_OF_POOL,
    HostMonitorInput,
    MonitorMemory,
    MonitorPolicy,
    OwnerOperationResult,
    OwnerReprovisionResult,
    PoolStateResult,
)
from drivers import dpf as dpf_states
from workflows.monitor.state import HISTORY_KEPT, UNPLANNED_KEPT, MonitorState, operator_said_no

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
NODE = DPUNodeState(name="node-h1", uid="n")
HOUR = MonitorPolicy(reprovision_after_seconds=3600.0)


def monitor(policy: MonitorPolicy = HOUR, memory: MonitorMemory | None = None) -> MonitorState:
    return MonitorState.of(HostMonitorInput(host_id="h1", policy=policy, memory=memory), T0)


def seen(*dpus: tuple[str, str], uid: str = "u", started: str = "t1", node: bool = True) -> HostDPFState:
    """A DPF state: (dpu id, phase) each; its uid `<uid>-<id>`, its agent's start time `started`."""
    return HostDPFState(
        host_id="h1",
        node=NODE if node else None,
        dpus=tuple(
            DPUState(name=f"n-{d}", uid=f"{uid}-{d}", dpu_id=d, phase=p, agent_started_at=started)
            for d, p in dpus
        ),
    )


def label(state: MonitorState, written_changed: bool = True, now: datetime = T0) -> str | None:
    """What the runbook does with the pool label: ask, write, record. The state written, or None."""
    wanted = state.pool_label()
    if wanted is None:
        return None
    state.labelled(*wanted, PoolStateResult(node="node-h1", exists=True, changed=written_changed), now)
    return wanted[0]


def test_a_ready_dpu_falling_to_node_effect_is_degraded_and_recovery_clears_it() -> None:
    state = monitor()
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect"), ("d1", "Ready")), T0 + timedelta(minutes=1))
    assert [(d.dpu_id, d.since) for d in state.degraded] == [("d0", T0 + timedelta(minutes=1))]
    assert state.since["d0"] == T0 + timedelta(minutes=1) and state.since["d1"] == T0
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0 + timedelta(minutes=2))
    assert state.degraded == [] and state.events_seen == 3


def test_node_effect_on_the_way_up_is_not_a_fall() -> None:
    state = monitor()
    state.observe(seen(("d0", "OS Installing")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)  # provisioned: held by design
    state.observe(seen(("d1", "Node Effect")), T0)  # first sight: not a fall either
    assert state.degraded == []


def test_an_earlier_monitors_out_of_pool_label_is_kept_while_a_dpu_is_down() -> None:
    state = monitor()
    state.adopt(PoolStateResult(node="node-h1", exists=True, state=OUT_OF_POOL))
    assert state.pool_state == OUT_OF_POOL
    state.observe(seen(("d0", "Node Effect"), ("d1", "Ready")), T0)  # first sight counts once
    assert [d.dpu_id for d in state.degraded] == ["d0"]
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0)
    state.observe(seen(("d2", "Node Effect")), T0)  # adoption was the first state's only
    assert state.degraded == []
    kept = monitor()
    kept.adopt(PoolStateResult(node="node-h1", exists=True, state=IN_POOL))
    kept.observe(seen(("d0", "Node Effect")), T0)
    assert kept.pool_state == IN_POOL and kept.degraded == []


def test_a_recreated_dpu_starts_its_deadline_again_and_a_removed_node_clears_everything() -> None:
    state = monitor()
    state.observe(seen(("d0", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)
    state.observe(seen(("d0", "Node Effect"), uid="new"), T0 + timedelta(minutes=5))  # reprovisioned
    assert [(d.uid, d.since) for d in state.degraded] == [("new-d0", T0 + timedelta(minutes=5))]
    deleting = seen(("d0", "Ready"), uid="new").model_copy(
        update={"dpus": (DPUState(name="n-d0", uid="new-d0", dpu_id="d0", phase="Ready", deleting=True),)}
    )
    state.observe(deleting, T0)  # a DPU being deleted says nothing
    assert len(state.degraded) == 1
    state.observe(seen(node=False), T0)
    assert state.degraded == []


def test_the_label_is_written_once_per_run_then_on_changes_only() -> None:
    state = monitor()
    state.observe(seen(("d0", "Ready")), T0)
    assert state.pool_label() == (IN_POOL, "every DPU's services are up")
    state.label_unconfirmed()  # an abort cut the run's first write short: the final look writes it
    assert state.pool_label() == (IN_POOL, "every DPU's services are up")
    state.label_unconfirmed()
    assert label(state, written_changed=False) == IN_POOL  # the run's first: confirmed
    assert state.history == [] and label(state) is None  # nothing changed: no write
    state.observe(seen(("d0", "Node Effect")), T0)
    assert state.pool_label() == (OUT_OF_POOL, "critical DPU services down on d0")
    state.label_unconfirmed()  # an abort cut the write short
    assert label(state) == OUT_OF_POOL and state.pool_state == OUT_OF_POOL
    assert [c.state for c in state.history] == [OUT_OF_POOL]
    assert monitor(memory=state).pool_label() == (OUT_OF_POOL, "critical DPU services down on d0")  # next run


def test_pool_changes_are_kept_bounded() -> None:
    state = monitor()
    for n in range(HISTORY_KEPT + 5):
        state.observe(seen(("d0", "Ready")), T0)
        label(state, now=T0 + timedelta(minutes=n))
        state.observe(seen(("d0", "Node Effect")), T0)
        label(state, now=T0 + timedelta(minutes=n))
    assert len(state.history) == HISTORY_KEPT and state.history[-1].state == OUT_OF_POOL


def test_past_the_deadline_the_owner_is_asked_and_asked_again_one_deadline_later() -> None:
    state = monitor()
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect"), ("d1", "Node Effect")), T0)
    assert state.next_deadline() == T0 + timedelta(hours=1)
    assert state.overdue(T0 + timedelta(minutes=59)) == []
    due = state.overdue(T0 + timedelta(hours=1))
    assert [d.dpu_id for d in due] == ["d0", "d1"]
    busy = OwnerReprovisionResult(outcome="refused", message="host h1 is busy")
    words = state.reprovision_answered(due, busy, T0 + timedelta(hours=1))
    assert words == "refused: host h1 is busy" and state.reprovisions_requested == 0
    assert state.requests == ["d0, d1: refused: host h1 is busy"]
    assert state.next_deadline() == T0 + timedelta(hours=2)
    accepted = OwnerReprovisionResult(outcome="accepted", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(T0 + timedelta(hours=2)), accepted, T0 + timedelta(hours=2))
    assert state.reprovisions_requested == 1
    assert [d.reprovision_outcome for d in state.degraded] == ["accepted: reprovision/h1"] * 2
    off = monitor(MonitorPolicy(auto_reprovision=False), memory=state)
    assert off.next_deadline() is None and off.overdue(T0 + timedelta(days=1)) == []


def test_its_request_awaiting_approval_is_withdrawn_once_its_dpus_are_no_longer_degraded() -> None:
    """Issue 40: the monitor's reprovision waited for approval after the DPU recovered, and a
    later `approve` reprovisioned a healthy tenant host."""
    state = monitor()
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect"), ("d1", "Node Effect")), T0)
    due = state.overdue(T0 + timedelta(hours=1))
    held = OwnerReprovisionResult(outcome="awaiting-approval", workflow_id="reprovision/h1")
    state.reprovision_answered(due, held, T0 + timedelta(hours=1))
    assert state.stale_request() is None  # both still down: the reason holds
    state.observe(seen(("d0", "Ready"), ("d1", "Node Effect")), T0 + timedelta(hours=1))
    assert state.stale_request() is None  # d1 still down
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0 + timedelta(hours=1))
    assert state.stale_request() == (
        "reprovision/h1",
        "d0 is Ready again, d1 is Ready again: the reprovision is no longer needed",
    )
    carried = monitor(memory=state)  # the next run knows what it asked
    assert carried.stale_request() == state.stale_request()
    answer = "reprovision withdrawn by monitor; nothing started"
    words = state.withdrawal_answered(
        ("d0", "d1"), OwnerReprovisionResult(outcome="withdrawn", message=answer)
    )
    assert words == "withdrawn: reprovision withdrawn by monitor; nothing started"
    assert state.stale_request() is None and state.asked is None
    assert state.requests[-1] == "d0, d1: withdrawn: reprovision withdrawn by monitor; nothing started"
    # A request the entity started at once is not withdrawn: it runs (an abort is the operator's).
    started = monitor()
    started.observe(seen(("d0", "Ready")), T0)
    started.observe(seen(("d0", "Node Effect")), T0)
    accepted = OwnerReprovisionResult(outcome="accepted", workflow_id="reprovision/h1")
    started.reprovision_answered(started.overdue(T0 + timedelta(hours=1)), accepted, T0 + timedelta(hours=1))
    started.observe(seen(("d0", "Ready")), T0 + timedelta(hours=1))
    assert started.asked is not None and started.stale_request() is None


def test_an_operators_abort_holds_the_monitor_back_until_the_back_off_ends_or_it_is_resumed() -> None:
    """Issue 40 item 3: an operator aborted the monitor's reprovision ("do not reprovision,
    debugging") and 12 s later the monitor started another."""
    me = "monitor/host-h1"
    assert operator_said_no("aborted by alice: debugging; the DPF hold was released", me)
    assert operator_said_no("aborted", me) and operator_said_no("terminated", me)
    assert operator_said_no("withdrawn by alice: not now", me)
    assert not operator_said_no(f"withdrawn by {me}: d0 is Ready again: ...", me)  # its own
    # An approval that found the reason gone (the DPU Ready again) is not a no: it said yes.
    assert not operator_said_no("withdrawn at its approval by carol: its reason (...) no longer holds", me)
    for ended in ("completed", "failed: DPU d0 never Ready", "expired: not approved within 1:00:00"):
        assert not operator_said_no(ended, me)

    state = monitor(MonitorPolicy(reprovision_after_seconds=60.0))  # hold_back_seconds: the default
    assert MonitorPolicy().hold_back_seconds == 3600.0
    state.observe(seen(("d0", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)
    asked_at = T0 + timedelta(minutes=1)
    accepted = OwnerReprovisionResult(outcome="accepted", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(asked_at), accepted, asked_at)
    aborted_at = asked_at + timedelta(seconds=10)
    words = state.request_ended(
        HostFinished(host_id="h1", workflow_id="reprovision/h1", outcome="aborted by alice: debugging"),
        aborted_at,
    )
    until = aborted_at + timedelta(hours=1)
    assert words == "reprovision/h1 aborted by alice: debugging; holding back until 2026-11-27T04:01:10Z"
    assert state.asked is None and state.hold_back is not None and state.hold_back.until == until
    assert state.next_deadline() == until
    assert state.overdue(aborted_at + timedelta(minutes=59)) == []  # past its own deadline: held back
    shown = state.status()
    assert shown.hold_back == state.hold_back
    assert (
        "holding back until 2026-11-27T04:01:10Z after reprovision/h1 aborted by alice" in shown.waiting_for
    )
    assert "--resume" in shown.waiting_for
    carried = monitor(MonitorPolicy(reprovision_after_seconds=60.0), memory=state)  # the next run
    assert carried.overdue(aborted_at + timedelta(minutes=59)) == []
    # The back-off ends: asked again, and the end recorded.
    assert [d.dpu_id for d in state.overdue(until)] == ["d0"] and state.hold_back is None
    assert (
        state.requests[-1]
        == "held back no more: the hold-back after reprovision/h1 aborted by alice: debugging ended"
    )
    # Or an operator resumes it sooner; resuming nothing is refused.
    resumed = carried.resume(OperatorRequest(requested_by="alice", reason="done debugging"))
    assert (
        resumed
        == "resumed by alice: done debugging (held back after reprovision/h1 aborted by alice: debugging)"
    )
    assert [d.dpu_id for d in carried.overdue(aborted_at + timedelta(minutes=5))] == ["d0"]
    with pytest.raises(ValueError, match="not holding back: nothing to resume"):
        carried.resume(OperatorRequest(requested_by="alice"))
    # A request that completed or failed holds nothing back; a back-off of 0 holds none.
    done = monitor()
    assert (
        done.request_ended(HostFinished(host_id="h1", workflow_id="r", outcome="completed"), T0)
        == "r completed"
    )
    off = monitor(MonitorPolicy(hold_back_seconds=0))
    off.request_ended(HostFinished(host_id="h1", workflow_id="r", outcome="aborted by a: b"), T0)
    assert done.hold_back is None and off.hold_back is None


def test_while_its_own_reprovision_runs_the_monitor_asks_nothing_and_reads_the_record_a_deadline_later() -> (
    None
):
    """Asking while its own request ran raced an operator's abort: an ask that reached the entity
    between the abort's end and the monitor learning of it started a second reprovision."""
    state = monitor(MonitorPolicy(reprovision_after_seconds=60.0))
    state.observe(seen(("d0", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)
    asked_at = T0 + timedelta(minutes=1)
    accepted = OwnerReprovisionResult(outcome="accepted", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(asked_at), accepted, asked_at)
    later = asked_at + timedelta(minutes=5)
    assert state.overdue(later) == []  # its own runs: nothing asked, however long
    assert state.next_deadline() == asked_at + timedelta(minutes=1)
    assert state.own_request_to_check(asked_at + timedelta(seconds=59)) is None
    assert state.own_request_to_check(later) == state.asked
    still = OwnerOperationResult(workflow_id="reprovision/h1", message="running")
    assert state.own_request_seen(still, later) is None
    assert state.next_deadline() == later + timedelta(minutes=1) and state.own_request_to_check(later) is None
    # Its end read from the record before the signal came: applied once, the signal then ignored.
    ended = OwnerOperationResult(workflow_id="reprovision/h1", message="ended aborted by alice: debugging")
    words = state.own_request_seen(ended, later)
    assert words is not None and words.startswith("reprovision/h1 aborted by alice: debugging; holding back")
    recorded = list(state.requests)
    told = HostFinished(host_id="h1", workflow_id="reprovision/h1", outcome="aborted by alice: debugging")
    state.request_ended(told, later + timedelta(seconds=1))
    assert state.requests == recorded and state.hold_back is not None and state.hold_back.since == later
    # A request the entity no longer knows (ended by hand, unreported) is the monitor's no longer.
    lost = monitor(MonitorPolicy(reprovision_after_seconds=60.0))
    lost.observe(seen(("d0", "Ready")), T0)
    lost.observe(seen(("d0", "Node Effect")), T0)
    lost.reprovision_answered(lost.overdue(asked_at), accepted, asked_at)
    gone = OwnerOperationResult(message="no operation since 2026-11-27T03:01:00+00:00")
    assert lost.own_request_seen(gone, later) == (
        "reprovision/h1 is no longer known to the entity (no operation since 2026-11-27T03:01:00+00:00)"
    )
    assert lost.asked is None and [d.dpu_id for d in lost.overdue(later)] == ["d0"]


def test_a_dpu_the_entity_says_dpf_no_longer_has_is_not_asked_for_again() -> None:
    """Issue 40 item 3: the monitor's request for a DPU removed from DPF came back after every abort."""
    state = monitor()
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect"), ("d1", "Node Effect")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)  # d1 removed: gone from DPF's state
    due = state.overdue(T0 + timedelta(hours=1))
    gone = OwnerReprovisionResult(outcome="gone", message="host h1: DPF no longer has d1", gone=("d1",))
    words = state.reprovision_answered(due, gone, T0 + timedelta(hours=1))
    assert words == "gone: host h1: DPF no longer has d1; d1 not asked for again"
    assert [d.dpu_id for d in state.degraded] == ["d0"] and "d1" not in state.last_phases
    assert [d.dpu_id for d in state.overdue(T0 + timedelta(hours=1))] == ["d0"]  # the rest at once
    assert state.reprovisions_requested == 0 and state.asked is None
    assert [d.dpu_id for d in state.status().dpus] == ["d0"]
    node = OwnerReprovisionResult(outcome="gone", message="DPF no longer has the DPU node")  # every one
    state.reprovision_answered(state.overdue(T0 + timedelta(hours=1)), node, T0 + timedelta(hours=1))
    assert state.degraded == [] and state.next_deadline() is None
    assert state.pool_label() == (IN_POOL, "every DPU's services are up")


def test_resets_at_rest_are_found_since_the_state_before_and_recorded_bounded() -> None:
    state = monitor()
    resets, since = state.observe(seen(("d0", "Ready"), started="t1"), T0 + timedelta(minutes=1))
    assert resets == [] and since == T0  # the first state: since the monitor started
    resets, since = state.observe(seen(("d0", "Ready"), started="t2"), T0 + timedelta(minutes=2))
    assert since == T0 + timedelta(minutes=1)
    restarted = "restarted (agentStatus.lastStartupTime t1 -> t2) in Ready"
    assert [(r.dpu_id, r.change) for r in resets] == [("d0", restarted)]
    fell, _ = state.observe(seen(("d0", "Node Effect"), started="t2"), T0)  # flow 5: the pool's
    assert fell == []
    restarting, _ = state.observe(seen(("d0", "Node Effect"), started="t3"), T0)  # not at rest
    assert restarting == []
    state.observe(seen(("d0", "Ready"), started="t3"), T0)
    again, _ = state.observe(seen(("d0", "Ready"), started=""), T0 + timedelta(minutes=3))
    assert again == [] and state.last_started["d0"] == "t3"  # no start time: the last known kept
    for _ in range(UNPLANNED_KEPT + 1):
        lines = state.record_unplanned(resets)
    state.record_unplanned([*resets, *resets])  # two DPUs in one state
    assert len(state.unplanned) == UNPLANNED_KEPT and state.unplanned_total == UNPLANNED_KEPT + 3
    assert lines[-1] == f"2026-11-27T03:02:00Z: DPU d0 {restarted} (not by metalflow)"
    # The next run starts with the same memo (the UI keeps the resets), a first run with none.
    assert state.memo() == {"unplanned_resets": lines} and monitor().memo() == {}


def test_the_status_says_what_the_monitor_waits_for() -> None:
    state = monitor()
    state.observe(seen(("d0", "Ready")), T0)
    assert state.status().waiting_for == "a Ready DPU falling to Node Effect"
    assert state.status().phase == "watching"
    state.observe(seen(("d0", "Node Effect")), T0)
    status = state.status()
    assert status.phase == "host-out-of-pool" and [d.dpu_id for d in status.degraded] == ["d0"]
    assert status.waiting_for == "recovery of d0, or the reprovision deadline 2026-11-27T04:00:00Z"
    off = monitor(MonitorPolicy(auto_reprovision=False), memory=state)
    assert off.status().waiting_for == "recovery of d0 (automatic reprovision is off)"
    # An attack found it (issue 40): with --reprovision-after set and its request awaiting
    # approval, the status said "automatic reprovision is off". It says what the monitor does.
    held = OwnerReprovisionResult(outcome="awaiting-approval", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(T0 + timedelta(hours=1)), held, T0 + timedelta(hours=1))
    assert state.status().waiting_for == (
        "recovery of d0 (its reprovision/h1 is withdrawn then), or the approval of it "
        "(metalflow approve h1); nothing more is asked meanwhile"
    )


def test_the_next_run_starts_from_this_ones_memory_with_an_abort_carried() -> None:
    first = monitor()
    assert first.started_at == T0 and first.runs == 1
    first.observe(seen(("d0", "Ready")), T0)
    stop = OperatorRequest(requested_by="op", reason="done")
    memory = first.handed_over(stop)
    start = HostMonitorInput(host_id="h1").model_copy(update={"memory": memory})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pydantic warns when it serializes a value not of its field's type
        [payload] = DATA_CONVERTER.payload_converter.to_payloads([start])
        [back] = DATA_CONVERTER.payload_converter.from_payloads([payload], [HostMonitorInput])
    assert type(back.memory) is MonitorMemory
    second = MonitorState.of(back, T0 + timedelta(hours=1))
    assert (second.runs, second.stop, second.started_at) == (2, stop, T0)  # the first run's start kept
    assert second.last_phases == {"d0": "Ready"} and second.events_seen == 1
    assert second.pool_label() is not None  # each run confirms the label once: not carried


def test_a_ready_dpus_reset_is_seen_from_the_agents_own_start_time() -> None:
    """Issue 36 point 3: on a real DPF a reset of a `Ready` DPU moves the agent's own
    `agentStatus.lastStartupTime`; DPF's copy `agentLastStartupTime` moves only in `DPU Config`
    (simulators/dpf/BEHAVIOUR.md A3). The monitor, reading DPU objects as DPF writes them, sees it."""

    def dpu(agent_started: str) -> HostDPFState:
        obj = {
            "metadata": {"name": "n-d0", "uid": "u-d0"},
            "spec": {"dpuDeviceName": "device-d0", "dpuNodeName": "node-h1"},
            "status": {"phase": "Ready", "agentLastStartupTime": "2026-11-27T02:00:00Z",
                       "agentStatus": {"rebootMethod": "NoAction", "rebootSequenceCount": 0,
                                       "lastStartupTime": agent_started}},
        }  # fmt: skip
        return HostDPFState(host_id="h1", node=NODE, dpus=(dpf_states.dpu_state(obj),))

    state = monitor()
    assert state.observe(dpu("2026-11-27T02:00:00Z"), T0)[0] == []
    resets, _ = state.observe(dpu("2026-11-27T03:01:00Z"), T0 + timedelta(minutes=1))
    change = "restarted (agentStatus.lastStartupTime 2026-11-27T02:00:00Z -> 2026-11-27T03:01:00Z) in Ready"
    assert [(r.dpu_id, r.change) for r in resets] == [("d0", change)]
    # What a site watch keeps of the object carries the time too (`watched`).
    obj = {"metadata": {"name": "n"}, "status": {"agentStatus": {"lastStartupTime": "t"}}}
    watched = dpf_states.watched(obj)
    assert watched["status"]["agentStatus"] == {"lastStartupTime": "t"}


def test_the_status_shows_only_the_request_and_hold_back_that_exist_now() -> None:
    """Issue 40: `host monitor --status` showed a hold-back past its end (nothing degraded: the
    monitor never woke to end it) and a degraded DPU's `asked: accepted: reprovision/h1` after
    that request was aborted; its own pending request was not shown at all."""
    state = monitor(MonitorPolicy(reprovision_after_seconds=60.0))
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect"), ("d1", "Node Effect")), T0)
    asked_at = T0 + timedelta(minutes=1)
    accepted = OwnerReprovisionResult(outcome="accepted", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(asked_at), accepted, asked_at)
    assert state.status().own_request == state.asked and state.asked is not None
    aborted_at = asked_at + timedelta(seconds=10)
    told = HostFinished(host_id="h1", workflow_id="reprovision/h1", outcome="aborted by alice: debugging")
    state.request_ended(told, aborted_at)
    shown = state.status()
    assert shown.own_request is None
    assert [d.reprovision_outcome for d in shown.degraded] == [
        "reprovision/h1 aborted by alice: debugging"
    ] * 2
    # Both DPUs recover while it holds back: the hold-back still ends on time, and says so.
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), aborted_at)
    assert state.hold_back is not None and state.next_deadline() == state.hold_back.until
    assert state.status().waiting_for.startswith("a Ready DPU falling to Node Effect; holding back until ")
    assert state.overdue(state.hold_back.until) == [] and state.hold_back is None
    assert state.next_deadline() is None and state.status().hold_back is None
    assert state.status().waiting_for == "a Ready DPU falling to Node Effect"
    # A withdrawal of its own: the DPU's line says so, not "awaiting-approval".
    held = monitor(MonitorPolicy(reprovision_after_seconds=60.0))
    held.observe(seen(("d0", "Ready")), T0)
    held.observe(seen(("d0", "Node Effect")), T0)
    awaiting = OwnerReprovisionResult(outcome="awaiting-approval", workflow_id="reprovision/h1")
    held.reprovision_answered(held.overdue(asked_at), awaiting, asked_at)
    assert held.status().own_request is not None and held.status().own_request.awaiting_approval
    gone = OwnerReprovisionResult(
        outcome="withdrawn", workflow_id="reprovision/h1", message="nothing started"
    )
    held.withdrawal_answered(("d0",), gone)
    assert held.status().own_request is None
    assert held.status().degraded[0].reprovision_outcome == "withdrawn: nothing started"


def test_the_cli_shows_its_pending_request_and_no_hold_back_past_its_end() -> None:
    from metalflow.cli.host_monitor import render_monitor

    state = monitor(MonitorPolicy(reprovision_after_seconds=60.0))
    state.observe(seen(("d0", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)
    asked_at = T0 + timedelta(minutes=1)
    awaiting = OwnerReprovisionResult(outcome="awaiting-approval", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(asked_at), awaiting, asked_at)
    policy = MonitorPolicy(reprovision_after_seconds=60.0)
    shown = render_monitor(state.status(), policy, now=asked_at)
    assert "  its request      reprovision/h1 of d0 awaits approval (asked 2026-11-27T03:01:00Z)" in shown
    # An attack found it (issue 40): the DPU's line read "reprovision due 03:02; asked 03:01", asked
    # before due. In the order things happen, and what the monitor does next, as it will:
    [line] = [x for x in shown.splitlines() if x.startswith("    d0 ") and "asked" in x]
    assert line.split(maxsplit=1)[1].startswith("since 2026-11-27T03:00:00Z; asked 2026-11-27T03:01:00Z: "), (
        line
    )
    assert line.endswith("; nothing more asked while reprovision/h1 awaits approval"), line
    assert "due" not in line, line
    state.request_ended(
        HostFinished(host_id="h1", workflow_id="reprovision/h1", outcome="withdrawn by alice: no"), asked_at
    )
    hold = state.hold_back
    assert hold is not None
    during = render_monitor(state.status(), policy, now=hold.until - timedelta(seconds=1))
    assert "its request" not in during and "  holding back     until 2026-11-27T04:01:00Z" in during
    [line] = [x for x in during.splitlines() if x.startswith("    d0 ") and "asked" in x]
    assert line.endswith("; asks again 2026-11-27T04:01:00Z"), line  # not before the hold-back ends
    after = render_monitor(state.status(), policy, now=hold.until)  # the monitor has not woken yet
    assert "holding back     " not in after


def test_a_dpu_dpf_no_longer_shows_is_no_longer_watched() -> None:
    """Issue 40 (last stop, item 3): after `host remove --dpus` of one DPU the monitor still said
    `2 DPUs watched`. A DPU absent from DPF's state leaves the status; one created again (a new
    uid) is watched again, from its first sight."""
    state = monitor()
    state.observe(seen(("d0", "Ready"), ("d1", "Ready")), T0)
    state.observe(seen(("d1", "Ready")), T0 + timedelta(minutes=1))  # d0 removed
    assert [d.dpu_id for d in state.status().dpus] == ["d1"]
    assert state.degraded == []
    state.observe(seen(("d0", "Node Effect"), ("d1", "Ready"), uid="v2"), T0 + timedelta(minutes=2))
    assert sorted(d.dpu_id for d in state.status().dpus) == ["d0", "d1"]
    assert state.degraded == []  # first sight of the new d0: not a fall from Ready


def test_the_cli_shows_the_monitors_approved_request_running_as_its_entity_records_it() -> None:
    """Issue 40 (task): after `approve`, `host monitor --status` said the request awaited approval
    ("... or the approval of it") while it ran: the monitor is told its end only."""
    from contracts.models.host import OperationRecord
    from metalflow.cli.host_monitor import as_the_entity_says, render_monitor

    state = monitor(MonitorPolicy(reprovision_after_seconds=60.0))
    state.observe(seen(("d0", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)
    asked_at = T0 + timedelta(minutes=1)
    awaiting = OwnerReprovisionResult(outcome="awaiting-approval", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(asked_at), awaiting, asked_at)
    record = OperationRecord(
        operation="reprovision",
        workflow_id="reprovision/h1",
        requested_by="monitor/host-h1",
        outcome="running",
    )
    policy = MonitorPolicy(reprovision_after_seconds=60.0)
    runs = render_monitor(
        as_the_entity_says(state.status(), record.model_copy(update={"approved_by": "carol"})), policy
    )
    assert "awaits approval" not in runs and "the approval of it" not in runs, runs
    assert "  its request      reprovision/h1 of d0 runs (asked " in runs, runs
    assert "the end of reprovision/h1 (approved by carol, running: it reprovisions d0)" in runs, runs
    # Still awaiting at the entity, or another run: the monitor's view stands.
    still = record.model_copy(update={"outcome": "awaiting-approval"})
    assert as_the_entity_says(state.status(), still) == state.status()
    assert as_the_entity_says(state.status(), None) == state.status()


def test_an_operators_no_in_the_same_words_as_the_last_holds_the_monitor_back_again() -> None:
    """The host model (tests/fast/test_host_entity_model.py) found it: the monitor skipped an end
    told in the same words as the last one (`last_ended`, for an end told twice: the record read,
    then the signal), so a second operator's no to a later request of its own, once its withdrawal
    was refused (approved and started meanwhile), held nothing back. A new request of its own is
    a new end to hear."""
    state = monitor(MonitorPolicy(reprovision_after_seconds=60.0, hold_back_seconds=600.0))
    state.observe(seen(("d0", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)
    asked_at = T0 + timedelta(minutes=1)
    accepted = OwnerReprovisionResult(outcome="accepted", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(asked_at), accepted, asked_at)
    no = HostFinished(host_id="h1", workflow_id="reprovision/h1", outcome="aborted by alice: debugging")
    state.request_ended(no, asked_at)
    again = asked_at + timedelta(minutes=11)  # the hold-back over: it asks again
    waits = OwnerReprovisionResult(outcome="awaiting-approval", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(again), waits, again)
    started = OwnerReprovisionResult(outcome="refused", message="reprovision/h1 was approved and started")
    state.withdrawal_answered(("d0",), started)  # d0 Ready again: its withdrawal came too late
    # Attack 40f (LOW): it was recorded as `refused: ...`, read as a refusal standing now.
    assert state.requests[-1] == (
        "d0: not withdrawn: reprovision/h1 no longer awaited approval (approved, or ended, before the "
        "withdrawal reached it); its end is recorded as told"
    ), state.requests
    state.request_ended(no, again + timedelta(minutes=1))  # aborted again, in the same words
    assert state.hold_back is not None and state.hold_back.since == again + timedelta(minutes=1)


def test_the_cli_says_a_degraded_dpus_request_as_of_now_in_the_order_things_happened() -> None:
    """L7 of issue 40's last attack: during an approved run `host monitor --status` read `HOST-dpu-0
    since 00:37:26Z; asked 00:37:05Z: awaiting-approval`: "since" was the deadline's restart at
    the DPU's recreation, after the asking, and the answer was long past. Now the DPU's line says
    since when it is in its phase now (named when no longer Node Effect), the request's state as
    its entity records it now, earlier first."""
    from contracts.models.host import OperationRecord
    from metalflow.cli.host_monitor import as_the_entity_says, render_monitor

    policy = MonitorPolicy(reprovision_after_seconds=60.0)
    state = monitor(policy)
    state.observe(seen(("d0", "Ready")), T0)
    state.observe(seen(("d0", "Node Effect")), T0)
    asked_at, recreated = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)
    awaiting = OwnerReprovisionResult(outcome="awaiting-approval", workflow_id="reprovision/h1")
    state.reprovision_answered(state.overdue(asked_at), awaiting, asked_at)
    state.observe(seen(("d0", "Initializing"), uid="v2"), recreated)  # approved: deleted, recreated
    running = OperationRecord(
        operation="reprovision", workflow_id="reprovision/h1", requested_by="monitor/host-h1",
        outcome="running", approved_by="carol",
    )  # fmt: skip
    shown = render_monitor(as_the_entity_says(state.status(), running), policy, now=recreated)
    [line] = [x for x in shown.splitlines() if x.startswith("    d0 ") and "asked" in x]
    assert line.split(maxsplit=1)[1] == (
        "asked 2026-11-27T03:01:00Z: approved by carol, running: reprovision/h1; Initializing since "
        "2026-11-27T03:02:00Z; nothing more asked while reprovision/h1 runs"
    ), line
