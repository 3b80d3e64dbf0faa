"""Task B3 of issue 40: a cancel in Temporal stays a cancel in metalflow's words, one pure rule at a
time (the end-to-end case: tests/test_cancel_stays_a_cancel.py). Before: `--wait` said `failed:
CancelledError: Workflow cancelled` and the entity recorded `aborted`, read as an operator's abort
naming the requester."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts import names
from contracts.wording import CANCELLED_OUTCOME
from metalflow.cancelled import CANCELLED_WORDS, cancelled_words
from workflows.host.automation_hold import hold_after_run
from workflows.monitor.state import operator_said_no

HOST = "host-002"
T0 = datetime(2026, 11, 29, tzinfo=UTC)


def test_wait_says_a_cancel_with_the_runs_own_final_words() -> None:
    details = (
        "**cancelled**: cancelled (the workflow was cancelled). Done: host-002-dpu-0: PowerCycle; "
        "not reset: host-002-dpu-1 (its PowerCycle ended without an answer); the host is on"
    )
    words = cancelled_words(details)
    assert words.startswith(CANCELLED_WORDS) and "not by an operator's abort" in words, words
    assert words.endswith(
        ". Done: host-002-dpu-0: PowerCycle; not reset: host-002-dpu-1 (its PowerCycle ended "
        "without an answer); the host is on"
    ), words
    assert cancelled_words(None) == f"{CANCELLED_WORDS}: what it did and left could not be read"


def test_a_cancel_of_the_monitors_run_still_holds_automation_back_as_a_no() -> None:
    """The cancel's new words keep what "aborted" did: a person said no to the monitor's run."""
    monitor = names.monitor_workflow_id(HOST)
    assert operator_said_no(CANCELLED_OUTCOME, monitor)
    hold = hold_after_run(HOST, f"reprovision/{HOST}", monitor, CANCELLED_OUTCOME, T0)
    assert hold is not None and hold.by == "an operator", hold
