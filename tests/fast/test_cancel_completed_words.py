"""Attack L6 (issue 40, Deliver 2): a `host reboot` cancelled in Temporal after its ForceOff
completes (the BMC took the ForceOff, its cancel sent the On: a power cycle, its generation
reached), and before, the host's record said only `reboot completed`, and its method `bmc:
ForceOff+On, cut short: On sent at once` where README said `(On sent by its cancel)`. Now the
method says the cancel sent the On, the result says it was cancelled, and the record says both."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.models.host import HostRebootResult
from contracts.wording import (
    COMPLETED_OUTCOME,
    completed_outcome,
    cut_short_words,
    is_completed,
    reboot_cancel_words,
)
from workflows.host.outcome import ended_as
from workflows.host.power_rest import left_by_operation

CANCEL_SENT_ON = "cancelled in Temporal after its ForceOff; its cancel sent On"


def test_a_cycle_its_cancel_cut_short_says_the_cancel_sent_the_on() -> None:
    method = f"ForceOff+On{cut_short_words(True)}"
    assert method == "ForceOff+On (On sent by its cancel)"  # README's words
    assert f"ForceOff+On{cut_short_words(False)}" == "ForceOff+On, cut short: On sent at once"  # an abort's
    assert reboot_cancel_words(method, True) == CANCEL_SENT_ON
    assert reboot_cancel_words("ForceOff+On", True) == (
        "cancelled in Temporal during its power cycle, which ended first"
    )
    assert reboot_cancel_words("ForceOff+On, cut short: On sent at once", False) == ""


def test_the_hosts_record_says_the_reboot_was_cancelled_and_completed_by_its_cancels_on() -> None:
    result = HostRebootResult(
        host_id="h", boot_generation=5, method="bmc:ForceOff+On (On sent by its cancel)",
        finished_at=datetime(2026, 11, 30, tzinfo=UTC), cancelled=CANCEL_SENT_ON,
    )  # fmt: skip
    outcome = ended_as(result)
    assert outcome == (
        "completed (cancelled in Temporal after its ForceOff; its cancel sent On: "
        "power-cycled to generation 5)"
    )
    # Still a completed operation to the entity: the host's power after it is On (no read owed).
    assert is_completed(outcome) and left_by_operation(outcome, cycled=True) == "On"
    uncancelled = result.model_copy(update={"cancelled": "", "method": "bmc:ForceOff+On"})
    assert ended_as(uncancelled) == COMPLETED_OUTCOME == completed_outcome("", 5)
    assert not is_completed("completed-ish") and not is_completed("cancelled (the workflow was cancelled)")
