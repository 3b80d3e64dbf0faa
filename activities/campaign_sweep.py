"""The campaign's sweep and abort, mixed into `CampaignActivities` (activities/campaign.py): how
the operations it asked for ended when it did not hear (`sweep_campaign_hosts`), which wait for
an operator, and the abort of its requests and operations (`abort_campaign_hosts`). Both reach
the host's entity only by its one client (`entities`, also used by the requests; its refusals
told apart by their error type) and read the operation's own workflow, so an operation whose
entity is gone (terminated, reset) is still seen to end.

Cost: per sweep one describe per in-flight host (plus a describe and a query of the entity once
its operation ended, or one query of a running operation's phase: one waiting for an operator is
reported), PARALLEL_SWEEP hosts at once, heartbeating; an abort, one update per host (two for an
approval raced), as many at once.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.heartbeat import beats_while_running, heartbeating
from contracts.errors import OperationAborted, OperationInstalling, OperationStarted, matches
from contracts.host_entity import EntityMissing, EntityRefused, HostEntityClient
from contracts.models.campaign import (
    AbortAnswer,
    AbortHostsInput,
    AbortHostsResult,
    Failure,
    HostFinished,
    InFlight,
    SweepInput,
    SweepResult,
)
from contracts.models.control import ABORT_UPDATE, STATUS_QUERY, OperatorAnswer
from contracts.models.host import (
    MANUAL_INTERVENTION_REQUIRED,
    HostStatus,
    OperationAbortRequest,
    WithdrawRequest,
)
from contracts.with_start import execute_update
from contracts.wording import aborted_outcome
from contracts.workflow_api import HostWorkflow

PARALLEL_SWEEP: Final = 100  # in-flight hosts read at once (each read is one to three RPCs)


class CampaignSweep:
    """Sweep and abort; the Temporal client is set by `CampaignActivities`."""

    temporal: Client

    def entities(self) -> HostEntityClient:
        """The hosts' entities (the requests use it too); one a request creates runs on this
        worker's queue."""
        return HostEntityClient(self.temporal, activity.info().task_queue)

    @activity.defn(name="sweep_campaign_hosts")
    async def sweep_campaign_hosts(self, request: SweepInput) -> SweepResult:
        """Operations that ended without the campaign hearing of it, with their outcome, and
        running ones that wait for an operator (Phase `manual-intervention-required`).

        A running operation is read from its own workflow (one describe), so an operation whose
        entity is gone (terminated, reset) is still seen to end; its outcome comes from the
        entity's record when the entity runs, else from the operation's close. A request still
        awaiting approval is read from the entity."""
        gate = asyncio.Semaphore(PARALLEL_SWEEP)

        async def read(flight: InFlight) -> tuple[HostFinished | None, Failure | None]:
            async with gate:
                waits = None
                if flight.awaiting_approval or not flight.workflow_id:
                    outcome = await self._approval_outcome(flight)
                else:
                    outcome = await self._operation_outcome(flight)
                    if outcome is None and (why := await self._operator_needed(flight.workflow_id)):
                        waits = Failure(host_id=flight.host.host_id, reason=f"needs an operator: {why}")
            done = None
            if outcome is not None:
                done = HostFinished(
                    host_id=flight.host.host_id, workflow_id=flight.workflow_id, outcome=outcome
                )
            return done, waits

        async with heartbeating():
            read_all = await asyncio.gather(*(read(f) for f in request.in_flight))
        finished = [done for done, _ in read_all if done is not None]
        needs_operator = [waits for _, waits in read_all if waits is not None]
        return SweepResult(finished=tuple(finished), needs_operator=tuple(needs_operator))

    async def _operator_needed(self, workflow_id: str) -> str | None:
        """Why the operation waits for an operator, or None when it does not (or cannot be read:
        the next sweep asks again). Every host operation answers `status` with `phase` and
        `manual_intervention_reason`."""
        try:
            status = await self.temporal.get_workflow_handle(workflow_id).query(STATUS_QUERY)
        except (RPCError, WorkflowQueryFailedError) as err:
            activity.logger.info("status of %s not read: %s", workflow_id, err)
            return None
        if not isinstance(status, dict) or status.get("phase") != MANUAL_INTERVENTION_REQUIRED:
            return None
        return str(status.get("manual_intervention_reason") or "manual intervention required")

    async def _approval_outcome(self, flight: InFlight) -> str | None:
        if not await self.entities().running(flight.host.host_id):
            return "expired: the host's entity ended before the approval"
        status = await self.entities().status(flight.host.host_id)
        if status is not None and status.current and status.current.workflow_id == flight.workflow_id:
            if status.current.outcome != "awaiting-approval":
                flight = flight.model_copy(update={"awaiting_approval": False})  # approved meanwhile
                return await self._operation_outcome(flight)
            return None
        return _recorded(status, flight) or "failed: the host's entity has no record of the operation"

    async def _operation_outcome(self, flight: InFlight) -> str | None:
        handle = self.temporal.get_workflow_handle(flight.workflow_id)
        try:
            described = await handle.describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return "failed: the operation's workflow does not exist"
        if described.status == WorkflowExecutionStatus.RUNNING:
            return None
        if await self.entities().running(flight.host.host_id):
            recorded = _recorded(await self.entities().status(flight.host.host_id), flight)
            if recorded is not None:
                return recorded
        return await _closed_outcome(handle, described.status)

    @activity.defn(name="abort_campaign_hosts")
    @beats_while_running
    async def abort_campaign_hosts(self, request: AbortHostsInput) -> AbortHostsResult:
        """Withdraw each request awaiting approval from its host's entity (`withdraw`: it ends
        unstarted, and the entity tells the campaign), then send `abort` to each operation, and
        to a withdrawn one that was approved and started meanwhile, with `finish_installing`: one
        whose DPUs already install refuses and finishes its reboot round. Answers how each took
        it; one that already ended or refuses otherwise is left as it is (logged). Cost: one
        update per host (two for an approval raced)."""
        started = []
        for flight in request.withdraw:
            withdraw = WithdrawRequest(
                requested_by=request.requested_by, reason=request.reason, workflow_id=flight.workflow_id
            )
            try:
                await self.entities().update(flight.host.host_id, HostWorkflow.withdraw, withdraw)
            except EntityRefused as refused:
                if refused.kind == OperationStarted.__name__:
                    started.append(flight.workflow_id)  # approved meanwhile: abort it with the rest
                else:
                    activity.logger.info("request %s not withdrawn: %s", flight.workflow_id, refused)
            except (EntityMissing, RPCError) as err:
                activity.logger.info("request %s not withdrawn: %s", flight.workflow_id, err)
        body = OperationAbortRequest(
            requested_by=request.requested_by,
            reason=request.reason,
            finish_installing=request.finish_installing,
        )
        answers = [
            await self._abort_one(workflow_id, body) for workflow_id in (*request.workflow_ids, *started)
        ]
        return AbortHostsResult(answers=tuple(a for a in answers if a is not None))

    async def _abort_one(self, workflow_id: str, body: OperationAbortRequest) -> AbortAnswer | None:
        """Send one operation the campaign's abort: how it took it (None: unknown, logged)."""
        host_id = workflow_id.rsplit("/", 1)[-1]
        handle = self.temporal.get_workflow_handle(workflow_id)
        try:
            answer = await execute_update(handle, ABORT_UPDATE, body, result_type=OperatorAnswer)
        except WorkflowUpdateFailedError as err:
            if matches(err.cause, OperationInstalling):  # the update's failure is its cause
                words = str(err.cause.message if isinstance(err.cause, ApplicationError) else err.cause)
                return AbortAnswer(host_id=host_id, workflow_id=workflow_id, answer="finishing", words=words)
            activity.logger.info("abort of %s not taken: %s", workflow_id, err.cause)
            return None
        except RPCError as err:
            activity.logger.info("abort of %s not sent: %s", workflow_id, err)
            return AbortAnswer(host_id=host_id, workflow_id=workflow_id, answer="ended", words=str(err))
        return AbortAnswer(host_id=host_id, workflow_id=workflow_id, answer="aborted", words=answer.message)


def _recorded(status: HostStatus | None, flight: InFlight) -> str | None:
    """The outcome the entity recorded for this flight's operation (not an older one of that id)."""
    for record in reversed(status.recent if status is not None else ()):
        if record.workflow_id == flight.workflow_id and (
            record.requested_at is None or record.requested_at >= flight.started_at
            or record.finished_at is None or record.finished_at >= flight.started_at
        ):  # fmt: skip
            return record.outcome
    return None


async def _closed_outcome(handle: WorkflowHandle[Any, Any], status: WorkflowExecutionStatus | None) -> str:
    """An operation's outcome from its closed workflow, in the entity's words."""
    if status == WorkflowExecutionStatus.COMPLETED:
        # An operator's abort completes the operation, its result saying who and why (as the
        # entity records it: `workflows/host/outcome.py`).
        result = await handle.result(follow_runs=False)
        aborted = result.get("aborted") if isinstance(result, dict) else None
        return aborted_outcome(aborted) if aborted else "completed"
    if status == WorkflowExecutionStatus.CANCELED:
        return "aborted"
    if status == WorkflowExecutionStatus.TERMINATED:
        return "terminated"
    try:
        await handle.result(follow_runs=False)
    except WorkflowFailureError as err:
        # An operation an operator aborted (a run of older code failed so): as the entity records it.
        if isinstance(err.cause, ApplicationError) and matches(err.cause, OperationAborted):
            return aborted_outcome(err.cause.message)
        cause: BaseException = err
        while getattr(cause, "cause", None) is not None:
            cause = cause.cause  # type: ignore[attr-defined]
        return f"failed: {cause}"
    return f"failed: the operation closed as {status.name if status else 'unknown'}"
