"""Attack 41a MEDIUM-2: a full reset (`host reset --both`, `--all-dpus --full`) whose host BMC
could not be reached ended saying "the host ... is OFF: metalflow turned it off (ForceOff ...)"
although nothing was sent and the host was On all along: the reset marked the host off before its
ForceOff was sent. Now the mark follows what the ForceOff activity says (`off_may_have_been_sent`,
workflows/parts/host_power.py): its error carries the `POWER_CYCLE_STEP` detail once a reset was
sent (by its last attempt or an earlier one), none when nothing was; a failure it did not answer
(a timeout, an abort or a cancel that cut it short) may have sent. Served activity:
tests/test_force_off_sent_said.py."""

from __future__ import annotations

from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from contracts.errors import activity_answer_details
from contracts.models.redfish import POWER_CYCLE_STEP
from workflows.parts.host_power import POWER_NOT_TOUCHED, PowerCustody, off_may_have_been_sent


def sent(err: BaseException) -> bool:
    """The reset's decision on its ForceOff's failure, as the workflow takes it."""
    return off_may_have_been_sent(activity_answer_details(err))


UNREACHABLE = "BMC host-001: cannot reach http://127.0.0.1:9 (ConnectError: All connection attempts failed)"


def activity_failure(cause: BaseException) -> ActivityError:
    err = ActivityError(
        "Activity task failed", scheduled_event_id=1, started_event_id=2, identity="w",
        activity_type="set_power_state", activity_id="1", retry_state=RetryState.MAXIMUM_ATTEMPTS_REACHED,
    )  # fmt: skip
    err.__cause__ = cause
    return err


def test_a_force_off_that_never_reached_the_bmc_leaves_the_host_untouched() -> None:
    err = activity_failure(ApplicationError(UNREACHABLE, type="BMCUnavailable"))
    assert not sent(err)
    custody = PowerCustody(host_id="host-001")
    if sent(err):
        custody.turned_off("ForceOff of host-001 around the DPU resets")
    assert not custody.is_off and custody.left() == POWER_NOT_TOUCHED  # no "is OFF", no "turned it off"


def test_a_force_off_sent_before_it_failed_may_have_left_the_host_off() -> None:
    for step in ("off_requested", "on_requested"):
        answered = ApplicationError(UNREACHABLE, {POWER_CYCLE_STEP: step}, type="BMCUnavailable")
        assert sent(activity_failure(answered)), step
    other = ApplicationError("x", {POWER_CYCLE_STEP: "started"}, {"other": 1}, type="BMCUnavailable")
    assert not sent(activity_failure(other))  # a step before any reset


def test_a_failure_the_activity_did_not_answer_may_have_sent() -> None:
    timed_out = TimeoutError("activity timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    assert sent(activity_failure(timed_out))
    assert sent(activity_failure(CancelledError("cancelled")))
    # An abort or a cancel of the run while the activity ran: raised by the run, not the activity.
    assert sent(ApplicationError("aborted by alice", type="OperationAborted"))
