"""The host pool (docs/DOMAIN.md flow 5, section 2.8) and requests to a host's owner, for the host monitor.

Pool state lives on the cluster, the shared truth every scheduler and operator can read: the
label `metalflow.io/pool` (`in-pool` / `out-of-pool`) and the annotation `metalflow.io/pool-reason`
on the host's DPUNode `node-<host>`. `set_host_pool_state` is idempotent (a label already as
asked is not written) and conditional on the resourceVersion it read (`Kube.edit`). A host
without a DPUNode has nothing to label: the result says so instead of failing, because a
removal may delete the node under a running monitor.

`request_host_reprovision` asks the host's entity workflow (`host/<id>`) for a reprovision with
its `request_reprovision` update. A workflow cannot send an update itself (the Python SDK's
external workflow handle offers only signal and cancel), so this activity sends it with the
worker's Temporal client, by the entity's one client (`contracts.host_entity.HostEntityClient`);
the entity's validator and approval gate decide, as for any operator. Only a running entity is
asked: a host nobody has asked anything of yet has no owner to ask. `withdraw_host_request`
withdraws the monitor's own request awaiting approval (the entity's `withdraw` update) once its
reason no longer holds.

`find_host_operation` reads the entity's `status` query (no history written in the entity): the
operation it runs now, or the newest it ended since a given time. The monitor asks it before it
calls a DPU's reset unplanned: a reboot, reset or firmware cycle metalflow ran explains it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.client import WorkflowExecution as ListedRun
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError, TimeoutError
from temporalio.service import RPCError, RPCStatusCode

from activities.heartbeat import beats_while_running
from contracts import names
from contracts.errors import DPUsRemoved, InMaintenance, cause_in_words, first_application_error
from contracts.host_entity import EntityMissing, EntityRefused, HostEntityClient
from contracts.models.host import (
    POOL_LABEL,
    POOL_REASON_ANNOTATION,
    EntityPredecessor,
    OperationRequest,
    OperationRun,
    OwnerOperationInput,
    OwnerOperationResult,
    OwnerReprovisionInput,
    OwnerReprovisionResult,
    PoolStateResult,
    RunEnd,
    SetPoolStateInput,
    WithdrawRequest,
)
from contracts.models.inventory import HostLookup
from contracts.models.monitor import OwnerWithdrawInput
from contracts.workflow_api import HostWorkflow
from drivers.kube import DPUNODE, Kube, Object


class PoolActivities:
    """Pool state on the host's DPUNode; holds the worker's `Kube`."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @activity.defn(name="set_host_pool_state")
    @beats_while_running
    async def set_host_pool_state(self, request: SetPoolStateInput) -> PoolStateResult:
        """Label the host's DPUNode in or out of the pool (no write when it already is)."""
        node = f"node-{request.host_id}"
        previous: list[str | None] = []

        def change(obj: Object) -> Object | None:
            labels = obj["metadata"].get("labels") or {}
            annotations = obj["metadata"].get("annotations") or {}
            previous[:] = [labels.get(POOL_LABEL)]
            if (
                labels.get(POOL_LABEL) == request.state
                and annotations.get(POOL_REASON_ANNOTATION) == request.reason
            ):
                return None
            return {
                "metadata": {
                    "labels": {POOL_LABEL: request.state},
                    "annotations": {POOL_REASON_ANNOTATION: request.reason},
                }
            }

        obj, changed = await self.kube.edit(
            request.host_id, DPUNODE, request.namespace, node, change, missing_ok=True
        )
        if obj is None:
            return PoolStateResult(node=node, exists=False)
        return PoolStateResult(
            node=node,
            exists=True,
            previous=previous[0] if previous else None,
            state=(obj["metadata"].get("labels") or {}).get(POOL_LABEL),
            changed=changed,
        )

    @activity.defn(name="read_host_pool_state")
    @beats_while_running
    async def read_host_pool_state(self, request: SetPoolStateInput) -> PoolStateResult:
        """The pool label of the host's DPUNode as it is now (`request.state` is ignored)."""
        node = f"node-{request.host_id}"
        obj = await self.kube.get(request.host_id, DPUNODE, request.namespace, node, missing_ok=True)
        if obj is None:
            return PoolStateResult(node=node, exists=False)
        state = (obj["metadata"].get("labels") or {}).get(POOL_LABEL)
        return PoolStateResult(node=node, exists=True, previous=state, state=state)


PREDECESSORS_READ = 20  # closed runs of an entity listed to find the newest closed one
OPERATIONS_READ = 10  # the host's operations listed (running; closed unrecorded)
HEARTBEAT_SECONDS = 5.0  # `await_operation_end` heartbeats this often


def _iso(moment: Any) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z") if moment is not None else ""


def iso_key(end: RunEnd | None) -> str:
    """Oldest first: the runs' close times (an unknown one first)."""
    return _iso(end.closed_at) if end is not None else ""


async def _end_of(handle: WorkflowHandle[Any, Any]) -> RunEnd:
    """How the run ended (its close event), as the entity's `_follow` reads an own child's end:
    the result of one that completed, the cause of one that did not. Waits while it runs."""
    try:
        result = await handle.result(follow_runs=False)
    except WorkflowFailureError as err:
        cause = err.cause
        if isinstance(cause, TerminatedError):
            return RunEnd(status="TERMINATED")
        if isinstance(cause, CancelledError):
            return RunEnd(status="CANCELED")
        found = first_application_error(err)
        reported = None
        for detail in found.details if found is not None else ():
            if isinstance(detail, dict) and isinstance(detail.get("boot_generation"), int):
                reported = int(detail["boot_generation"])
        return RunEnd(
            status="TIMED_OUT" if isinstance(cause, TimeoutError) else "FAILED",
            boot_generation=reported,
            failure_type=found.type or "" if found is not None else "",
            failure_message=found.message if found is not None else "",
            failure=cause_in_words(err),
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ApplicationError(
                f"{handle.id}: {err.message}", type="NotFoundError", non_retryable=True
            ) from None
        raise
    end = result if isinstance(result, dict) else {}
    generation = end.get("boot_generation")
    return RunEnd(
        status="COMPLETED",
        aborted=str(end.get("aborted") or ""),
        boot_generation=generation if isinstance(generation, int) else None,
        unplanned_power=str(end.get("unplanned_power") or ""),
        deletes_sent=bool(end.get("deletes_sent")),
        last_reset_time=end.get("last_reset_time"),
    )


class OwnerActivities:
    """Requests to a host's entity workflow; holds the worker's Temporal client."""

    def __init__(self, temporal: Client) -> None:
        self.temporal = temporal

    @activity.defn(name="request_host_reprovision")
    @beats_while_running
    async def request_host_reprovision(self, request: OwnerReprovisionInput) -> OwnerReprovisionResult:
        """Ask `host/<id>` for a reprovision of `dpu_ids`; "no-owner" when no entity runs."""
        body = OperationRequest(
            requested_by=request.requested_by,
            reason=request.reason,
            dpu_ids=request.dpu_ids,
            # The entity tells the monitor how its request ended (`host_finished`), as a campaign.
            campaign_workflow_id=request.notify_workflow_id,
        )
        try:
            answer = await HostEntityClient(self.temporal).update(
                request.host_id, HostWorkflow.request_reprovision, body
            )
        except EntityMissing as missing:
            return OwnerReprovisionResult(outcome="no-owner", message=str(missing))
        except EntityRefused as refused:
            # DPF no longer has the DPUs (the entity's removal took them out): "gone", asked no more.
            if refused.kind == DPUsRemoved.__name__:
                details = (
                    refused.details[0] if refused.details and isinstance(refused.details[0], dict) else {}
                )
                gone = tuple(str(d) for d in details.get("dpu_ids") or ())
                return OwnerReprovisionResult(outcome="gone", message=str(refused), gone=gone)
            if refused.kind == InMaintenance.__name__:  # the monitor records it and does not ask again
                return OwnerReprovisionResult(outcome="maintenance", message=str(refused))
            return OwnerReprovisionResult(outcome="refused", message=str(refused))
        outcome = "awaiting-approval" if answer.awaiting_approval else "accepted"
        return OwnerReprovisionResult(outcome=outcome, workflow_id=answer.workflow_id, message=answer.message)

    @activity.defn(name="withdraw_host_request")
    @beats_while_running
    async def withdraw_host_request(self, request: OwnerWithdrawInput) -> OwnerReprovisionResult:
        """Withdraw `workflow_id`, awaiting approval on `host/<id>` (the entity's `withdraw`):
        "withdrawn", or "refused" (approved and started meanwhile, or no longer pending), or
        "no-owner" when no entity runs."""
        body = WithdrawRequest(
            requested_by=request.requested_by, reason=request.reason, workflow_id=request.workflow_id
        )
        try:
            answer = await HostEntityClient(self.temporal).update(
                request.host_id, HostWorkflow.withdraw, body
            )
        except EntityMissing as missing:
            return OwnerReprovisionResult(outcome="no-owner", message=str(missing))
        except EntityRefused as refused:
            return OwnerReprovisionResult(outcome="refused", message=str(refused))
        return OwnerReprovisionResult(
            outcome="withdrawn", workflow_id=request.workflow_id, message=answer.message
        )

    @activity.defn(name="read_entity_predecessor")
    @beats_while_running
    async def read_entity_predecessor(self, request: HostLookup) -> EntityPredecessor:
        """The last closed run of `host/<id>` (terminated, reset by hand, failed): how it closed
        and its memo's carried entry; the host's operations still running (children of
        `host/<id>`: the new entity adopts them) and, when there was a predecessor, those that
        closed after it last changed its phase (its `PhaseSince`, else its close: an end it never
        recorded, e.g. a reboot it cancelled as it was terminated). Read by a new entity
        once at its start (workflows/host/takeover_rules.py). Cost: three visibility list calls
        (`PREDECESSORS_READ`, `OPERATIONS_READ` rows at most), one memo decode, and per operation
        found its first event (its input: who asked) and, when closed, its close event."""
        entity = names.host_workflow_id(request.host_id)
        query = f"WorkflowId = '{entity}' AND ExecutionStatus != 'Running'"
        closed = [e async for e in self.temporal.list_workflows(query, limit=PREDECESSORS_READ)]
        ended = [e for e in closed if e.close_time is not None]
        operations = (
            f"{names.HOST_ID.name} = '{request.host_id}' AND {names.OPERATION.name} != '{names.HOST}'"
        )
        running = await self._operations(entity, f"{operations} AND ExecutionStatus = 'Running'")
        if not ended:
            return EntityPredecessor(running=running)
        last = max(ended, key=lambda e: e.close_time or e.start_time)
        entry = (await last.memo()).get(names.CARRIED_MEMO)
        carried = entry if isinstance(entry, dict) else None
        # It records an end by going idle (`PhaseSince`): a run closed after that it never recorded.
        since = _iso(last.typed_search_attributes.get(names.PHASE_SINCE) or last.close_time)
        unrecorded = await self._operations(
            entity, f"{operations} AND ExecutionStatus != 'Running' AND CloseTime > '{since}'"
        )
        return EntityPredecessor(
            run_id=last.run_id or "",
            status=last.status.name if last.status else "",
            closed_at=last.close_time,
            carried=carried,
            running=running,
            ended=tuple(sorted(unrecorded, key=lambda r: iso_key(r.end))),
        )

    async def _operations(self, entity: str, query: str) -> tuple[OperationRun, ...]:
        """The runs `query` lists whose parent is `entity` (the host's operations, not their
        reboots nor a monitor), each with who asked and, when closed, how it ended."""
        listed = [e async for e in self.temporal.list_workflows(query, limit=OPERATIONS_READ)]
        return tuple([await self._run(e) for e in listed if e.parent_id == entity])

    async def _run(self, listed: ListedRun) -> OperationRun:
        handle = self.temporal.get_workflow_handle(listed.id, run_id=listed.run_id)
        asked = await self._input_of(listed)
        end = None
        if listed.close_time is not None:
            phase = str(listed.typed_search_attributes.get(names.PHASE) or "")
            end = (await _end_of(handle)).model_copy(
                update={"closed_at": listed.close_time, "last_phase": phase}
            )
        return OperationRun(
            workflow_id=listed.id,
            run_id=listed.run_id,
            operation=str(listed.typed_search_attributes.get(names.OPERATION) or ""),
            requested_by=str(asked.get("requested_by") or ""),
            reason=str(asked.get("reason") or ""),
            started_at=listed.start_time,
            end=end,
        )

    async def _input_of(self, listed: ListedRun) -> dict[str, Any]:
        """The run's input (its first event) as plain data; {} when it cannot be read."""
        try:
            page = await self.temporal.workflow_service.get_workflow_execution_history(
                GetWorkflowExecutionHistoryRequest(
                    namespace=self.temporal.namespace,
                    execution=WorkflowExecution(workflow_id=listed.id, run_id=listed.run_id),
                    maximum_page_size=1,
                )
            )
            payloads = page.history.events[0].workflow_execution_started_event_attributes.input.payloads
            values = await self.temporal.data_converter.decode(payloads)
        except (RPCError, IndexError, ValueError):
            return {}
        return values[0] if values and isinstance(values[0], dict) else {}

    @activity.defn(name="await_operation_end")
    async def await_operation_end(self, run: OperationRun) -> RunEnd:
        """How the run `run` ended, waited for while it runs (a heartbeat every
        `HEARTBEAT_SECONDS`: a worker killed meanwhile is noticed by the heartbeat timeout and the
        wait retried elsewhere, where a run already closed answers at once). Cost: one long poll
        of its history at a time, no history written in the caller until it ends."""
        handle = self.temporal.get_workflow_handle(run.workflow_id, run_id=run.run_id or None)
        ending = asyncio.ensure_future(_end_of(handle))
        try:
            while not ending.done():
                await asyncio.wait({ending}, timeout=HEARTBEAT_SECONDS)
                activity.heartbeat()
        finally:
            ending.cancel()
        return ending.result()

    @activity.defn(name="find_host_operation")
    @beats_while_running
    async def find_host_operation(self, request: OwnerOperationInput) -> OwnerOperationResult:
        """The operation `host/<id>` runs now, or the newest it ended at or after `since`; none
        when it ran none (or no entity runs: nothing of metalflow touched the host)."""
        status = await HostEntityClient(self.temporal).status(request.host_id)
        if status is None:
            return OwnerOperationResult(message="no entity runs")
        current = status.current
        if current is not None and current.outcome == "running":
            return OwnerOperationResult(workflow_id=current.workflow_id, message="running")
        ended = [r for r in status.recent if r.finished_at is not None and r.finished_at >= request.since]
        if ended:
            newest = max(ended, key=lambda r: r.finished_at or request.since)
            return OwnerOperationResult(workflow_id=newest.workflow_id, message=f"ended {newest.outcome}")
        return OwnerOperationResult(message="no operation since " + request.since.isoformat())
