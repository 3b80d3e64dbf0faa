"""Issue 40 (an independent attack): a new entity after `temporal workflow terminate` of
`host/<id>`, one pure rule at a time (`workflows/host/takeover_rules.py`; the end-to-end case:
tests/test_takeover_adopts.py).

- The operation its predecessor left running is ADOPTED: the new entity is busy with it (every
  request refused naming it), shows it in flight (`host abort`/`retry`/`status`/`list` reach it)
  and records its end as an own child's. Before: the new entity was idle and started a second
  operation on the host while the first still ran.
- A run that closed after the predecessor's last recorded end wins over the carried OFF mark:
  the mark names the run that really left the host OFF, or is cleared by one that says the host
  is on or reached a boot generation. Before: the mark named the carried run, for ever.
- The "taken over" words go once a later run of the new entity ends.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.errors import AutomationHeldBack, HostBusy, InvalidInput
from contracts.host_requests import REBOOT, REPROVISION, RESET
from contracts.models.bmc_lease import RebootRunSeen
from contracts.models.host import (
    EntityPredecessor,
    HostEntityMemory,
    HostWorkflowInput,
    OperationRequest,
    OperationRun,
    ResetRequest,
    RunEnd,
)
from contracts.wording import CANCELLED_OUTCOME, iso_z
from workflows.host.state import HostEntityState
from workflows.host.takeover_rules import (
    CutReboots,
    awaiting_while_no_entity,
    carried,
    cut_to_read,
    off_while_no_entity,
    outcome_of_run,
    take_over,
)
from workflows.parts.boot_generation import RebootLeft

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
HOST = "host-001"
RESET_ID, REBOOT_1, REBOOT_2 = f"reset/{HOST}", f"reboot/{HOST}/generation-1", f"reboot/{HOST}/generation-2"
LEFT_OFF = f"HostLeftOff: the host {HOST} is OFF: metalflow turned it off and could not power it on"


def entity() -> HostEntityState:
    return HostEntityState.of(HostWorkflowInput(host_id=HOST))


def predecessor(
    *, running: tuple[OperationRun, ...] = (), ended: tuple[OperationRun, ...] = (), **memory: Any
) -> EntityPredecessor:
    return EntityPredecessor(
        run_id="r1",
        status="TERMINATED",
        closed_at=T0,
        carried=carried(HostEntityMemory(**memory)),
        running=running,
        ended=ended,
    )


RUNNING_RESET = OperationRun(
    workflow_id=RESET_ID,
    run_id="run-7",
    operation="reset",
    requested_by="alice",
    reason="wedged",
    started_at=T0,
)


def test_a_new_entity_adopts_the_operation_its_predecessor_left_running_and_is_busy_with_it() -> None:
    """Before: the new entity was idle; `host reboot` started reboot/HOST/generation-1 while the
    reset still ran, and `abort`/`retry` said "no operation in flight"."""
    new = entity()
    words = take_over(new, predecessor(running=(RUNNING_RESET,)))
    assert "adopted reset/host-001, still running" in words, words
    current = new.current
    assert current is not None and current.adopted_run == "run-7" and current.approved
    assert new.phase() == "running reset"
    shown = new.status().current
    assert shown is not None and (shown.workflow_id, shown.outcome, shown.requested_by) == (
        RESET_ID,
        "running",
        "alice",
    )
    with pytest.raises(
        HostBusy, match=r"busy: reset is in flight \(workflow reset/host-001, requested by alice\)"
    ):
        new.refuse_request(REBOOT, OperationRequest(requested_by="bob"))
    with pytest.raises(HostBusy, match="reset/host-001"):
        new.refuse_request(RESET, ResetRequest(requested_by="bob", target="all-dpus"))
    with pytest.raises(InvalidInput, match="reset/host-001 is in flight"):
        new.release_automation("bob")  # `host retry` goes to the operation itself (the CLI)


def test_the_adopted_operations_end_is_recorded_as_an_own_childs() -> None:
    new = entity()
    take_over(new, predecessor(running=(RUNNING_RESET,)))
    assert new.current is not None
    new.finish(new.current, f"failed: {LEFT_OFF}", T0 + timedelta(minutes=1))
    assert new.current is None and new.left_off() == RESET_ID
    assert new.recent[-1].workflow_id == RESET_ID and new.recent[-1].outcome.startswith("failed: HostLeftOff")
    assert new.taken_over == ""  # a later run ended: the take-over is past (its words would mislead)


def test_two_running_adopt_the_oldest_and_name_the_other() -> None:
    later = OperationRun(workflow_id="reprovision/host-001", run_id="x", started_at=T0 + timedelta(seconds=1))
    new = entity()
    words = take_over(new, predecessor(running=(later, RUNNING_RESET)))
    assert new.current is not None and new.current.record.workflow_id == RESET_ID
    assert "(also running: reprovision/host-001)" in words, words


def test_who_asked_an_adopted_run_unknown_or_unprintable_reads_unknown() -> None:
    new = entity()
    take_over(new, predecessor(running=(OperationRun(workflow_id=RESET_ID, requested_by="a\x07b"),)))
    assert new.current is not None and new.current.record.requested_by == "unknown"
    assert new.current.record.operation == "reset"  # from its id when its attribute is unread


@pytest.mark.parametrize(
    ("end", "outcome"),
    [
        (RunEnd(status="COMPLETED"), "completed"),
        (RunEnd(status="COMPLETED", aborted="aborted by bob: no"), "aborted by bob: no"),
        (RunEnd(status="CANCELED"), CANCELLED_OUTCOME),  # no operator's abort (task B3)
        (RunEnd(status="TERMINATED"), "terminated"),
        (
            RunEnd(status="FAILED", failure_type="OperationAborted", failure_message="by bob"),
            "aborted: by bob",
        ),
        (RunEnd(status="FAILED", failure_type="HostLeftOff", failure=LEFT_OFF), f"failed: {LEFT_OFF}"),
        (RunEnd(status="TIMED_OUT"), "failed: timed_out"),
    ],
)
def test_a_runs_end_reads_as_an_own_childs(end: RunEnd, outcome: str) -> None:
    assert outcome_of_run(end) == outcome


def _closed(workflow_id: str, end: RunEnd, minutes: int) -> OperationRun:
    at = T0 + timedelta(minutes=minutes)
    return OperationRun(
        workflow_id=workflow_id,
        operation=workflow_id.split("/")[0],
        requested_by="alice",
        started_at=at - timedelta(seconds=30),
        end=end.model_copy(update={"closed_at": at}),
    )


def test_a_run_that_ended_unrecorded_with_the_host_off_names_the_mark() -> None:
    """Before: "the host is OFF as reset/host-001 left it" (the carried mark), and the reboot
    that really left it OFF (failed HostLeftOff after the terminate) went unmentioned."""
    failed = _closed(REBOOT_1, RunEnd(status="FAILED", failure_type="HostLeftOff", failure=LEFT_OFF), 2)
    new = entity()
    words = take_over(new, predecessor(left_off_by=RESET_ID, ended=(failed,)))
    assert new.left_off_by == REBOOT_1, new.left_off_by
    assert f"the host is OFF as {REBOOT_1} left it" in words and f"as {RESET_ID}" not in words, words
    assert f"{REBOOT_1} ended at 2026-11-29T12:02:00Z, unrecorded: failed: HostLeftOff" in words, words
    assert new.recent[-1].workflow_id == REBOOT_1 and new.recent[-1].outcome == f"failed: {LEFT_OFF}"


@pytest.mark.parametrize(
    "end",
    [
        RunEnd(status="COMPLETED", boot_generation=2),  # booted: it was On
        RunEnd(status="COMPLETED"),  # a completed reboot: its id's generation
        RunEnd(status="FAILED", failure="X: gave up; the host is on"),  # says so
    ],
)
def test_a_later_run_that_booted_or_says_the_host_is_on_clears_the_carried_mark(end: RunEnd) -> None:
    new = entity()
    words = take_over(
        new, predecessor(left_off_by=RESET_ID, boot_generation=1, ended=(_closed(REBOOT_2, end, 3),))
    )
    assert new.left_off_by == "" and new.left_off() is None, words
    assert "is OFF" not in words, words


def test_a_reset_terminated_by_hand_in_manual_intervention_unrecorded_is_the_mark() -> None:
    """Its last Phase (the listing's) says the host was OFF by its hand, as for an own child's
    terminate (`off_when_cut`)."""
    cut = _closed(RESET_ID, RunEnd(status="TERMINATED", last_phase="manual-intervention-required"), 2)
    new = entity()
    take_over(new, predecessor(ended=(cut,)))
    assert new.left_off_by == RESET_ID
    assert new.recent[-1].outcome.startswith("terminated while the host was OFF"), new.recent[-1]
    calm = _closed(RESET_ID, RunEnd(status="TERMINATED", last_phase="resetting-dpus"), 2)
    other = entity()
    take_over(other, predecessor(ended=(calm,)))
    assert other.left_off_by == "" and other.recent[-1].outcome == "terminated"


REPROVISION_ID = f"reprovision/{HOST}"
MONITOR_ID = f"monitor/host-{HOST}"


def _monitors_run(end: RunEnd, requested_by: str = MONITOR_ID) -> OperationRun:
    return _closed(REPROVISION_ID, end, 2).model_copy(update={"requested_by": requested_by})


def test_an_operators_abort_of_the_monitors_run_unrecorded_holds_automation_back() -> None:
    """The re-attack: `host abort` while the entity was terminated goes straight to the run,
    which ends aborted; the new entity recorded "unrecorded: aborted by alice: no, debugging" but
    set no hold, and the monitor's next ask power-cycled the host. The same rule as an own
    child's end (`hold_after`): held since the run closed, and the monitor's next ask refused."""
    aborted = _monitors_run(RunEnd(status="COMPLETED", aborted="aborted by alice: no, debugging"))
    new = entity()
    words = take_over(new, predecessor(ended=(aborted,)), T0 + timedelta(minutes=5))
    hold = new.automation_held_back
    assert hold is not None, words
    assert (hold.by, hold.reason, hold.after, hold.asked_by) == (
        "alice",
        "no, debugging",
        REPROVISION_ID,
        MONITOR_ID,
    )
    assert hold.since == T0 + timedelta(minutes=2)  # its close, not the takeover
    assert "automation held back by alice" in words, words
    monitors = OperationRequest(requested_by=MONITOR_ID, campaign_workflow_id=MONITOR_ID)
    with pytest.raises(AutomationHeldBack, match="automation held back by alice: no, debugging"):
        new.refuse_request(REPROVISION, monitors)
    assert carried(new)["automation_held_back"]["by"] == "alice"  # a next terminate keeps it


@pytest.mark.parametrize(
    "run",
    [
        _monitors_run(RunEnd(status="COMPLETED", aborted="aborted by alice: no"), requested_by="alice"),
        _monitors_run(RunEnd(status="COMPLETED")),  # the monitor's run completed: no one said no
        _monitors_run(RunEnd(status="FAILED", failure="X: broke")),
    ],
)
def test_no_hold_after_an_unrecorded_run_but_an_operators_no_to_the_monitor(run: OperationRun) -> None:
    new = entity()
    take_over(new, predecessor(ended=(run,)), T0)
    assert new.automation_held_back is None


CUT_REPROVISION = _closed(
    REPROVISION_ID, RunEnd(status="TERMINATED", last_phase="manual-intervention-required"), 4
)
REBOOT_FAILED_OFF = RebootRunSeen(
    end="failed", said=f"BMCRebootFailed: On refused (401); the host {HOST} is OFF: metalflow turned it off"
)


def test_a_cut_run_found_unrecorded_has_its_reboots_read_and_their_off_is_the_mark() -> None:
    """The re-attack (B2): a reprovision waiting for a person with the host OFF (its reboot failed
    `BMCRebootFailed` after the BMC's password rotated), its entity terminated, then the
    reprovision: the next entity recorded it "terminated" and `left_off_by ""` although the BMC
    said Off. Now its reboots are read as an adopted run's (`cut_to_read` names the run and the
    generation to read from) and the reboot that failed OFF makes it the mark."""
    new = entity()
    before = predecessor(boot_generation=1, ended=(CUT_REPROVISION,))
    assert cut_to_read(new, before) == (CUT_REPROVISION, 1)
    read = CutReboots(CUT_REPROVISION, 1, RebootLeft(REBOOT_2, REBOOT_FAILED_OFF))
    words = take_over(new, before, T0 + timedelta(minutes=5), read)
    assert new.left_off_by == REPROVISION_ID, words
    outcome = new.recent[-1].outcome
    assert outcome.startswith(f"terminated after its reboot {REBOOT_2} failed leaving the host OFF"), outcome
    assert f"the host is OFF as {REPROVISION_ID} left it" in words, words
    waits = RebootRunSeen(end="running", phase="manual-intervention-required")
    other = entity()
    take_over(other, before, T0, CutReboots(CUT_REPROVISION, 1, RebootLeft(REBOOT_2, waits)))
    assert other.left_off_by == REPROVISION_ID
    assert f"{REBOOT_2} still waits for a person" in other.recent[-1].outcome


def test_a_cut_run_takes_the_generation_its_reboots_reached() -> None:
    """B6: the entity's generation lagged a terminated reprovision's completed reboot until the
    next request's start skipped the spent id."""
    new = entity()
    take_over(new, predecessor(ended=(CUT_REPROVISION,)), T0, CutReboots(CUT_REPROVISION, 2, None))
    assert new.boot_generation == 2 and new.recent[-1].outcome == "terminated"


@pytest.mark.parametrize(
    "run",
    [
        _closed(REPROVISION_ID, RunEnd(status="COMPLETED"), 4),  # its result says what it reached
        _closed(REPROVISION_ID, RunEnd(status="FAILED", failure="X: broke"), 4),  # its details too
        _closed(REPROVISION_ID, RunEnd(status="TERMINATED", boot_generation=3), 4),
        _closed(f"remove/{HOST}", RunEnd(status="TERMINATED"), 4),  # a removal reboots nothing
    ],
)
def test_no_reboots_read_unless_a_run_that_reboots_was_cut_without_a_report(run: OperationRun) -> None:
    """Only such a run costs the new entity a read (an entity that records nothing else adds none)."""
    assert cut_to_read(entity(), predecessor(ended=(run,))) is None
    assert cut_to_read(entity(), predecessor()) is None


def test_while_no_entity_runs_the_mark_a_new_entity_would_take_is_said() -> None:
    """B5: after a run that left the host OFF ended with no entity running, `host status` said
    only "was terminated" until a request started an entity. It now says the mark that entity
    would take (`off_while_no_entity`): the carried one, or a run closed since that says OFF."""
    failed = _closed(REBOOT_1, RunEnd(status="FAILED", failure_type="HostLeftOff", failure=LEFT_OFF), 2)
    assert off_while_no_entity(predecessor(ended=(failed,))) == REBOOT_1
    assert off_while_no_entity(predecessor(left_off_by=RESET_ID)) == RESET_ID
    cut = _closed(RESET_ID, RunEnd(status="TERMINATED", last_phase="manual-intervention-required"), 2)
    assert off_while_no_entity(predecessor(ended=(cut,))) == RESET_ID
    booted = _closed(REBOOT_2, RunEnd(status="COMPLETED", boot_generation=2), 3)
    assert off_while_no_entity(predecessor(left_off_by=RESET_ID, ended=(booted,))) == ""
    assert off_while_no_entity(EntityPredecessor()) == ""


def test_the_taken_over_words_never_contradict_a_cleared_mark() -> None:
    """The re-attack (B6): the taken-over line still said "the host is OFF as RUN left it" after
    the power watch read the host On and cleared the mark (the WARNING gone). Now it says the
    mark is past, and why."""
    new = entity()
    take_over(new, predecessor(left_off_by=RESET_ID), T0)
    assert f"the host is OFF as {RESET_ID} left it" in new.taken_over and new.left_off_by == RESET_ID
    later = T0 + timedelta(minutes=5)
    assert new.read_at_rest("On", later)
    assert new.left_off_by == "" and f"the host is OFF as {RESET_ID}" not in new.taken_over, new.taken_over
    # Issue 40 (last stop, item 3): it says when the mark cleared, not only why.
    cleared = f"the host was OFF as {RESET_ID} left it (no longer: the host read On at rest at {iso_z(later)}"
    assert cleared in new.taken_over, new.taken_over
    booted = entity()
    take_over(booted, predecessor(left_off_by=RESET_ID), T0)
    booted.reached(1, later)
    assert f"(no longer: generation 1 booted at {iso_z(later)})" in booted.taken_over, booted.taken_over


def test_an_adopted_monitors_run_aborted_by_an_operator_holds_automation_back() -> None:
    """Gap (issue 40 item 5): `adopt` rebuilt the request without the monitor's
    `campaign_workflow_id`, so an operator's abort of the monitor's adopted run set no hold (an
    own child's does: `hold_after`) and the monitor's next ask power-cycled the host again."""
    running = OperationRun(
        workflow_id=REPROVISION_ID,
        run_id="m1",
        operation="reprovision",
        requested_by=MONITOR_ID,
        started_at=T0,
    )
    new = entity()
    take_over(new, predecessor(running=(running,)), T0)
    assert new.current is not None and new.current.request.campaign_workflow_id == MONITOR_ID
    new.finish(new.current, "aborted by alice: no, debugging", T0 + timedelta(minutes=1))
    hold = new.automation_held_back
    assert hold is not None and (hold.by, hold.after) == ("alice", REPROVISION_ID), hold
    other = entity()  # a person's run adopted: no automation named, no hold
    take_over(other, predecessor(running=(running.model_copy(update={"requested_by": "bob"}),)), T0)
    assert other.current is not None and other.current.request.campaign_workflow_id is None


def test_a_request_awaiting_approval_outlives_its_entitys_terminate_and_still_awaits() -> None:
    """Re-attack item 2: the monitor's reprovision awaited approval; `temporal workflow terminate`
    of the entity lost it (the monitor kept saying it awaited approval, `approve` of the new
    entity answered "nothing awaits approval", recorded nowhere). The carried entry now holds the
    request whole and the new entity holds it awaiting, so `approve` (and withdraw) reach it."""
    old = entity()
    old.instance = "inst-1"
    monitor = f"monitor/{HOST}"
    asked = OperationRequest(requested_by=monitor, reason="DPU degraded", campaign_workflow_id=monitor)
    old.record_request(REPROVISION, asked, T0)
    assert old.needs_approval(REPROVISION, T0)
    before = predecessor(**old.model_dump())
    new = entity()
    words = take_over(new, before, T0 + timedelta(minutes=7))
    assert f"reprovision requested by {monitor}, still awaiting approval" in words, words
    assert new.current is not None and not new.current.approved
    assert new.current.request == asked and new.current.record.requested_at == T0
    approved = new.approve("carol", T0 + timedelta(minutes=8))
    assert approved.request.campaign_workflow_id == monitor  # its end is told to the monitor


def test_an_approved_or_adopted_operation_is_not_carried_as_awaiting() -> None:
    old = entity()
    old.record_request(REBOOT, OperationRequest(requested_by="alice"), T0)
    assert old.current is not None
    old.approve_at_once(old.current)
    assert carried(old)["awaiting"] is None
    new = entity()
    take_over(new, predecessor(running=(RUNNING_RESET,), **old.model_dump()), T0)
    assert new.current is not None and new.current.adopted_run == "run-7"  # adopted, not the request


def test_a_cleared_mark_leaves_no_power_it_on_advice_in_the_taken_over_words() -> None:
    """Re-attack item 5: once the mark was cleared, the taken-over line still quoted the cut run's
    `the host HOST is OFF: power it on (...)`. Now that advice reads as past too."""
    cut = _closed(RESET_ID, RunEnd(status="TERMINATED", last_phase="manual-intervention-required"), 2)
    new = entity()
    take_over(new, predecessor(ended=(cut,)), T0)
    assert f"the host {HOST} is OFF: power it on" in new.taken_over, new.taken_over
    assert new.read_at_rest("On")
    assert "power it on" not in new.taken_over and " is OFF" not in new.taken_over, new.taken_over
    assert f"the host {HOST} was OFF then" in new.taken_over, new.taken_over


def test_the_taken_over_words_say_what_became_of_the_request_they_said_still_awaited_approval() -> None:
    """Task B4: once the taken-over request was withdrawn, expired or approved, its "still
    awaiting approval" was false; the words now say what became of it (`no_longer_awaiting`)."""
    for decided, said in (
        ("withdraw", "awaiting approval then: withdrawn by bob: not now"),
        ("expire", "awaiting approval then: expired: not approved within 1:00:00"),
        ("approve", "awaiting approval then: approved by carol"),
    ):
        old = entity()
        old.instance = "t3"
        old.record_request(REBOOT, OperationRequest(requested_by="alice"), T0)
        new = entity()
        take_over(new, predecessor(**old.model_dump()), T0)
        assert new.current is not None and "reboot requested by alice, still awaiting" in new.taken_over
        if decided == "approve":
            new.approve("carol", T0)
        else:
            outcome = "withdrawn by bob: not now" if decided == "withdraw" else said.split("then: ")[1]
            new.finish(new.current, outcome, T0)
        assert f"reboot requested by alice, {said}" in new.taken_over, new.taken_over
        assert "still awaiting" not in new.taken_over, new.taken_over


def test_host_status_with_no_entity_names_the_request_its_ended_entity_held_awaiting() -> None:
    """Task B4: between the terminate and the next command, `host status` said nothing of the
    request awaiting approval that the ended entity's memo carries (the next entity holds it)."""
    old = entity()
    old.instance = "t3"
    old.record_request(REBOOT, OperationRequest(requested_by="alice", reason="kernel"), T0)
    words = awaiting_while_no_entity(carried(old), HOST)
    assert "(reboot requested by alice: kernel) awaits approval" in words, words
    assert f"metalflow approve {HOST}" in words and f"metalflow host abort {HOST}" in words, words
    assert awaiting_while_no_entity(carried(entity()), HOST) == ""
    assert awaiting_while_no_entity(None, HOST) == ""
