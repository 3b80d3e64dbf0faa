"""The pure decisions of issue 39 item 3 (power actions nobody here took): a change of the host's
power at rest (workflows/host/power_rest.py), the reboot's one decision when another actor turned
the host On during its power-down (workflows/host_reboot/failure.py), the power watch's setting
(contracts/host_entity.py) and the Event it is told by (metalflow/runtime/events.py); a host
found powered by someone else just before a reboot (its first read against the entity's last
reading), and the reads of a long power-down wait (workflows/host_reboot/failure.py); the
reading handed to every operation's first reboot (workflows/host/state.py,
workflows/parts/reboot_rounds.py); the baseline an operation's end leaves, the power it left the
host in as of its end (workflows/host/power_rest.py `after_operation`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from contracts.errors import PowerContested
from contracts.events import PhaseChange
from contracts.host_entity import DEFAULT_POWER_WATCH_SECONDS, with_power_watch
from contracts.host_requests import FIRMWARE, PROVISION, REBOOT, REPROVISION, EntityRequest
from contracts.host_requests import RESET as RESET_REQUEST
from contracts.models.host import (
    EntityRequestBody,
    FirmwareInput,
    FirmwareRequest,
    HostOperationInput,
    HostRebootInput,
    HostRebootResult,
    HostResetInput,
    HostWorkflowInput,
    MaintenanceRequest,
    OperationPolicy,
    OperationRequest,
    ResetRequest,
    ResetTarget,
)
from contracts.models.power_watch import PowerAtRest
from metalflow.runtime.events import describe
from workflows.host.power_rest import (
    after_operation,
    after_power_set,
    after_reading,
    baseline,
    forget_baseline,
    left_by_operation,
    unplanned_at_rest,
)
from workflows.host.state import HostEntityState
from workflows.host_reboot.failure import (
    bmc_failure_reason,
    decide_on_power_found,
    decide_on_power_taken_over,
    power_down_reads,
    seen_on_words,
)
from workflows.parts.reboot_rounds import joined_unplanned, with_reading

T0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=15)
T2 = T1 + timedelta(minutes=5)
RESET = T0 - timedelta(days=1)


def seen(state: str, reset: datetime | None = RESET) -> PowerAtRest:
    return PowerAtRest(power_state=state, last_reset_time=reset, read_at=T0)


def test_the_first_reading_is_a_baseline_not_a_change() -> None:
    assert unplanned_at_rest("h1", None, "Off", RESET, T1) is None
    power, words = after_reading("h1", None, "On", RESET, T1)
    assert words is None and power.power_state == "On" and power.read_at == T1


def test_off_at_rest_is_a_change_nobody_here_made() -> None:
    words = unplanned_at_rest("h1", seen("On"), "Off", RESET, T1)
    assert words is not None and "h1 went On -> Off" in words and "no metalflow operation running" in words
    assert unplanned_at_rest("h1", seen("Off"), "On", RESET, T1) is not None  # on at rest too


def test_a_reset_at_rest_is_told_by_its_last_reset_time() -> None:
    words = unplanned_at_rest("h1", seen("On"), "On", T0 + timedelta(minutes=3), T1)
    assert words is not None and "was reset (LastResetTime 2026-11-29T07:03:00Z)" in words
    assert unplanned_at_rest("h1", seen("On"), "On", RESET, T1) is None  # nothing moved
    assert unplanned_at_rest("h1", seen("On", None), "On", T0, T1) is None  # no mark to compare


def test_an_operation_of_ours_forgets_the_baseline_but_not_what_was_told() -> None:
    power, words = after_reading("h1", seen("On"), "Off", RESET, T1)
    assert words and power.unplanned == words
    after = forget_baseline(power)
    assert after is not None and after.power_state == "" and after.unplanned == words
    # our operation turned it On again: the next reading is a new baseline, no change told
    again, told = after_reading("h1", after, "On", T0, T1 + timedelta(minutes=15))
    assert told is None and again.unplanned == words and again.power_state == "On"
    assert forget_baseline(None) is None


def test_the_reboot_counts_their_on_as_the_cycle_and_never_forces_off_again() -> None:
    words = decide_on_power_taken_over("h1", 4, "On before our On, during the power-down wait")
    assert "h1 was turned On by someone else" in words
    assert "counted as the power cycle of generation 4" in words and "no ForceOff sent again" in words


def test_a_contested_power_is_named_for_a_person() -> None:
    reason = bmc_failure_reason("h1", PowerContested("BMC h1: the host is On again after 2 ForceOffs"))
    assert reason.startswith("the BMC of h1 keeps being turned back On by another actor (PowerContested:")
    assert isinstance(PowerContested("x"), ApplicationError) and PowerContested("x").non_retryable


def test_the_watch_interval_is_a_setting_with_a_stated_default() -> None:
    bare = HostWorkflowInput(host_id="host-001")
    assert bare.power_watch_seconds == 0  # a history from before the watch replays without one
    assert with_power_watch(bare, {}).power_watch_seconds == DEFAULT_POWER_WATCH_SECONDS == 900
    assert with_power_watch(bare, {"METALFLOW_POWER_WATCH_SECONDS": "60"}).power_watch_seconds == 60
    assert with_power_watch(bare, {"METALFLOW_POWER_WATCH_SECONDS": "0"}).power_watch_seconds == 0
    given = HostWorkflowInput(host_id="host-001", power_watch_seconds=5)
    assert with_power_watch(given, {"METALFLOW_POWER_WATCH_SECONDS": "60"}).power_watch_seconds == 5


@pytest.mark.parametrize("bad", ["soon", "-1", "inf", "nan"])
def test_a_bad_watch_interval_is_refused_naming_the_variable(bad: str) -> None:
    with pytest.raises(ValueError, match="METALFLOW_POWER_WATCH_SECONDS"):
        with_power_watch(HostWorkflowInput(host_id="host-001"), {"METALFLOW_POWER_WATCH_SECONDS": bad})


@pytest.mark.parametrize(
    ("workflow_type", "workflow_id", "action"),
    [("HostWorkflow", "host/h1", "Power"), ("HostRebootWorkflow", "reboot/h1/generation-2", "PowerCycle")],
)
def test_unplanned_power_is_a_warning_event_on_the_host(
    workflow_type: str, workflow_id: str, action: str
) -> None:
    change = PhaseChange(
        workflow_type=workflow_type, workflow_id=workflow_id, run_id="r", phase="unplanned-power",
        details="unplanned power: h1 went On -> Off", at=T1, history_length=5,
    )  # fmt: skip
    spec = describe(change, "dpf")
    assert spec is not None and (spec.reason, spec.type, spec.action) == ("UnplannedPower", "Warning", action)
    assert spec.regarding is not None and spec.regarding.name == "node-h1"


# -- before an operation: the reboot's first read against the entity's last reading ---------------


def test_a_host_found_off_by_the_reboot_after_the_entity_read_it_on_is_someone_elses_off() -> None:
    words = decide_on_power_found("h1", 5, seen("On"), "Off")
    assert words is not None and words.startswith("unplanned power: h1 was found Off by someone else")
    assert "before reboot generation 5 began" in words
    assert "its entity read it On at 2026-11-29T07:00:00Z, no power action of metalflow since" in words
    assert "metalflow did not send that Off. Only On was sent" in words
    assert "counted as the power cycle of generation 5" in words
    on = decide_on_power_found("h1", 5, seen("Off"), "On")  # turned On by someone too
    assert on is not None and "h1 was found On by someone else" in on and "did not send that On" in on


@pytest.mark.parametrize(
    ("before", "found"),
    [
        (None, "Off"),  # no reading since our last operation (or the watch is off)
        (PowerAtRest(), "Off"),  # a baseline forgotten by an operation's end
        (seen("On"), "On"),  # as read
        (seen("Off"), "Off"),
        (seen("On"), ""),  # not the first attempt's first read: not said to be theirs
        (seen("On"), "PoweringOff"),  # a transition: no decision on it
    ],
)
def test_nothing_is_told_without_a_reading_to_compare_or_a_difference(
    before: PowerAtRest | None, found: str
) -> None:
    assert decide_on_power_found("h1", 5, before, found) is None


def test_the_entity_hands_its_baseline_to_a_reboot_and_shows_what_the_reboot_found() -> None:
    state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=900))
    reboot = state.record_request(REBOOT, OperationRequest(requested_by="alice"), T1)
    state.approve_at_once(reboot)
    never_read = state.child_input(reboot)
    assert isinstance(never_read, HostRebootInput) and never_read.power_before is None
    state.power, _ = after_reading("h1", None, "On", RESET, T0)
    read = state.child_input(reboot)
    assert isinstance(read, HostRebootInput) and read.power_before is not None
    assert read.power_before.power_state == "On" and read.power_before.read_at == T0
    state.started(reboot, T1)
    state.reached(1)
    state.finish(reboot, "completed", T2)
    assert state.found_unplanned("") is False and state.status().unplanned_power == ""
    assert state.found_unplanned("unplanned power: h1 was found Off by someone else ...") is True
    assert state.status().unplanned_power == "unplanned power: h1 was found Off by someone else ..."
    after = baseline(state.power)  # the reboot's own On, as of its end: the next reading's baseline
    assert after is not None and (after.power_state, after.read_at) == ("On", T2)


@pytest.mark.parametrize(
    ("kind", "request_body"),
    [
        (REPROVISION, OperationRequest(requested_by="alice")),
        (PROVISION, OperationRequest(requested_by="alice")),
        (RESET_REQUEST, ResetRequest(requested_by="alice", target=ResetTarget.HOST)),
        (FIRMWARE, FirmwareRequest(requested_by="alice", target_version="1.2", image_uri="http://i/b.bfb")),
    ],
)
def test_the_entity_hands_its_baseline_to_every_operation_that_reboots(
    kind: EntityRequest[Any], request_body: EntityRequestBody
) -> None:
    """Each operation's input carries the reading (to its first reboot: `with_reading`)."""
    state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=900))
    state.power, _ = after_reading("h1", None, "On", RESET, T0)
    current = state.record_request(kind, request_body, T1)
    state.approve_at_once(current)
    child = state.child_input(current)
    assert isinstance(child, HostOperationInput | HostResetInput | FirmwareInput)
    assert child.power_before is not None and child.power_before.power_state == "On", child
    assert child.power_before.read_at == T0


def test_only_an_operations_first_reboot_is_handed_the_reading_and_its_findings_are_kept() -> None:
    reboot = HostRebootInput(host_id="h1", boot_generation=3, requested_by="op")
    assert with_reading(reboot, seen("On")).power_before == seen("On")
    assert with_reading(reboot, None) is reboot  # a later reboot: ours came since, none handed
    own = reboot.model_copy(update={"power_before": seen("Off")})
    assert with_reading(own, seen("On")).power_before == seen("Off")  # a caller's own is kept
    found: list[str] = []
    result = HostRebootResult(host_id="h1", boot_generation=3, method="bmc:PowerCycle", finished_at=T1)
    joined_unplanned(found, result)
    assert found == []
    said = result.model_copy(update={"unplanned_power": "unplanned power: h1 was found Off ..."})
    joined_unplanned(found, said)
    joined_unplanned(found, said)  # the same reboot read twice (a stop, then its end): once
    assert found == ["unplanned power: h1 was found Off ..."]


def test_maintenance_forgets_the_baseline_a_persons_power_actions_are_expected() -> None:
    state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=900))
    state.power, _ = after_reading("h1", None, "On", RESET, T0)
    assert baseline(state.power) is not None
    state.set_maintenance(MaintenanceRequest(on=True, reason="fan", requested_by="bob"), T1)
    assert baseline(state.power) is None  # no Off of theirs taken for someone else's later


# -- an operation's end: the power it left the host in is the baseline ----------------------------

LEFT_OFF = "failed: power-on refused; the host h1 is OFF: power it on and `metalflow host retry h1`"


@pytest.mark.parametrize(
    ("outcome", "cycled", "left"),
    [
        ("completed", True, "On"),  # its cycle ended On (a power-on that succeeded, or a read of On)
        (LEFT_OFF, True, "Off"),
        (LEFT_OFF, False, "Off"),
        ("aborted by bob: stop; " + LEFT_OFF[8:], False, "Off"),
        ("completed", False, ""),  # never powered the host (a removal): as before it
        ("failed: BMC unreachable", False, None),  # unknown: the next reading is the baseline
        ("failed: DPF timed out", True, None),
        ("aborted by bob: stop", True, None),
        ("terminated", False, None),
    ],
)
def test_what_an_ended_operation_left_the_host_in_is_read_from_its_end_alone(
    outcome: str, cycled: bool, left: str | None
) -> None:
    assert left_by_operation(outcome, cycled) == left


def test_an_off_just_after_our_reboot_ended_is_someone_elses_not_the_new_baseline() -> None:
    """The attack: `host reboot --wait` completed, a ForceOff by hand a second later; the watch's
    next reading (Off) was taken as the baseline and never told."""
    state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=30))
    reboot = state.record_request(REBOOT, OperationRequest(requested_by="alice"), T0)
    state.approve_at_once(reboot)
    state.started(reboot, T0)
    state.reached(1)
    state.finish(reboot, "completed", T1)
    state.power, words = after_reading("h1", state.power, "Off", None, T1 + timedelta(seconds=30))
    assert words is not None and "went On -> Off" in words and f"between {T1:%Y-%m-%dT%H:%M:%S}" in words


def test_a_host_our_run_left_off_turned_on_by_someone_else_is_told() -> None:
    state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=30))
    state.power, _ = after_reading("h1", None, "On", RESET, T0)
    reset = state.record_request(RESET_REQUEST, ResetRequest(requested_by="a", target=ResetTarget.HOST), T0)
    state.approve_at_once(reset)
    state.started(reset, T0)
    state.finish(reset, LEFT_OFF, T1)
    assert state.power is not None and (state.power.power_state, state.power.read_at) == ("Off", T1)
    _, words = after_reading("h1", state.power, "On", RESET, T2)
    assert words is not None and "went Off -> On" in words


def test_the_off_warnings_own_advice_through_our_cli_is_planned_and_clears_the_mark() -> None:
    """`metalflow bmc power HOST on` after a run left the host OFF (the WARNING's advice): the
    command tells the entity (`after_power_set`), the next reading On is no change and clears the
    OFF mark. Before, that reading said `went Off -> On ... metalflow did not cause it`."""
    state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=30))
    state.power, _ = after_reading("h1", None, "On", RESET, T0, {"d1": "m1"})
    reset = state.record_request(RESET_REQUEST, ResetRequest(requested_by="a", target=ResetTarget.HOST), T0)
    state.approve_at_once(reset)
    state.started(reset, T0)
    state.finish(reset, LEFT_OFF, T1)
    told = "unplanned power: h1 went On -> Off ..."
    state.power = after_power_set(state.power.model_copy(update={"unplanned": told}), "On", T2)
    assert state.power == PowerAtRest(power_state="On", read_at=T2, unplanned=told)  # no marks: they booted
    assert state.read_at_rest("On", T2 + timedelta(seconds=30))  # the mark clears, as README says
    state.power, words = after_reading("h1", state.power, "On", RESET, T2 + timedelta(seconds=30))
    assert words is None and state.left_off() is None
    _, off = after_reading("h1", state.power, "Off", RESET, T2 + timedelta(seconds=60))
    assert off is not None and "went On -> Off" in off  # someone else's Off after it is still told
    assert after_power_set(None, "Off", T2) == PowerAtRest(power_state="Off", read_at=T2)


def test_a_run_that_never_powered_the_host_keeps_the_baseline_before_it() -> None:
    state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=30))
    state.power, _ = after_reading("h1", None, "On", RESET, T0)
    before = state.power
    withdrawn = state.record_request(REBOOT, OperationRequest(requested_by="alice"), T0)
    state.finish(withdrawn, "withdrawn by alice", T1)  # never started
    assert state.power == before
    assert after_operation(before, "completed", True, False, T2) == before  # no cycle (a removal)
    assert after_operation(None, "completed", True, False, T2) is None  # none before: none after
    told = before.model_copy(update={"unplanned": "unplanned power: h1 went On -> Off ..."})
    unknown = after_operation(told, "failed: BMC unreachable", True, True, T2)
    assert unknown == forget_baseline(told)  # the next reading is the baseline
    on = after_operation(told, "completed", True, True, T2)
    assert on is not None and on.unplanned == told.unplanned  # what was told stays shown
    assert (on.power_state, on.last_reset_time, on.read_at) == ("On", None, T2)


# -- during the power-down wait: a bounded read interval ------------------------------------------


def test_the_power_down_wait_is_read_every_interval_never_at_its_end() -> None:
    assert power_down_reads(300, 30) == [30.0 * i for i in range(1, 10)]  # 9 reads
    assert len(power_down_reads(120, 30)) == 3  # the default wait
    assert power_down_reads(30, 30) == [] and power_down_reads(5, 30) == []  # no read within
    assert power_down_reads(7, 2) == [2, 4, 6]
    assert OperationPolicy().power_down_read_seconds == 30


@pytest.mark.parametrize("bad", [0, 0.5, -1, 3601, float("inf"), float("nan")])
def test_a_bad_power_down_read_interval_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="power_down_read_seconds"):
        OperationPolicy(power_down_read_seconds=bad)


def test_an_on_found_during_the_wait_is_said_as_seen_by_our_read_never_on_at_the_reads_time() -> None:
    words = seen_on_words(T1, T0, 60, 300)
    assert words == (
        "On (seen by our read at 2026-11-29T07:15:00Z; Off at our read at 2026-11-29T07:00:00Z), "
        "60 s into our power-down wait of 300 s, before our On"
    )
    assert "On at" not in decide_on_power_taken_over("h1", 4, words)


def test_an_operation_that_ends_in_maintenance_sets_no_baseline() -> None:
    """The attack: maintenance on, `host reboot --in-maintenance` completed, a ForceOff by hand,
    maintenance off: the reboot's On (as of its end) was the baseline, so the first reading after
    maintenance told the person's Off as unplanned. An operation that ends inside a maintenance
    sets none; the first reading after maintenance off is the baseline."""
    for approved_before in (False, True):  # asked in maintenance, or in flight as it began
        state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=30))
        state.power, _ = after_reading("h1", None, "On", RESET, T0)
        on = MaintenanceRequest(on=True, reason="fan", requested_by="bob")
        if not approved_before:
            state.set_maintenance(on, T0)
        body = OperationRequest(requested_by="bob", in_maintenance=not approved_before)
        reboot = state.record_request(REBOOT, body, T0)
        state.approve_at_once(reboot)
        state.started(reboot, T0)
        if approved_before:
            state.set_maintenance(on, T0)
        state.reached(1)
        state.finish(reboot, "completed", T1)
        assert baseline(state.power) is None, approved_before
        state.set_maintenance(MaintenanceRequest(on=False, requested_by="bob"), T2)
        state.power, words = after_reading("h1", state.power, "Off", RESET, T2 + timedelta(seconds=30))
        assert words is None and state.power.power_state == "Off"  # the person's Off: the new baseline
    assert after_operation(seen("On"), "completed", True, True, T2, in_maintenance=True) == forget_baseline(
        seen("On")
    )


def test_a_reset_by_hand_right_after_our_reboot_is_told_by_the_mark_the_reboot_read() -> None:
    """The attack: `host reboot --wait` on a BMC with PowerCycle, a ForceRestart by hand half a
    second later (the host stays On): the baseline the reboot left had no LastResetTime, so the
    next reading compared PowerState only and never told it. The reboot's result carries the
    mark its last read showed; the baseline keeps it."""
    ours, theirs = T1 - timedelta(seconds=2), T1 + timedelta(seconds=1)
    state = HostEntityState.of(HostWorkflowInput(host_id="h1", power_watch_seconds=30))
    reboot = state.record_request(REBOOT, OperationRequest(requested_by="alice"), T0)
    state.approve_at_once(reboot)
    state.started(reboot, T0)
    state.reached(1)
    state.finish(reboot, "completed", T1, last_reset=ours)
    assert state.power is not None and state.power.last_reset_time == ours
    _, words = after_reading("h1", state.power, "On", theirs, T2)
    assert words is not None and "h1 was reset (LastResetTime" in words
    _, none = after_reading("h1", state.power, "On", ours, T2)
    assert none is None  # the mark our reboot read: nothing since
    left_off = after_operation(None, LEFT_OFF, True, True, T2, last_reset=ours)
    assert left_off is not None and left_off.last_reset_time is None  # only a run that left it On
