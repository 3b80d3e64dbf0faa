"""An early end's cause in words (issue 40, item 4): what ended a host operation is said by the
type and message of the error its activity or child raised, never Temporal's wrapping ("Activity
task failed"), in the entity's record of the outcome, the CLI's failure line and the error the
run itself ends with (with what it left). Real temporalio exception objects, chained as Temporal
delivers them (`__cause__`)."""

from __future__ import annotations

import asyncio

from temporalio.client import WorkflowFailureError
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from contracts.errors import BMCAuthenticationFailed, OperationAborted, cause_in_words, matches
from metalflow.hosts import failure_reason
from workflows.host.outcome import outcome_of
from workflows.kernel import Runbook

REJECTED = "the BMC of host-002-dpu-0 rejected the credentials (401 Unauthorized)"
IN_WORDS = f"BMCAuthenticationFailed: {REJECTED}"


def activity_failure(cause: BaseException) -> ActivityError:
    err = ActivityError(
        "Activity task failed", scheduled_event_id=1, started_event_id=2, identity="w",
        activity_type="reset_dpu", activity_id="1", retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )  # fmt: skip
    err.__cause__ = cause
    return err


def child_failure(cause: BaseException) -> ChildWorkflowError:
    err = ChildWorkflowError(
        "Child Workflow execution failed", namespace="default", workflow_id="reset/host-002/1",
        run_id="r", workflow_type="HostResetWorkflow", initiated_event_id=1, started_event_id=2,
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )  # fmt: skip
    err.__cause__ = cause
    return err


def workflow_failure(cause: BaseException) -> WorkflowFailureError:
    return WorkflowFailureError(cause=cause)


def test_an_activity_failure_is_said_by_the_error_its_activity_raised() -> None:
    assert cause_in_words(activity_failure(BMCAuthenticationFailed(REJECTED))) == IN_WORDS


def test_a_child_failure_is_said_by_the_error_at_the_bottom_of_its_chain() -> None:
    err = child_failure(activity_failure(BMCAuthenticationFailed(REJECTED)))
    assert str(err.cause) == "Activity task failed"  # what the entity recorded before
    assert cause_in_words(err) == IN_WORDS
    assert cause_in_words(workflow_failure(err)) == IN_WORDS  # the client's view of a parent


def test_the_first_application_error_says_it_so_a_run_s_own_words_win_over_the_inner_ones() -> None:
    own = ApplicationError(
        f"{REJECTED}. Done: nothing was reset; the host is on", type="BMCAuthenticationFailed"
    )
    own.__cause__ = activity_failure(BMCAuthenticationFailed(REJECTED))
    assert cause_in_words(child_failure(own)).endswith("Done: nothing was reset; the host is on")


def test_a_chain_without_an_application_error_is_said_by_its_innermost_error() -> None:
    timed = TimeoutError(
        "activity StartToClose timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=()
    )
    assert cause_in_words(activity_failure(timed)) == "TimeoutError: activity StartToClose timeout"
    assert cause_in_words(ValueError("")) == "ValueError"


def test_the_entity_records_a_failed_operation_with_its_cause_in_words() -> None:
    err = child_failure(activity_failure(BMCAuthenticationFailed(REJECTED)))
    assert outcome_of(err) == f"failed: {IN_WORDS}"
    assert "Activity task failed" not in outcome_of(err)


def test_the_cli_s_failure_line_names_the_cause() -> None:
    assert failure_reason(workflow_failure(activity_failure(BMCAuthenticationFailed(REJECTED)))) == IN_WORDS


def test_a_run_ends_with_the_activity_s_error_and_what_it_left() -> None:
    runbook = Runbook()
    runbook.left_behind = "Done: host-002-dpu-1: PowerCycle; the host is on"
    said = runbook.said_in_words(activity_failure(BMCAuthenticationFailed(REJECTED)))
    assert said is not None
    assert said.type == "BMCAuthenticationFailed" and said.non_retryable
    assert said.message == f"{REJECTED}. Done: host-002-dpu-1: PowerCycle; the host is on"
    assert matches(said, BMCAuthenticationFailed)  # a reader of its type still sees it


def test_a_run_s_own_error_an_abort_or_a_cancel_is_not_rewritten_by_the_kernel() -> None:
    runbook = Runbook()
    runbook.left_behind = "Done: nothing was reset; the host is on"
    assert runbook.said_in_words(OperationAborted("aborted by alice: debugging")) is None
    assert runbook.said_in_words(asyncio.CancelledError()) is None
    assert runbook.said_in_words(CancelledError("cancelled")) is None
    timed = TimeoutError("activity timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=())
    assert runbook.said_in_words(activity_failure(timed)) is None  # Temporal's words are the news
