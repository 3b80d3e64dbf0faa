"""Issue 40, Done-when ("a host is never found off after any run ends unless its status says so in
words"), the doubt after an end whose power read was not answered ("may be OFF"): before, it was
said only inside `recent` and lasted until the power watch's next reading at rest (900 s by
default). Now the entity reads the host's power again sooner, with a backoff capped at the watch's
period (`power_rest.next_reading`, `HostEntityState.next_power_reading`, `doubt_unread`), and shows
the doubt while the host is idle (`maybe_off`: the memo entry `host list` reads, the status fields
`host status` warns from). The surfaces: tests/fast/test_host_list_render.py,
tests/fast/test_host_status_render.py; end to end: tests/test_cut_leaves_off_said.py.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from contracts.host_requests import REBOOT
from contracts.models.host import HostWorkflowInput, OperationRequest, PendingOperation
from workflows.host.power_rest import next_reading
from workflows.host.state import HostEntityState
from workflows.host.takeover_rules import outcome_after_read

HOST = "host-002"
RUN = f"reboot/{HOST}/generation-3"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_no_doubt_is_the_watch_period_and_a_full_reading() -> None:
    assert next_reading(900, 60, "", 0) == (900, False)
    assert next_reading(900, 60, "", 7) == (900, False)  # a count left over changes nothing


def test_a_doubt_is_read_again_after_60_s_then_doubling_until_the_watch_period() -> None:
    delays = [next_reading(900, 60, RUN, n) for n in range(6)]
    assert delays == [(60, True), (120, True), (240, True), (480, True), (900, False), (900, False)]


@given(
    every=st.floats(min_value=1, max_value=86_400),
    first=st.floats(min_value=0.1, max_value=86_400),
    unanswered=st.integers(min_value=0, max_value=10_000),
)
def test_a_doubt_never_waits_longer_than_the_watch_and_costs_a_bounded_number_of_host_reads(
    every: float, first: float, unanswered: int
) -> None:
    seconds, host_only = next_reading(every, first, RUN, unanswered)
    assert 0 < seconds <= every
    assert host_only == (seconds < every)
    reads = sum(1 for n in range(200) if next_reading(every, first, RUN, n)[1])  # before the watch's own
    assert reads <= max(0, math.ceil(math.log2(every / first)))


def _ended_unread(start: HostWorkflowInput) -> tuple[HostEntityState, PendingOperation]:
    state = HostEntityState.of(start)
    current = state.record_request(REBOOT, OperationRequest(requested_by="alice"), NOW)
    state.approve_at_once(current)
    state.starting(current)
    state.started(current, NOW, workflow_id=RUN)
    state.finish(current, outcome_after_read("terminated", RUN, HOST, None, "BMC unreachable"), NOW)
    return state, current


WATCHED = HostWorkflowInput(host_id=HOST, power_watch_seconds=900)


def test_an_end_that_left_the_power_unread_is_read_again_in_60_s_and_says_when() -> None:
    state, _ = _ended_unread(WATCHED)
    assert state.maybe_off() == RUN
    assert state.next_power_reading(NOW) == (60, True)
    status = state.status()
    assert status.maybe_off_after == RUN and status.power_read_at == NOW + timedelta(seconds=60)


def test_each_unanswered_re_read_doubles_the_wait_and_an_answer_ends_the_doubt() -> None:
    state, _ = _ended_unread(WATCHED)
    state.doubt_unread()
    state.doubt_unread()
    assert state.next_power_reading(NOW) == (240, True)
    assert state.off_at_rest_after_unread("On") == ""  # read: the doubt ends, nothing marked
    assert state.maybe_off() is None and state.maybe_off_unanswered == 0
    assert state.next_power_reading(NOW) == (900, False)
    state.doubt_unread()  # no doubt: nothing counted
    assert state.maybe_off_unanswered == 0


def test_a_re_read_of_off_marks_the_host_off_by_that_run() -> None:
    state, _ = _ended_unread(WATCHED)
    assert state.off_at_rest_after_unread("Off").startswith(f"the host read Off at rest after {RUN}")
    assert state.left_off() == RUN and state.maybe_off() is None


def test_a_later_end_starts_the_backoff_afresh_and_an_operation_hides_the_doubt() -> None:
    state, current = _ended_unread(WATCHED)
    for _ in range(5):
        state.doubt_unread()
    state.current = current  # another run of the host: busy, its own reads are the news
    assert state.maybe_off() is None
    state.finish(current, outcome_after_read("failed: x", RUN, HOST, None, "no answer"), NOW)
    assert state.maybe_off() == RUN and state.next_power_reading(NOW) == (60, True)


def test_without_a_power_watch_nothing_says_when_it_is_read_again() -> None:
    state, _ = _ended_unread(HostWorkflowInput(host_id=HOST))
    assert state.maybe_off() == RUN and state.status().power_read_at is None


def test_in_maintenance_a_doubt_waits_for_the_watch_and_costs_no_timer_a_minute() -> None:
    """No reading at all in maintenance (a person's power actions are expected): a 60 s timer there
    would fire for nothing, 5 history events a minute."""
    from contracts.models.host import MaintenanceRequest

    state, _ = _ended_unread(WATCHED)
    state.set_maintenance(MaintenanceRequest(on=True, requested_by="bob", reason="cabling"), NOW)
    assert state.maybe_off() == RUN and state.next_power_reading(NOW) == (900, False)
    state.set_maintenance(MaintenanceRequest(on=False, requested_by="bob"), NOW)
    assert state.next_power_reading(NOW) == (60, True)


def _another_end(
    state: HostEntityState, current: PendingOperation, outcome: str, *, ran: bool = True
) -> None:
    record = current.record.model_copy(update={"started_at": NOW if ran else None})
    state.current = current.model_copy(update={"record": record})
    state.finish(state.current, outcome, NOW)


def test_an_end_that_says_nothing_of_the_host_power_leaves_the_doubt() -> None:
    """Before: any later end cleared it (`finish`), e.g. a request withdrawn unstarted or a reset of
    DPUs only, and the host read `idle` again while it may still be OFF."""
    state, current = _ended_unread(WATCHED)
    state.doubt_unread()
    for outcome, ran in [
        ("withdrawn by bob: not now", False),  # never started: it touched nothing
        ("expired: not approved within 1 day, 0:00:00", False),
        ("failed: DPU x: ForceRestart refused; host power not touched by this run", True),
        ("completed", True),  # completed without a boot generation: powered nothing
    ]:
        _another_end(state, current, outcome, ran=ran)
        assert state.maybe_off() == RUN and state.maybe_off_unanswered == 1, outcome


def test_an_end_that_says_the_host_power_ends_the_doubt() -> None:
    for outcome in [
        "aborted by bob: no; Done: ForceOff; the host is on",
        f"terminated while the host was OFF (manual-intervention-required); the host {HOST} is OFF: x",
        "terminated",  # a run that can power the host off, its end read and answered: not Off
    ]:
        state, current = _ended_unread(WATCHED)
        _another_end(state, current, outcome)
        assert state.maybe_off() is None and state.maybe_off_unanswered == 0, outcome
    state, current = _ended_unread(WATCHED)
    state.reached(4, NOW)  # it booted the host
    _another_end(state, current, "completed")
    assert state.maybe_off() is None


def test_a_power_action_through_our_cli_at_rest_ends_the_doubt() -> None:
    state, _ = _ended_unread(WATCHED)
    assert state.power_set_at_rest() and state.maybe_off() is None
    assert not state.power_set_at_rest()  # none left
