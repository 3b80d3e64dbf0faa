"""Each operation of the host entity as a child workflow, mixed into `HostWorkflow` (workflows/host.py).

`HostChildren` names the child (its business-key id), builds its input from the request and
the entity's state, starts it (a reboot through `start_next_reboot`, the one boot-generation
rule), waits out an approval's time limit, follows the child to its end (the boot generation
it reached, its outcome in the entity's words) and tells the campaign that asked for it.

Cost per host and operation: its share of the ~18 history events per operation counted in
workflows/host.py: the child's initiation, start and end (each generation a reboot finds spent
adds a failed start), a timer while approval is awaited, one `host_finished` signal when a
campaign asked; no activities and no watches of its own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from contracts import names
    from contracts.models.campaign import HOST_FINISHED_SIGNAL, HostFinished
    from contracts.models.host import (
        FirmwareInput,
        FirmwareRequest,
        HostOperationInput,
        HostOperationKind,
        HostRebootInput,
        HostRemovalInput,
        OperationRequest,
    )
    from contracts.wording import aborted_outcome
    from workflows import common
    from workflows.host_reboot import start_next_reboot
    from workflows.host_rules import BUSY_ERROR, CurrentOperation, HostEntityState

# The child workflow of each operation, by type name: the entity does not import their modules.
REBOOT_CANCEL_PATCH: Final = "entity-reboot-cancelled-with-entity"  # was ABANDON before it
CHILD_TYPES: Final = {
    names.PROVISION: "HostOperationWorkflow",
    names.REPROVISION: "HostOperationWorkflow",
    names.REBOOT: "HostRebootWorkflow",
    names.FIRMWARE: "FirmwareWorkflow",
    names.REMOVE: "HostRemovalWorkflow",
}


class HostChildren(HostEntityState):
    """Start, await and follow the entity's one operation; `HostWorkflow` decides when."""

    def _child_id(self, operation: str) -> str:
        host, legacy = self._input.host_id, not common.short_ids()  # via the module: test_short_ids swaps it
        if operation == names.REBOOT:
            return names.host_reboot_workflow_id(host, self._boot_generation + 1, legacy=legacy)
        return names.host_operation_workflow_id(operation, host, legacy=legacy)

    async def _start(self, current: CurrentOperation) -> None:
        current.record = current.record.model_copy(update={"outcome": "starting"})
        record = current.record
        attributes = TypedSearchAttributes(
            [
                SearchAttributePair(names.HOST_ID, self._input.host_id),
                SearchAttributePair(names.OPERATION, record.operation),
                SearchAttributePair(names.SITE, self._input.site),
            ]
            + (
                [SearchAttributePair(names.CAMPAIGN, current.request.campaign)]
                if current.request.campaign
                else []
            )
        )
        summary = f"{record.operation} of host {self._input.host_id}, requested by {record.requested_by}"
        child_input = self._child_input(record.operation, current.request)
        if isinstance(child_input, HostRebootInput):
            # The one boot-generation rule: the next generation no reboot used (REJECT_DUPLICATE).
            # A failed operation may have spent generations this entity never heard of; reusing
            # one would start a second run under a reboot's id.
            current.child, generation = await start_next_reboot(
                child_input,
                summary=summary.replace("{", "{{").replace("}", "}}"),  # the helper formats it
                parent_close_policy=(
                    workflow.ParentClosePolicy.REQUEST_CANCEL
                    if workflow.patched(REBOOT_CANCEL_PATCH)
                    else workflow.ParentClosePolicy.ABANDON
                ),
                search_attributes=attributes,
                decode_result=False,  # as for every child: the entity reads `boot_generation` only
            )
            current.record = record = record.model_copy(update={"workflow_id": current.child.id})
            current.record = record.model_copy(update={"outcome": "running", "started_at": workflow.now()})
            self._show_phase()
            return
        try:
            current.child = await workflow.start_child_workflow(
                CHILD_TYPES[record.operation],
                child_input,
                id=record.workflow_id,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                search_attributes=attributes,
                static_summary=summary,
            )
        except WorkflowAlreadyStartedError:
            self._current = None
            self._show_phase()
            raise ApplicationError(
                f"host {self._input.host_id} is busy: workflow {record.workflow_id} already runs "
                f"(started outside this entity); {record.operation} refused",
                type=BUSY_ERROR,
                non_retryable=True,
            ) from None
        current.record = record.model_copy(update={"outcome": "running", "started_at": workflow.now()})
        self._show_phase()

    def _child_input(self, operation: str, request: OperationRequest | FirmwareRequest) -> Any:
        host = self._input.host_id
        generation = self._boot_generation
        if isinstance(request, FirmwareRequest):
            return FirmwareInput(
                host_id=host,
                target_version=request.target_version,
                image_uri=request.image_uri,
                dpu_ids=request.dpu_ids,
                requested_by=request.requested_by,
                boot_generation=generation,
                policy=self._input.policy,
            )
        policy = request.policy or self._input.policy
        if operation == names.REBOOT:
            return HostRebootInput(
                host_id=host,
                boot_generation=generation + 1,
                requested_by=request.requested_by,
                reason=request.reason,
                policy=policy,
            )
        if operation == names.REMOVE:
            return HostRemovalInput(
                host_id=host,
                dpu_ids=request.dpu_ids,
                force=request.force,
                requested_by=request.requested_by,
                reason=request.reason,
                policy=policy,
            )
        return HostOperationInput(
            host_id=host,
            kind=HostOperationKind(operation),
            dpu_ids=request.dpu_ids,
            requested_by=request.requested_by,
            reason=request.reason,
            boot_generation=generation,
            policy=policy,
        )

    async def _await_approval(self, current: CurrentOperation) -> None:
        requested_at = current.record.requested_at or workflow.now()
        timeout = timedelta(seconds=self._input.policy.approval_timeout_seconds)
        remaining = requested_at + timeout - workflow.now()
        try:
            await workflow.wait_condition(
                lambda: self._current is not current or current.child is not None,
                timeout=max(remaining, timedelta(seconds=1)),
                timeout_summary=f"approval of {current.record.operation}: expires unless approved",
            )
        except TimeoutError:
            async with self._lock:
                if self._current is not current or current.approved:
                    return
                self._finish(current, f"expired: not approved within {timeout}")
            await self._notify_campaign(current, f"expired: not approved within {timeout}")

    async def _follow(self, current: CurrentOperation, child: workflow.ChildWorkflowHandle[Any, Any]) -> None:
        try:
            result = await child
        except ChildWorkflowError as err:
            self._reached(_generation_reported(err))  # a failed operation's reboots count too
            self._finish(current, _outcome_of(err))
            await self._notify_campaign(current, _outcome_of(err))
            return
        self._reached(result.get("boot_generation") if isinstance(result, dict) else None)
        self._finish(current, "completed")
        await self._notify_campaign(current, "completed")

    async def _notify_campaign(self, current: CurrentOperation, outcome: str) -> None:
        """Tell the campaign that asked for this operation how it ended (`host_finished`).

        Only operations a campaign asked for send it, so older histories replay unchanged; a
        campaign that is gone (aborted, terminated) is not an error: its sweep, or nobody, cares.
        """
        target = current.request.campaign_workflow_id
        if not target or not workflow.patched("campaign-host-finished"):
            return
        finished = HostFinished(
            host_id=self._input.host_id, workflow_id=current.record.workflow_id, outcome=outcome
        )
        try:
            await workflow.get_external_workflow_handle(target).signal(HOST_FINISHED_SIGNAL, finished)
        except ApplicationError as err:  # the campaign no longer runs
            workflow.logger.info("campaign %s not told of %s: %s", target, current.record.workflow_id, err)


def _outcome_of(err: ChildWorkflowError) -> str:
    cause = err.cause
    if isinstance(cause, CancelledError):
        return "aborted"
    if isinstance(cause, TerminatedError):
        return "terminated"
    if isinstance(cause, ApplicationError) and cause.type == common.ABORTED_TYPE:
        return aborted_outcome(cause.message)  # an operator's abort is not a failure
    return f"failed: {cause or err}"


def _generation_reported(err: ChildWorkflowError) -> int | None:
    """The boot generation a failed operation reached, from its failure's details."""
    cause = err.cause
    if not isinstance(cause, ApplicationError):
        return None
    for detail in cause.details:
        if isinstance(detail, dict) and isinstance(detail.get("boot_generation"), int):
            return int(detail["boot_generation"])
    return None
