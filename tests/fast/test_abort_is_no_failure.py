"""An operator's abort is asked for, so nothing counts it as a failure (issue 38 item 4): the
operations metric labels it `aborted` (a rate of `outcome="failed"` does not rise with every
intended abort), the CLI's words for it start "aborted by <who>", and every host operation's run
completes an abort with a result the entity reads as `aborted` (no Failed run in Temporal)."""

from __future__ import annotations

import asyncio
from typing import get_type_hints

from temporalio import workflow
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

import workflows
from contracts import metrics
from contracts.errors import BMCRebootFailed, OperationAborted, RolloutAborted, abort_in_words
from contracts.host_requests import ENTITY_REQUESTS
from contracts.models.host import OperationEnd
from workflows import kernel
from workflows.host.outcome import ended_as


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


def test_every_host_operation_completes_an_abort_with_a_result_the_entity_reads() -> None:
    """Each operation the entity runs (a row of `ENTITY_REQUESTS`) gives a result for an abort
    (`aborted_result`: the run completes, no Failed run) of a type that carries `aborted`
    (`OperationEnd`, what the entity reads of every child)."""
    by_type = {workflow._Definition.must_from_class(cls).name: cls for cls in workflows.ALL}
    for row in ENTITY_REQUESTS:
        cls = by_type[row.child]
        returns = get_type_hints(cls.run)["return"]
        assert issubclass(returns, OperationEnd), f"{row.child} returns {returns.__name__}"
        assert cls.aborted_result is not kernel.Runbook.aborted_result, f"{row.child} fails an abort"


def test_the_entity_records_an_aborted_result_as_aborted_and_a_plain_one_as_completed() -> None:
    assert ended_as(OperationEnd(boot_generation=3)) == "completed"
    assert ended_as(OperationEnd(aborted="aborted by alice: wrong host; nothing deleted")) == (
        "aborted by alice: wrong host; nothing deleted"
    )
    said = ended_as(OperationEnd(aborted="firmware update of h1 aborted by bob in phase staging"))
    assert said.startswith("aborted") and "failed" not in said
