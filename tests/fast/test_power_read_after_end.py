"""Issue 40, Done-when ("a host is never found off after any run ends unless its status says so in
words"): a run that can power the host off and ends without saying the host's power has the host's
power read once at its end (`takeover_rules.power_to_read`, `outcome_after_read`); what it found is
recorded as a run's own words are (`HostEntityState.finish`: the OFF mark). The end-to-end cases:
tests/test_cut_leaves_off_said.py. Before: a reboot or reset terminated with the host Off by its
hand left the host idle, `warnings: []`, no mark, `host list` `idle`.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.host_requests import REBOOT
from contracts.models.host import HostWorkflowInput, OperationRequest, PendingOperation
from workflows.host.state import HostEntityState
from workflows.host.takeover_rules import left_running_words, outcome_after_read, power_to_read

HOST = "host-002"
RUN = f"reboot/{HOST}/generation-3"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("operation", ["reboot", "reset", "firmware", "reprovision", "provision"])
@pytest.mark.parametrize(
    "outcome",
    [
        "terminated",
        "aborted",
        "failed: BMC answered 500",
        "ended, its end not read: gone",
        "aborted by bob: no",
    ],
)
def test_a_run_that_can_power_the_host_off_and_ends_without_saying_its_power_has_it_read(
    operation: str, outcome: str
) -> None:
    assert power_to_read(operation, outcome)


@pytest.mark.parametrize(
    ("operation", "outcome"),
    [
        ("reboot", "completed"),  # its finaliser powered the host on: no BMC request more
        ("reset", "terminated while the host was OFF (manual-intervention-required); the host h is OFF: x"),
        ("reboot", "aborted by bob: no; Done: ForceOff; the host is on"),
        ("reset", "failed: DPU x: ForceRestart refused; host power not touched by this run"),  # DPUs only
        ("remove", "terminated"),  # a removal never powers the host
    ],
)
def test_an_end_that_says_the_power_or_cannot_have_touched_it_reads_nothing(
    operation: str, outcome: str
) -> None:
    assert not power_to_read(operation, outcome)


def test_off_read_at_the_end_says_the_host_is_off_as_a_run_leaving_it_so_does() -> None:
    words = outcome_after_read("terminated", RUN, HOST, "Off")
    assert words == (
        f"terminated; read at its end: the host {HOST} is OFF: power it on (`metalflow bmc power {HOST} on`)"
    )


@pytest.mark.parametrize("power", ["On", "PoweringOn"])
def test_on_read_at_the_end_changes_nothing(power: str) -> None:
    assert outcome_after_read("terminated", RUN, HOST, power) == "terminated"


def test_a_power_not_read_at_the_end_says_the_host_may_be_off_naming_the_run() -> None:
    words = outcome_after_read("terminated", RUN, HOST, None, "BMC unreachable")
    assert f"the host {HOST} may be OFF after {RUN} (its power not read: BMC unreachable)" in words
    assert f"`metalflow bmc power {HOST} status`" in words and "is OFF" not in words
    assert "may be OFF" in outcome_after_read("terminated", RUN, HOST, "PoweringOff")


def _reboot_running() -> tuple[HostEntityState, PendingOperation]:
    state = HostEntityState.of(HostWorkflowInput(host_id=HOST))
    current = state.record_request(REBOOT, OperationRequest(requested_by="alice"), NOW)
    state.approve_at_once(current)
    state.starting(current)
    state.started(current, NOW, workflow_id=RUN)
    return state, current


def test_an_off_read_at_the_end_is_the_off_mark_naming_the_run() -> None:
    state, current = _reboot_running()
    state.finish(current, outcome_after_read("terminated", RUN, HOST, "Off"), NOW)
    assert state.left_off() == RUN and state.status().left_off_by == RUN
    assert state.power is not None and state.power.power_state == "Off"  # the baseline says it: not silent


def test_an_on_read_at_the_end_marks_nothing() -> None:
    state, current = _reboot_running()
    state.finish(current, outcome_after_read("terminated", RUN, HOST, "On"), NOW)
    assert state.left_off() is None


def test_a_power_not_read_at_the_end_lets_the_next_off_reading_at_rest_mark_the_host_off() -> None:
    """B1 with the power watch on: before, the first reading after such an end (Off) became the
    watch's new baseline and 4 readings of Off said nothing."""
    state, current = _reboot_running()
    state.finish(current, outcome_after_read("terminated", RUN, HOST, None, "BMC unreachable"), NOW)
    assert state.left_off() is None and state.maybe_off_after == RUN  # "may be OFF": no mark yet
    assert state.off_at_rest_after_unread(None) == "" and state.maybe_off_after == RUN  # unread: kept
    words = state.off_at_rest_after_unread("Off")
    assert words.startswith(f"the host read Off at rest after {RUN}") and state.left_off() == RUN
    assert state.off_at_rest_after_unread("Off") == ""  # once: the mark is the news


def test_an_on_reading_at_rest_ends_the_doubt_and_a_later_end_replaces_it() -> None:
    state, current = _reboot_running()
    state.finish(current, outcome_after_read("terminated", RUN, HOST, None, "no answer"), NOW)
    assert state.off_at_rest_after_unread("On") == "" and state.maybe_off_after == ""
    assert state.off_at_rest_after_unread("Off") == "" and state.left_off() is None
    state, current = _reboot_running()
    state.finish(current, outcome_after_read("terminated", RUN, HOST, None, "no answer"), NOW)
    state.current = current  # a later reboot of the host completes: it booted the host, so it was On
    state.reached(4, NOW)
    state.finish(current, "completed", NOW)
    assert state.maybe_off_after == ""


def test_a_reset_or_reboot_left_waiting_with_the_host_off_says_so_with_no_entity() -> None:
    """B2': `host status` after `host/HOST` was terminated named the reset waiting in
    manual-intervention-required and not that the host is OFF."""
    words = left_running_words(f"reset/{HOST}", "reset", "manual-intervention-required", HOST)
    assert words.startswith(f"reset/{HOST} (manual-intervention-required: the host {HOST} is OFF by its hand")
    assert f"`metalflow host retry {HOST}`" in words
    assert left_running_words(RUN, "reboot", "powering", HOST) == f"{RUN} (powering)"
    # a reprovision waits for a person for other reasons too (a DPU's error): nothing claimed
    plain = left_running_words(f"reprovision/{HOST}", "reprovision", "manual-intervention-required", HOST)
    assert plain == f"reprovision/{HOST} (manual-intervention-required)"
