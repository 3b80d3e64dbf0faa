"""The host entity's state, its rules and what it shows, mixed into `HostWorkflow` (workflows/host.py).

`HostEntityState` holds what the entity knows (instance, boot generation, the one operation in
flight or awaiting approval, recent outcomes, the auto-approval window) and the rules every
handler checks twice, in its validator and again under the lock: busy, assigned, the instance's
assignment and release, whether a request needs approval, which request a `withdraw` names. It
records an operation's end (`_finish`) and shows the phase (current details and the
`Instance`/`PhaseSince` upserts).

Cost per host: no activities, no watches; one `Instance`/`PhaseSince` upsert per phase change
(counted in the worst-case history of workflows/host.py); at most RECENT_LIMIT records kept.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from contracts import names
    from contracts.models.host import (
        AssignInstanceRequest,
        FirmwareRequest,
        HostWorkflowInput,
        OperationRecord,
        OperationRequest,
        WithdrawRequest,
    )
    from workflows.common import enter_phase

RECENT_LIMIT: Final = 20
IDLE: Final = "idle"
AWAITING_APPROVAL: Final = "awaiting-approval"
BUSY_ERROR: Final = "HostBusy"
NOT_AWAITING_ERROR: Final = "NothingAwaitsApproval"
STARTED_ERROR: Final = "OperationStarted"  # `withdraw` came too late: abort the operation instead
INSTANCE_ERROR: Final = "InstanceConflict"
# Entities started before it set Instance and PhaseSince too (for `host list`); old runs do not.
LIST_ATTRIBUTES_PATCH: Final = "entity-instance-and-phase-since"


@dataclass
class CurrentOperation:
    """The operation in flight or awaiting approval, with what is needed to start it."""

    record: OperationRecord
    request: OperationRequest | FirmwareRequest
    approved: bool = False  # no approval needed, or given: starting or started
    child: workflow.ChildWorkflowHandle[Any, Any] | None = None

    @property
    def state(self) -> str:
        return "is in flight" if self.approved else "awaits approval"


class HostEntityState:
    """What the entity knows and the rules its handlers apply; `HostWorkflow` adds the handlers."""

    def __init__(self, start: HostWorkflowInput) -> None:
        self._input = start
        self._instance = start.instance
        self._boot_generation = start.boot_generation
        self._recent: list[OperationRecord] = list(start.recent)
        self._auto_approved_until = start.auto_approved_until
        self._phase_since = start.phase_since  # carried across continue-as-new (always idle then)
        self._shown_phase: str | None = IDLE if start.phase_since is not None else None
        self._current: CurrentOperation | None = None
        self._logged_phase: tuple[str, str] | None = None  # last logged, not a command: replay-safe
        self._lock = asyncio.Lock()

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

    def _awaiting(self, request: WithdrawRequest) -> CurrentOperation:
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

    def _reached(self, generation: object) -> None:
        if isinstance(generation, int) and generation > self._boot_generation:
            self._boot_generation = generation

    def _finish(self, current: CurrentOperation, outcome: str) -> None:
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
