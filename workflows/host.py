"""HostWorkflow (`host/<id>`): the one owner of a host, long-running.

Every operation on a host is asked of this entity by an update, so an instance assignment and a
reprovision can never race (the single-program device race of DOMAIN.md section 1):

1. `request_*` is refused while another operation runs or awaits approval, naming it.
2. A disruptive request on a host with an instance assigned waits for `approve` (or starts at
   once inside the auto-approval window that an earlier approval opened for that instance).
3. `assign_instance` is refused while an operation runs or awaits approval, naming it.

Validators answer at once, without writing history; handlers check again under one
`asyncio.Lock`, because two updates delivered in the same workflow task are both validated
before either handler runs.

Each operation runs as a child workflow started by type name, with the business-key id
(`reprovision/<id>`, `reboot/<id>/generation-<n>`, ...; runs begun before 2026-11 keep the
`.../host-<id>` form, `workflows.common.SHORT_IDS_PATCH`). Children are ABANDONed on
parent close: the entity continues-as-new only while idle, so this never cuts a running
operation; if the entity is terminated or reset by hand, a power cycle half done keeps going,
and the child's id still locks the host (a new entity's request for it is refused). A reboot
(`host reboot`) is the exception: it is cancelled with the entity (REQUEST_CANCEL), and a
cancelled reboot powers the host back on at once instead of waiting out its power-down wait, so
a terminated entity never leaves a reboot behind holding the host's BMC.

Worst-case history: about 18 events per operation (the update, the child's start and end, one
`Instance`/`PhaseSince` upsert per phase change) plus 5 per other update and 2 patch markers per
run; the entity continues-as-new when idle past `max_history_events` (default
10,000) or when Temporal suggests it, so a run never nears the limit.

The entity is three modules, one class: this one, the handlers and the run loop (what an
operator or a campaign asks, in order); workflows/host_children.py, each operation as a child
workflow (its id, input, start, approval wait, end, the campaign told); workflows/host_rules.py,
the state, the rules the handlers apply and the phase shown.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from contracts import names
    from contracts.models.host import (
        APPROVE_UPDATE,
        ASSIGN_INSTANCE_UPDATE,
        RELEASE_INSTANCE_UPDATE,
        REQUEST_FIRMWARE_UPDATE,
        REQUEST_PROVISION_UPDATE,
        REQUEST_REBOOT_UPDATE,
        REQUEST_REMOVAL_UPDATE,
        REQUEST_REPROVISION_UPDATE,
        STATUS_QUERY,
        WITHDRAW_UPDATE,
        AssignInstanceRequest,
        FirmwareRequest,
        HostStatus,
        HostWorkflowInput,
        OperationAccepted,
        OperationAnswer,
        OperationRecord,
        OperationRequest,
        OperatorRequest,
        WithdrawRequest,
    )
    from workflows.host_children import HostChildren
    from workflows.host_rules import AWAITING_APPROVAL, NOT_AWAITING_ERROR, CurrentOperation


@workflow.defn(name="HostWorkflow")
class HostWorkflow(HostChildren):
    """The entity of one host: instance, boot generation, the one operation, recent outcomes."""

    @workflow.init
    def __init__(self, start: HostWorkflowInput) -> None:
        super().__init__(start)

    @workflow.run
    async def run(self, start: HostWorkflowInput) -> None:
        """Serve requests forever; follow each operation to its end; continue-as-new when idle."""
        workflow.upsert_search_attributes(
            [
                names.HOST_ID.value_set(start.host_id),
                names.OPERATION.value_set(names.HOST),
                names.SITE.value_set(start.site),
            ]
        )
        self._show_phase()
        while True:
            await workflow.wait_condition(lambda: self._current is not None or self._history_is_long())
            current = self._current
            if current is not None:
                if current.child is None:
                    await self._await_approval(current)
                else:
                    await self._follow(current, current.child)
                continue
            # Idle and the history is long: hand the state to a fresh run once no handler is
            # midway; a handler that got in meanwhile may have started an operation: follow it first.
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self._current is None:
                break
        workflow.continue_as_new(
            start.model_copy(
                update={
                    "instance": self._instance,
                    "boot_generation": self._boot_generation,
                    "recent": tuple(self._recent),
                    "auto_approved_until": self._auto_approved_until,
                    "phase_since": self._phase_since,
                }
            )
        )

    # -- requests -------------------------------------------------------------------------------

    @workflow.update(name=REQUEST_PROVISION_UPDATE)
    async def request_provision(self, request: OperationRequest) -> OperationAccepted:
        """Provision the host's DPUs (all, or `dpu_ids`)."""
        return await self._request(names.PROVISION, request)

    @request_provision.validator
    def _validate_provision(self, request: OperationRequest) -> None:
        self._refuse_if_busy(names.PROVISION)
        self._refuse_if_assigned(request)

    @workflow.update(name=REQUEST_REPROVISION_UPDATE)
    async def request_reprovision(self, request: OperationRequest) -> OperationAccepted:
        """Reprovision the host's DPUs (all, or `dpu_ids`)."""
        return await self._request(names.REPROVISION, request)

    @request_reprovision.validator
    def _validate_reprovision(self, request: OperationRequest) -> None:
        self._refuse_if_busy(names.REPROVISION)
        self._refuse_if_assigned(request)

    @workflow.update(name=REQUEST_REBOOT_UPDATE)
    async def request_reboot(self, request: OperationRequest) -> OperationAccepted:
        """Reboot the host once (the next boot generation)."""
        return await self._request(names.REBOOT, request)

    @request_reboot.validator
    def _validate_reboot(self, request: OperationRequest) -> None:
        self._refuse_if_busy(names.REBOOT)
        self._refuse_if_assigned(request)

    @workflow.update(name=REQUEST_FIRMWARE_UPDATE)
    async def request_firmware_update(self, request: FirmwareRequest) -> OperationAccepted:
        """Stage and activate DPU firmware."""
        return await self._request(names.FIRMWARE, request)

    @request_firmware_update.validator
    def _validate_firmware(self, request: FirmwareRequest) -> None:
        self._refuse_if_busy(names.FIRMWARE)
        self._refuse_if_assigned(request)

    @workflow.update(name=REQUEST_REMOVAL_UPDATE)
    async def request_removal(self, request: OperationRequest) -> OperationAccepted:
        """Remove the host's DPUs (or `dpu_ids`) from DPF; `force` removes finalizers too."""
        return await self._request(names.REMOVE, request)

    @request_removal.validator
    def _validate_removal(self, request: OperationRequest) -> None:
        self._refuse_if_busy(names.REMOVE)
        self._refuse_if_assigned(request)

    @workflow.update(name=APPROVE_UPDATE)
    async def approve(self, request: OperatorRequest) -> OperationAnswer:
        """Start the operation that awaits approval; opens the auto-approval window, if any."""
        async with self._lock:
            current = self._current
            if current is None or current.approved:
                raise ApplicationError("nothing awaits approval", type=NOT_AWAITING_ERROR, non_retryable=True)
            current.approved = True
            now = workflow.now()
            if self._input.auto_approval_window_seconds > 0:
                window = timedelta(seconds=self._input.auto_approval_window_seconds)
                self._auto_approved_until = now + window
            current.record = current.record.model_copy(update={"approved_by": request.requested_by})
            await self._start(current)
            return OperationAnswer(
                accepted=True,
                message=f"approved {current.record.operation}; started {current.record.workflow_id}",
            )

    @approve.validator
    def _validate_approve(self, request: OperatorRequest) -> None:
        if self._current is None or self._current.approved:
            raise ApplicationError("nothing awaits approval", type=NOT_AWAITING_ERROR, non_retryable=True)

    @workflow.update(name=WITHDRAW_UPDATE)
    async def withdraw(self, request: WithdrawRequest) -> OperationAnswer:
        """Drop the request awaiting approval (`workflow_id`) without starting it; its campaign is
        told. A campaign aborted with `cancel_running` sends it, so no approval is left pending."""
        async with self._lock:
            current = self._awaiting(request)
            why = f": {request.reason}" if request.reason else ""
            outcome = f"withdrawn by {request.requested_by}{why}"
            self._finish(current, outcome)  # the approval wait sees it and ends
        await self._notify_campaign(current, outcome)
        operation = current.record.operation
        return OperationAnswer(accepted=True, message=f"{operation} {outcome}; nothing started")

    @withdraw.validator
    def _validate_withdraw(self, request: WithdrawRequest) -> None:
        self._awaiting(request)

    # -- the instance ---------------------------------------------------------------------------

    @workflow.update(name=ASSIGN_INSTANCE_UPDATE)
    async def assign_instance(self, request: AssignInstanceRequest) -> OperationAnswer:
        """Give the host to an instance; refused while an operation runs or awaits approval."""
        async with self._lock:
            self._refuse_assignment(request)
            if self._instance == request.instance:
                return OperationAnswer(accepted=True, message=f"already assigned to {request.instance}")
            self._instance = request.instance
            self._auto_approved_until = None  # an approval covered the previous instance only
            self._show_phase()
            return OperationAnswer(accepted=True, message=f"assigned to {request.instance}")

    @assign_instance.validator
    def _validate_assign(self, request: AssignInstanceRequest) -> None:
        self._refuse_assignment(request)

    @workflow.update(name=RELEASE_INSTANCE_UPDATE)
    async def release_instance(self, request: AssignInstanceRequest) -> OperationAnswer:
        """Take the instance off the host (the named instance only)."""
        async with self._lock:
            self._refuse_release(request)
            self._instance = None
            self._auto_approved_until = None
            self._show_phase()
            return OperationAnswer(accepted=True, message=f"released {request.instance}")

    @release_instance.validator
    def _validate_release(self, request: AssignInstanceRequest) -> None:
        self._refuse_release(request)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostStatus:
        """The host as the entity sees it."""
        return HostStatus(
            host_id=self._input.host_id,
            instance=self._instance,
            boot_generation=self._boot_generation,
            current=self._current.record if self._current else None,
            recent=tuple(self._recent),
            phase=self._phase(),
            site=self._input.site,
            auto_approved_until=self._auto_approved_until,
        )

    # -- a request, recorded, then started or awaiting approval ---------------------------------

    async def _request(
        self, operation: str, request: OperationRequest | FirmwareRequest
    ) -> OperationAccepted:
        async with self._lock:
            self._refuse_if_busy(operation)  # again: the validator may have run before another handler
            self._refuse_if_assigned(request)
            now = workflow.now()
            record = OperationRecord(
                operation=operation,
                workflow_id=self._child_id(operation),
                requested_by=request.requested_by,
                outcome=AWAITING_APPROVAL,
                requested_at=now,
                reason=getattr(request, "reason", ""),
            )
            current = CurrentOperation(record=record, request=request)
            self._current = current
            if self._needs_approval():
                self._show_phase()
                return OperationAccepted(
                    workflow_id=record.workflow_id,
                    awaiting_approval=True,
                    message=f"{operation} of {self._input.host_id} awaits approval: the host is assigned "
                    f"to instance {self._instance} (approve with: metalflow approve {self._input.host_id})",
                )
            current.approved = True
            if self._instance is not None:
                current.record = record.model_copy(
                    update={"approved_by": f"auto-approval window until {self._auto_approved_until}"}
                )
            await self._start(current)
            started = current.record.workflow_id  # a reboot's generation is known once started
            return OperationAccepted(workflow_id=started, message=f"started {operation} as {started}")
