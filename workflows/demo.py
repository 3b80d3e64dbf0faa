"""The foundation demo: one real run through worker, activity, signal and query.

Runbook: observe the worker (activity), wait for an operator's approval (signal), answer
status at every step (query), return what happened (result). `metalflow dev` drives it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.demo import DemoActivities
    from metalflow import names
    from metalflow.models.demo import (
        DemoApproval,
        DemoInput,
        DemoPhase,
        DemoResult,
        DemoStatus,
        WorkerFacts,
    )

DESCRIBE_WORKER_TIMEOUT = timedelta(seconds=30)
DESCRIBE_WORKER_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
APPROVAL_TIMEOUT_ERROR = "DemoApprovalTimeout"


@workflow.defn(name="DemoWorkflow")
class DemoWorkflow:
    """Observe the worker, wait for approval, return a summary."""

    @workflow.init
    def __init__(self, request: DemoInput) -> None:
        self._request = request
        self._phases: list[DemoPhase] = []
        self._worker: WorkerFacts | None = None
        self._approval: DemoApproval | None = None

    @workflow.run
    async def run(self, request: DemoInput) -> DemoResult:
        """Run the demo to completion."""
        started_at = workflow.now()
        self._enter(DemoPhase.INSPECTING_WORKER)
        self._worker = await self._describe_worker()
        self._enter(DemoPhase.AWAITING_APPROVAL)
        approval = await self._wait_for_approval(timedelta(seconds=request.approval_timeout_seconds))
        self._enter(DemoPhase.COMPLETED)
        return DemoResult(
            requested_by=request.requested_by,
            worker=self._worker,
            approval=approval,
            started_at=started_at,
            completed_at=workflow.now(),
            phases=list(self._phases),
        )

    @workflow.signal(name="approve")
    def approve(self, approval: DemoApproval) -> None:
        """Let the run finish; a second approval is ignored (the first one is recorded)."""
        if self._approval is None:
            self._approval = approval

    @workflow.query(name="status")
    def status(self) -> DemoStatus:
        """Where the run is and what it has seen so far."""
        return DemoStatus(
            phase=self._phases[-1] if self._phases else DemoPhase.INSPECTING_WORKER,
            requested_by=self._request.requested_by,
            worker=self._worker,
            approved_by=self._approval.approved_by if self._approval else None,
        )

    def _enter(self, phase: DemoPhase) -> None:
        self._phases.append(phase)
        workflow.upsert_search_attributes([names.PHASE.value_set(phase.value)])
        workflow.set_current_details(f"phase: {phase.value}")

    async def _describe_worker(self) -> WorkerFacts:
        return await workflow.execute_activity_method(
            DemoActivities.describe_worker,
            start_to_close_timeout=DESCRIBE_WORKER_TIMEOUT,
            retry_policy=DESCRIBE_WORKER_RETRY,
            summary="observe the worker process",
        )

    async def _wait_for_approval(self, timeout: timedelta) -> DemoApproval:
        try:
            await workflow.wait_condition(lambda: self._approval is not None, timeout=timeout)
        except TimeoutError:
            raise ApplicationError(
                f"no approval within {timeout}", type=APPROVAL_TIMEOUT_ERROR, non_retryable=True
            ) from None
        assert self._approval is not None
        return self._approval
