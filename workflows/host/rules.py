"""The host entity's rules, as plain functions of what it knows (`workflows/host/workflow.py` applies them).

Every handler of `HostWorkflow` checks a rule twice, in its validator and again under its lock;
both call the same function here, which raises the entity's refusal (a `contracts.errors` type
naming what stands in the way) or returns. Also here: the input of each operation's child, an
ended child's outcome in the entity's words, and the phase the entity shows.

No Temporal commands: pure functions and one dataclass. Cost: none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from temporalio import workflow
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError, TerminatedError

with workflow.unsafe.imports_passed_through():
    from contracts import names
    from contracts.errors import (
        HostBusy,
        InstanceConflict,
        NothingAwaitsApproval,
        OperationAborted,
        OperationStarted,
    )
    from contracts.models.host import (
        AssignInstanceRequest,
        FirmwareInput,
        FirmwareRequest,
        HostOperationInput,
        HostOperationKind,
        HostRebootInput,
        HostRemovalInput,
        HostResetInput,
        HostWorkflowInput,
        OperationRecord,
        OperationRequest,
        ResetRequest,
        WithdrawRequest,
    )
    from contracts.wording import aborted_outcome

RECENT_LIMIT: Final = 20
IDLE: Final = "idle"
AWAITING_APPROVAL: Final = "awaiting-approval"


@dataclass
class CurrentOperation:
    """The operation in flight or awaiting approval, with what is needed to start it."""

    record: OperationRecord
    request: OperationRequest | FirmwareRequest | ResetRequest
    approved: bool = False  # no approval needed, or given: starting or started
    child: workflow.ChildWorkflowHandle[Any, Any] | None = None

    @property
    def state(self) -> str:
        return "is in flight" if self.approved else "awaits approval"


def refuse_if_busy(host_id: str, current: CurrentOperation | None, operation: str) -> None:
    """One operation at a time: refused while another runs or awaits approval, naming it."""
    if current is None:
        return
    record = current.record
    raise HostBusy(
        f"host {host_id} is busy: {record.operation} {current.state} "
        f"(workflow {record.workflow_id}, requested by {record.requested_by}); {operation} refused"
    )


def refuse_if_assigned(
    host_id: str, instance: str | None, request: OperationRequest | FirmwareRequest | ResetRequest
) -> None:
    """A campaign that skips assigned hosts asks this, so the check and the start are atomic."""
    if request.refuse_if_assigned and instance is not None:
        raise InstanceConflict(
            f"host {host_id} is assigned to instance {instance}; skipped (refuse_if_assigned)"
        )


def refuse_assignment(
    host_id: str, instance: str | None, current: CurrentOperation | None, request: AssignInstanceRequest
) -> None:
    """An instance is taken only by an idle host that holds no other instance."""
    if current is not None:
        record = current.record
        raise HostBusy(
            f"host {host_id} cannot take instance {request.instance}: "
            f"{record.operation} {current.state} (workflow {record.workflow_id})"
        )
    if instance is not None and instance != request.instance:
        raise InstanceConflict(f"host {host_id} is assigned to instance {instance}; release it first")


def refuse_release(host_id: str, instance: str | None, request: AssignInstanceRequest) -> None:
    """Only the instance the host holds is released."""
    if instance != request.instance:
        raise InstanceConflict(f"host {host_id} holds {instance or 'no instance'}, not {request.instance}")


def refuse_approval(current: CurrentOperation | None) -> CurrentOperation:
    """What `approve` approves: the operation awaiting approval, or the refusal."""
    if current is None or current.approved:
        raise NothingAwaitsApproval("nothing awaits approval")
    return current


def awaiting(host_id: str, current: CurrentOperation | None, request: WithdrawRequest) -> CurrentOperation:
    """The operation a `withdraw` names, still awaiting approval; or the refusal."""
    if current is not None and current.record.workflow_id == request.workflow_id and current.approved:
        raise OperationStarted(f"{request.workflow_id} was approved and started: abort it instead")
    if current is None or current.record.workflow_id != request.workflow_id:
        raise NothingAwaitsApproval(f"{request.workflow_id} does not await approval on host {host_id}")
    return current


def needs_approval(instance: str | None, auto_approved_until: datetime | None, now: datetime) -> bool:
    """A disruptive request on an assigned host waits for `approve`, unless an approval's
    auto-approval window for that instance is still open."""
    if instance is None:
        return False
    return auto_approved_until is None or now >= auto_approved_until


def child_id(operation: str, host_id: str, boot_generation: int) -> str:
    """The business-key id of an operation's child (a reboot: the next boot generation)."""
    if operation == names.REBOOT:
        return names.host_reboot_workflow_id(host_id, boot_generation + 1)
    return names.host_operation_workflow_id(operation, host_id)


def child_input(
    start: HostWorkflowInput,
    operation: str,
    request: OperationRequest | FirmwareRequest | ResetRequest,
    generation: int,
) -> FirmwareInput | HostRebootInput | HostRemovalInput | HostOperationInput | HostResetInput:
    """The input of an operation's child, from the request and what the entity knows."""
    host = start.host_id
    if isinstance(request, ResetRequest):
        return HostResetInput(
            host_id=host,
            target=request.target,
            dpu_ids=request.dpu_ids or (),
            full=request.full,
            requested_by=request.requested_by,
            reason=request.reason,
            boot_generation=generation,
            policy=start.policy,
        )
    if isinstance(request, FirmwareRequest):
        return FirmwareInput(
            host_id=host,
            target_version=request.target_version,
            image_uri=request.image_uri,
            dpu_ids=request.dpu_ids,
            requested_by=request.requested_by,
            boot_generation=generation,
            policy=start.policy,
        )
    policy = request.policy or start.policy
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


def outcome_of(err: ChildWorkflowError) -> str:
    """How a child that did not complete ended, in the entity's words."""
    cause = err.cause
    if isinstance(cause, CancelledError):
        return "aborted"
    if isinstance(cause, TerminatedError):
        return "terminated"
    if isinstance(cause, ApplicationError) and cause.type == OperationAborted.__name__:
        return aborted_outcome(cause.message)  # an operator's abort is not a failure
    return f"failed: {cause or err}"


def generation_reported(err: ChildWorkflowError) -> int | None:
    """The boot generation a failed operation reached, from its failure's details."""
    cause = err.cause
    if not isinstance(cause, ApplicationError):
        return None
    for detail in cause.details:
        if isinstance(detail, dict) and isinstance(detail.get("boot_generation"), int):
            return int(detail["boot_generation"])
    return None


def phase_of(current: CurrentOperation | None) -> str:
    """The entity's Phase: idle, awaiting-approval or `running <operation>`."""
    if current is None:
        return IDLE
    if not current.approved:
        return AWAITING_APPROVAL
    return f"running {current.record.operation}"


def details_of(
    current: CurrentOperation | None, instance: str | None, generation: int, recent: list[OperationRecord]
) -> str:
    """The entity's current details: the operation and requester, or the last outcome."""
    held = f"instance {instance}" if instance else "no instance"
    if current is None:
        details = f"{held}; boot generation {generation}"
        if recent:
            details += f"; last: {recent[-1].operation} {recent[-1].outcome}"
        return details
    record = current.record
    return f"{record.operation} ({record.workflow_id}) requested by {record.requested_by}; {held}"
