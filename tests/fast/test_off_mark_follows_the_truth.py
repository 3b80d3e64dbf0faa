"""The OFF mark follows the truth after a cancel, a `bmc power on`, a terminate (issue 40: "a host
is never found off after any run ends unless its status says so in words"), as the entity's pure
decisions: what its record of a run cut by hand says (`takeover_rules.said_when_cut`, from the
one read `cut_read` asks for), and what `finish` and `powered_on_by_hand` do to the mark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.host_requests import REBOOT, REPROVISION, RESET, EntityRequest
from contracts.models.bmc_lease import RebootRunSeen
from contracts.models.host import HostWorkflowInput, OperationRequest, ResetRequest, ResetTarget
from contracts.wording import CANCELLED_OUTCOME
from workflows.host.state import HostEntityState
from workflows.host.takeover_rules import cut_read, power_to_read, said_when_cut

T0 = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
HOST = "host-001"
DONE_ON = f"Done: {HOST}-dpu-0: PowerCycle; {HOST}-dpu-1: PowerCycle; the host is on"
CANCELLED_ON = f"**cancelled**: cancelled (the workflow was cancelled). {DONE_ON}"


def entity_left_off() -> HostEntityState:
    """An idle host an earlier reset left OFF (its outcome said so)."""
    state = HostEntityState.of(HostWorkflowInput(host_id=HOST))
    first = state.record_request(RESET, ResetRequest(requested_by="alice", target=ResetTarget.HOST), T0)
    state.approve_at_once(first)
    state.started(first, T0)
    state.finish(first, f"aborted by bob: ...; the host {HOST} is OFF: metalflow turned it off", T0)
    assert state.left_off() == f"reset/{HOST}"
    return state


def ended(state: HostEntityState, kind: EntityRequest[Any], outcome: str, at: datetime) -> None:
    request = (
        ResetRequest(requested_by="alice", target=ResetTarget.BOTH)
        if kind is RESET
        else OperationRequest(requested_by="alice")
    )
    current = state.record_request(kind, request, at)
    state.approve_at_once(current)
    state.started(current, at)
    state.reached(state.boot_generation, at)  # a cancel before any reboot: no new generation
    state.finish(current, outcome, at + timedelta(seconds=30))


@pytest.mark.parametrize("kind", [RESET, REBOOT, REPROVISION])
def test_a_cancel_that_powered_the_host_on_clears_an_earlier_runs_mark(kind: EntityRequest[Any]) -> None:
    """`host reset --both` (or a reboot, a reprovision) cancelled in Temporal, its cancel having
    powered the host back on: its final words say so, and the entity's record says them too, so
    the mark an earlier run left goes. Before: the record said only `cancelled (...)`, and the
    host stayed `idle (host OFF)` with a WARNING while it was On."""
    state = entity_left_off()
    operation = kind.operation
    assert cut_read(operation, CANCELLED_OUTCOME) is True  # its words are read
    seen = RebootRunSeen(end="cancelled", phase="cancelled", said=CANCELLED_ON)
    outcome = said_when_cut(CANCELLED_OUTCOME, operation, seen, HOST)
    assert outcome == f"{CANCELLED_OUTCOME}. {DONE_ON}"
    assert not power_to_read(operation, outcome)  # it says the host's power: believed, no BMC read
    ended(state, kind, outcome, T0 + timedelta(minutes=5))
    assert state.left_off() is None and state.left_off_by == ""
    assert state.recent[-1].outcome.endswith("the host is on")


def test_a_cancel_whose_words_are_not_read_keeps_the_mark_and_has_the_power_read() -> None:
    """No words (no worker answered the query, or a run of older code): the record says the
    cancel only, the mark stays and the entity reads the host's power (rule 8) as before."""
    state = entity_left_off()
    other_phase = RebootRunSeen(end="cancelled", said="**resetting-dpus**: x")
    for seen in (None, RebootRunSeen(end="unread"), other_phase):
        outcome = said_when_cut(CANCELLED_OUTCOME, "reset", seen, HOST)
        assert outcome == CANCELLED_OUTCOME
    assert power_to_read("reset", CANCELLED_OUTCOME)
    ended(state, RESET, CANCELLED_OUTCOME, T0 + timedelta(minutes=5))
    assert state.left_off() == f"reset/{HOST}"


def test_a_cancel_that_touched_no_power_keeps_the_mark() -> None:
    state = entity_left_off()
    said = (
        "**cancelled**: cancelled (the workflow was cancelled). "
        "Done: nothing was reset; host power not touched by this run"
    )
    outcome = said_when_cut(CANCELLED_OUTCOME, "reset", RebootRunSeen(end="cancelled", said=said), HOST)
    assert outcome.endswith("host power not touched by this run") and not power_to_read("reset", outcome)
    ended(state, RESET, outcome, T0 + timedelta(minutes=5))
    assert state.left_off() == f"reset/{HOST}"


def test_a_terminated_reprovision_says_which_dpus_it_had_deleted_and_its_power_cycles() -> None:
    """`temporal workflow terminate` of a reprovision: no finaliser ran, so the entity reads its
    state replayed (the `status` query's `left`, one query) and its record says it. Before: only
    `terminated`."""
    left = (
        f"Boot generation 3 reached. Changed by this run: deleted {HOST}-dpu-0. "
        f"Each DPU: {HOST}-dpu-0 deleted "
        f"(uid u-1), not seen recreated yet: DPF recreates it; {HOST}-dpu-1 not deleted (as it was). "
        "The host: power-cycled 1 time by this run"
    )
    assert cut_read("reprovision", "terminated") is True
    assert cut_read("reset", "terminated") is False  # its last Phase only, as before
    assert cut_read("removal", "terminated") is None and cut_read("reset", "completed") is None
    seen = RebootRunSeen(end="terminated", phase="waiting-for-dpus", said=left)
    outcome = said_when_cut("terminated", "reprovision", seen, HOST)
    assert outcome == f"terminated; as the run stood when terminated: {left}"
    assert said_when_cut("terminated", "reprovision", None, HOST) == "terminated"  # not read: as before


def test_a_terminated_reset_in_manual_intervention_still_says_the_host_is_off() -> None:
    seen = RebootRunSeen(end="terminated", phase="manual-intervention-required")
    outcome = said_when_cut("terminated", "reset", seen, HOST)
    assert outcome.startswith("terminated while the host was OFF") and f"the host {HOST} is OFF" in outcome


def test_bmc_power_on_clears_the_mark_at_once_saying_who_and_when_and_off_marks_nothing() -> None:
    """`metalflow bmc power HOST on` (signal `power_set`): the mark goes at once, not at the
    watch's next reading (900 s by default); the taken-over words say who and when. Its Off (a
    person's `bmc power off`) is no run's OFF: no mark made or cleared."""
    state = HostEntityState.of(HostWorkflowInput(host_id=HOST))
    assert state.powered_on_by_hand(f"metalflow bmc power {HOST} on", "On", T0) == ""  # no mark: nothing
    state = entity_left_off()
    state.taken_over = f"took over from run r-1: the host is OFF as reset/{HOST} left it"
    how = f"metalflow bmc power {HOST} off (bob@ops)"
    assert state.powered_on_by_hand(how, "Off", T0) == "" and state.left_off() == f"reset/{HOST}"
    how = f"metalflow bmc power {HOST} on (bob@ops)"
    words = state.powered_on_by_hand(how, "On", T0 + timedelta(minutes=3))
    assert words == f"the host is On by {how}: no longer OFF as reset/{HOST} left it"
    assert state.left_off() is None and state.status().left_off_by == ""
    assert state.taken_over == (
        f"took over from run r-1: the host was OFF as reset/{HOST} left it "
        f"(no longer: powered On by {how} at 2026-11-29T03:03:00Z)"
    )
