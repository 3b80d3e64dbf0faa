"""An operator's abort is asked for, so nothing counts it as a failure (issue 38 item 4): the
operations metric labels it `aborted` (a rate of `outcome="failed"` does not rise with every
intended abort), and the CLI's words for it start "aborted by <who>"."""

from __future__ import annotations

import asyncio

from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from contracts import metrics
from contracts.errors import BMCRebootFailed, OperationAborted, RolloutAborted, abort_in_words


def test_the_operations_metric_labels_an_abort_aborted_not_failed() -> None:
    assert metrics.outcome_of(OperationAborted("aborted by carol: maintenance")) == "aborted"
    assert metrics.outcome_of(BMCRebootFailed("the BMC of h1 rejected the credentials")) == "failed"
    assert metrics.outcome_of(asyncio.CancelledError()) == "cancelled"


def test_an_abort_is_said_from_who_aborted() -> None:
    run = WorkflowFailureError(cause=OperationAborted("aborted by alice: wrong host; left: nothing"))
    assert abort_in_words(run) == "aborted by alice: wrong host; left: nothing"
    rollout = RolloutAborted("rollout of default/inference aborted by bob: lunch; 1 step taken")
    assert abort_in_words(rollout) == "aborted by bob: lunch; 1 step taken"
    failed = ApplicationError("DPU d0 in Error", type="DPUFailed")
    assert abort_in_words(WorkflowFailureError(cause=failed)) is None
