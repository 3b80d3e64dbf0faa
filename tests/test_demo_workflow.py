"""The demo workflow end to end on a real Temporal: worker, activity, signal, query, result."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.testing import WorkflowEnvironment

from metalflow import names
from metalflow.models.demo import DemoApproval, DemoInput, DemoPhase, DemoResult
from metalflow.worker import build_worker
from workflows.demo import APPROVAL_TIMEOUT_ERROR, DemoWorkflow


async def _wait_for_phase(handle: WorkflowHandle[DemoWorkflow, DemoResult], phase: DemoPhase) -> None:
    for _ in range(100):
        if (await handle.query(DemoWorkflow.status)).phase == phase:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"workflow never reached {phase}")


async def test_demo_runs_activity_waits_for_signal_and_answers_queries(
    client: Client, task_queue: str
) -> None:
    workflow_id = names.demo_workflow_id(f"test-{task_queue[-12:]}")
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            DemoWorkflow.run,
            DemoInput(requested_by="alice"),
            id=workflow_id,
            task_queue=task_queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(names.OPERATION, "demo")]),
        )
        await _wait_for_phase(handle, DemoPhase.AWAITING_APPROVAL)
        status = await handle.query(DemoWorkflow.status)
        assert status.requested_by == "alice"
        assert status.approved_by is None
        assert status.worker is not None and status.worker.pid == os.getpid()

        # The id is the lock: a second run under the same business key is refused while it runs.
        with pytest.raises(WorkflowAlreadyStartedError):
            await client.start_workflow(
                DemoWorkflow.run, DemoInput(requested_by="bob"), id=workflow_id, task_queue=task_queue
            )

        await handle.signal(DemoWorkflow.approve, DemoApproval(approved_by="carol", note="ok"))
        result = await handle.result()

    assert result.requested_by == "alice"
    assert result.approval == DemoApproval(approved_by="carol", note="ok")
    assert result.phases == [DemoPhase.INSPECTING_WORKER, DemoPhase.AWAITING_APPROVAL, DemoPhase.COMPLETED]
    assert result.worker.pid == os.getpid() and result.worker.activity_attempt == 1
    assert result.started_at <= result.completed_at

    description = await handle.describe()
    assert description.typed_search_attributes.get(names.PHASE) == DemoPhase.COMPLETED.value
    assert description.typed_search_attributes.get(names.OPERATION) == "demo"
    history = await handle.fetch_history()
    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["describe_worker"]


async def test_demo_fails_plainly_when_nobody_approves(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = time_skipping_env.client
    async with build_worker(client, task_queue):
        with pytest.raises(WorkflowFailureError) as failure:
            await client.execute_workflow(
                DemoWorkflow.run,
                DemoInput(requested_by="alice", approval_timeout_seconds=timedelta(hours=2).total_seconds()),
                id=names.demo_workflow_id("unapproved"),
                task_queue=task_queue,
            )
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == APPROVAL_TIMEOUT_ERROR
    assert "2:00:00" in cause.message
