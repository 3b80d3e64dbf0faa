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
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
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
    from metalflow import names
    from metalflow.models.campaign import HOST_FINISHED_SIGNAL, HostFinished
    from metalflow.models.host import (
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
        FirmwareInput,
        FirmwareRequest,
        HostOperationInput,
        HostOperationKind,
        HostRebootInput,
        HostRemovalInput,
        HostStatus,
        HostWorkflowInput,
        OperationAccepted,
        OperationAnswer,
        OperationRecord,
        OperationRequest,
        OperatorRequest,
        WithdrawRequest,
    )
    from workflows.common import enter_phase, short_ids
    from workflows.host_reboot import start_next_reboot

RECENT_LIMIT: Final = 20
IDLE: Final = "idle"
AWAITING_APPROVAL: Final = "awaiting-approval"
BUSY_ERROR: Final = "HostBusy"
NOT_AWAITING_ERROR: Final = "NothingAwaitsApproval"
STARTED_ERROR: Final = "OperationStarted"  # `withdraw` came too late: abort the operation instead
INSTANCE_ERROR: Final = "InstanceConflict"
# Entities started before it set Instance and PhaseSince too (for `host list`); old runs do not.
LIST_ATTRIBUTES_PATCH: Final = "entity-instance-and-phase-since"

# The child workflow of each operation, by type name: the entity does not import their modules.
REBOOT_CANCEL_PATCH: Final = "entity-reboot-cancelled-with-entity"  # was ABANDON before it
CHILD_TYPES: Final = {
    names.PROVISION: "HostOperationWorkflow",
    names.REPROVISION: "HostOperationWorkflow",
    names.REBOOT: "HostRebootWorkflow",
    names.FIRMWARE: "FirmwareWorkflow",
    names.REMOVE: "HostRemovalWorkflow",
}


@dataclass
class _Operation:
    """The operation in flight or awaiting approval, with what is needed to start it."""

    record: OperationRecord
    request: OperationRequest | FirmwareRequest
    approved: bool = False  # no approval needed, or given: starting or started
    child: workflow.ChildWorkflowHandle[Any, Any] | None = None

    @property
    def state(self) -> str:
        return "is in flight" if self.approved else "awaits approval"


@workflow.defn(name="HostWorkflow")
class HostWorkflow:
    """The entity of one host: instance, boot generation, the one operation, recent outcomes."""

    @workflow.init
    def __init__(self, start: HostWorkflowInput) -> None:
        self._input = start
        self._instance = start.instance
        self._boot_generation = start.boot_generation
        self._recent: list[OperationRecord] = list(start.recent)
        self._auto_approved_until = start.auto_approved_until
        self._phase_since = start.phase_since  # carried across continue-as-new (always idle then)
        self._shown_phase: str | None = IDLE if start.phase_since is not None else None
        self._current: _Operation | None = None
        self._logged_phase: tuple[str, str] | None = None  # last logged, not a command: replay-safe
        self._lock = asyncio.Lock()

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

    def _awaiting(self, request: WithdrawRequest) -> _Operation:
        current = self._current
        if current is not None and current.record.workflow_id == request.workflow_id and current.approved:
            raise ApplicationError(
                f"{request.workflow_id} was approved and started: abort it instead",
                type=STARTED_ERROR,
                non_retryable=True,
            )
        if current is None or current.record.workflow_id != request.workflow_id:
            raise ApplicationError(
                f"{request.workflow_id} does not await approval on host {self._input.host_id}",
                type=NOT_AWAITING_ERROR,
                non_retryable=True,
            )
        return current

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

    # -- rules ----------------------------------------------------------------------------------

    def _refuse_if_busy(self, operation: str) -> None:
        current = self._current
        if current is None:
            return
        record = current.record
        raise ApplicationError(
            f"host {self._input.host_id} is busy: {record.operation} {current.state} "
            f"(workflow {record.workflow_id}, requested by {record.requested_by}); "
            f"{operation} refused",
            type=BUSY_ERROR,
            non_retryable=True,
        )

    def _refuse_if_assigned(self, request: OperationRequest | FirmwareRequest) -> None:
        # A campaign that skips assigned hosts asks this, so the check and the start are atomic.
        if request.refuse_if_assigned and self._instance is not None:
            raise ApplicationError(
                f"host {self._input.host_id} is assigned to instance {self._instance}; "
                f"skipped (refuse_if_assigned)",
                type=INSTANCE_ERROR,
                non_retryable=True,
            )

    def _refuse_assignment(self, request: AssignInstanceRequest) -> None:
        if self._current is not None:
            record = self._current.record
            raise ApplicationError(
                f"host {self._input.host_id} cannot take instance {request.instance}: "
                f"{record.operation} {self._current.state} (workflow {record.workflow_id})",
                type=BUSY_ERROR,
                non_retryable=True,
            )
        if self._instance is not None and self._instance != request.instance:
            raise ApplicationError(
                f"host {self._input.host_id} is assigned to instance {self._instance}; release it first",
                type=INSTANCE_ERROR,
                non_retryable=True,
            )

    def _refuse_release(self, request: AssignInstanceRequest) -> None:
        if self._instance != request.instance:
            held = self._instance or "no instance"
            raise ApplicationError(
                f"host {self._input.host_id} holds {held}, not {request.instance}",
                type=INSTANCE_ERROR,
                non_retryable=True,
            )

    def _needs_approval(self) -> bool:
        if self._instance is None:
            return False
        until = self._auto_approved_until
        return until is None or workflow.now() >= until

    # -- running operations ---------------------------------------------------------------------

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
            current = _Operation(record=record, request=request)
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

    def _child_id(self, operation: str) -> str:
        host, legacy = self._input.host_id, not short_ids()
        if operation == names.REBOOT:
            return names.host_reboot_workflow_id(host, self._boot_generation + 1, legacy=legacy)
        return names.host_operation_workflow_id(operation, host, legacy=legacy)

    async def _start(self, current: _Operation) -> None:
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

    async def _await_approval(self, current: _Operation) -> None:
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

    async def _follow(self, current: _Operation, child: workflow.ChildWorkflowHandle[Any, Any]) -> None:
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

    async def _notify_campaign(self, current: _Operation, outcome: str) -> None:
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

    def _reached(self, generation: object) -> None:
        if isinstance(generation, int) and generation > self._boot_generation:
            self._boot_generation = generation

    def _finish(self, current: _Operation, outcome: str) -> None:
        self._recent.append(
            current.record.model_copy(update={"outcome": outcome, "finished_at": workflow.now()})
        )
        del self._recent[:-RECENT_LIMIT]
        self._current = None
        self._show_phase()
        workflow.logger.info("%s of %s: %s", current.record.operation, self._input.host_id, outcome)

    # -- visibility -----------------------------------------------------------------------------

    def _phase(self) -> str:
        if self._current is None:
            return IDLE
        if not self._current.approved:
            return AWAITING_APPROVAL
        return f"running {self._current.record.operation}"

    def _show_phase(self) -> None:
        phase = self._phase()
        instance = f"instance {self._instance}" if self._instance else "no instance"
        if self._current is None:
            last = self._recent[-1] if self._recent else None
            details = f"{instance}; boot generation {self._boot_generation}"
            if last is not None:
                details += f"; last: {last.operation} {last.outcome}"
        else:
            record = self._current.record
            details = (
                f"{record.operation} ({record.workflow_id}) requested by {record.requested_by}; {instance}"
            )
        # The run's first `_show_phase` can already see an operation that the same activation's
        # update accepted, then shows it again once started: the same line is logged once.
        enter_phase(phase, details, log=(phase, details) != self._logged_phase)
        self._logged_phase = (phase, details)
        if workflow.patched(LIST_ATTRIBUTES_PATCH):
            if phase != self._shown_phase or self._phase_since is None:
                self._shown_phase, self._phase_since = phase, workflow.now()
            held = self._instance
            assigned = names.INSTANCE.value_set(held) if held else names.INSTANCE.value_unset()
            workflow.upsert_search_attributes([assigned, names.PHASE_SINCE.value_set(self._phase_since)])

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > (
            self._input.max_history_events
        )


def _outcome_of(err: ChildWorkflowError) -> str:
    cause = err.cause
    if isinstance(cause, CancelledError):
        return "aborted"
    if isinstance(cause, TerminatedError):
        return "terminated"
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
