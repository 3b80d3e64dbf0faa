"""The two Temporal calls behind the fleet-wide BMC lease (`workflows/bmc_lease.py`).

`request_bmc_lease` queues a workflow run at the lease of its BMC: one signal-with-start of
`bmc-lease/<hash of the endpoint's origin and the task queue>` with the signal `acquire`,
carrying the run's ids, a request id and this worker's `METALFLOW_BMC_MAX_IN_FLIGHT`.
Signal-with-start starts the lease workflow when none runs and signals it otherwise, so the
first host of a BMC creates it and a lease that finished while idle comes back. A retried
attempt sends the same request id again; the lease ignores a request it already queued,
granted or saw released.

`find_closed_workflow_runs` describes the runs a lease believes hold its slots and names the
ones that are no longer running (completed, failed, terminated, timed out, or gone from the
namespace's retention): the lease takes their slots back.

Both use the worker's own client (`activity.client()`): no client to hold, no credentials.
Cost: `request_bmc_lease` one RPC per lease request; `find_closed_workflow_runs` one describe
per holder, and only while hosts wait for a full lease (every `reclaim_check_seconds`).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from metalflow import names
from metalflow.errors import InvalidInput
from metalflow.models.bmc_lease import (
    BMC_LEASE_ACQUIRE_SIGNAL,
    BMCLeaseState,
    LeaseRequest,
    RequestLeaseInput,
    RequestLeaseResult,
    WorkflowRunRefs,
)
from metalflow.settings import Settings

LEASE_WORKFLOW_TYPE = "BMCLeaseWorkflow"


class BMCLeaseActivities:
    """Lease requests and holder checks; holds the worker's settings (the per-BMC limit)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name="request_bmc_lease")
    async def request_bmc_lease(self, request: RequestLeaseInput) -> RequestLeaseResult:
        """Queue `request.holder` at its BMC's lease workflow, starting it when none runs."""
        info = activity.info()
        try:
            lease_id = names.bmc_lease_workflow_id(request.bmc.endpoint, info.task_queue)
        except ValueError as err:
            raise InvalidInput(f"BMC {request.bmc.bmc_id}: {err}") from None
        limit = self.settings.bmc_max_in_flight
        reclaim = self.settings.bmc_lease_reclaim_seconds
        await activity.client().start_workflow(
            LEASE_WORKFLOW_TYPE,
            BMCLeaseState(limit=limit, reclaim_check_seconds=reclaim),
            id=lease_id,
            task_queue=info.task_queue,
            start_signal=BMC_LEASE_ACQUIRE_SIGNAL,
            start_signal_args=[
                LeaseRequest(holder=request.holder, limit=limit, reclaim_check_seconds=reclaim)
            ],
            static_summary=f"fleet-wide lease of the BMC of {request.bmc.bmc_id} (at most {limit})",
        )
        return RequestLeaseResult(lease_workflow_id=lease_id, limit=limit)

    @activity.defn(name="find_closed_workflow_runs")
    async def find_closed_workflow_runs(self, runs: WorkflowRunRefs) -> WorkflowRunRefs:
        """The runs of `runs` that are not running any more."""
        client = activity.client()
        closed = []
        for run in runs.runs:
            activity.heartbeat()
            try:
                described = await client.get_workflow_handle(run.workflow_id, run_id=run.run_id).describe()
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                closed.append(run)
                continue
            if described.status != WorkflowExecutionStatus.RUNNING:
                closed.append(run)
        return WorkflowRunRefs(runs=tuple(closed))
