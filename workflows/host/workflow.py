"""HostWorkflow (`host/<id>`): the one owner of a host, long-running.

Every operation on a host is asked of this entity by an update, so an instance assignment and a
reprovision can never race (the single-program device race of docs/DOMAIN.md section 5):

1. `request_*` is refused while another operation runs or awaits approval, naming it.
2. A disruptive request on a host with an instance assigned waits for `approve` (or starts at
   once inside the auto-approval window that an earlier approval opened for that instance).
3. `assign_instance` is refused while an operation runs or awaits approval, naming it.

Validators answer at once, without writing history; handlers check again under one
`asyncio.Lock`, because two updates delivered in the same workflow task are both validated
before either handler runs. Both apply the same rules (`workflows/host/rules.py`).

Each operation runs as a child workflow started by its declaration (`contracts.workflow_api`),
with the business-key id (`reprovision/<id>`, `reboot/<id>/generation-<n>`, ...). Children are
ABANDONed on parent close: the entity continues-as-new only while idle, so this never cuts a
running operation; if the entity is terminated or reset by hand, a power cycle half done keeps
going, and the child's id still locks the host (a new entity's request for it is refused). A
reboot (`host reboot`) is the exception: it is cancelled with the entity (REQUEST_CANCEL), and a
cancelled reboot powers the host back on at once instead of waiting out its power-down wait, so
a terminated entity never leaves a reboot behind holding the host's BMC. A campaign that asked
for an operation is told how it ended (`host_finished`).

After each operation ends (and when a new entity starts with no operation), the entity reads
the host's versions once (`read_host_versions_brief`, in the background: requests are served and
an operation followed meanwhile; one read at a time) and shows them: BFB, flavor, DPU firmware,
DPU BMC firmware per DPU and the host BMC's firmware, each against the site's target, in its
memo entry `versions` (the entity's page in the Temporal UI), and every BFB its DPUs run in the
`BfbVersion` search attribute (`workflows/host/versions.py`). A read that fails shows
`unknown (why)`; it never fails the entity or the operation. Its cost per read: one DPU list,
and per DPU BMC and the host BMC one session and its FirmwareInventory
(`activities/versions.py`); 3 activity events, a workflow task (3), the memo upsert and, when the
BFBs changed, the search-attribute upsert: about 8 events.

Worst-case history: about 26 events per operation (the update, the child's start and end, one
`Instance`/`PhaseSince` upsert per phase change, the versions read after it) plus 5 per other
update; the entity continues-as-new when idle past `max_history_events` (default 10,000) or when
Temporal suggests it (after its versions read, if one runs; the memo and search attributes carry
over), so a run never nears the limit. No watches; at most `RECENT_LIMIT` records.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names, workflow_api
    from contracts.errors import HostBusy
    from contracts.models.campaign import HOST_FINISHED_SIGNAL, HostFinished
    from contracts.models.control import STATUS_QUERY, OperatorAnswer, OperatorRequest
    from contracts.models.host import (
        APPROVE_UPDATE,
        ASSIGN_INSTANCE_UPDATE,
        RELEASE_INSTANCE_UPDATE,
        REQUEST_FIRMWARE_UPDATE,
        REQUEST_PROVISION_UPDATE,
        REQUEST_REBOOT_UPDATE,
        REQUEST_REMOVAL_UPDATE,
        REQUEST_REPROVISION_UPDATE,
        REQUEST_RESET_UPDATE,
        RESET_OPERATION,
        WITHDRAW_UPDATE,
        AssignInstanceRequest,
        FirmwareInput,
        FirmwareRequest,
        HostOperationInput,
        HostRebootInput,
        HostRemovalInput,
        HostResetInput,
        HostStatus,
        HostWorkflowInput,
        OperationAccepted,
        OperationRecord,
        OperationRequest,
        ResetRequest,
        WithdrawRequest,
    )
    from contracts.models.inventory import HostVersionsBrief, ReadVersionsInput
    from contracts.wording import iso_z
    from workflows import kernel
    from workflows.host import rules
    from workflows.host import versions as host_versions
    from workflows.host.rules import AWAITING_APPROVAL, IDLE, RECENT_LIMIT, CurrentOperation
    from workflows.parts.reboot_rounds import start_next_reboot

VERSIONS_READ_SECONDS = 300.0
"""A versions read gives up after this (its retries included) and shows `unknown`."""
VERSIONS_READ: workflow.ActivityConfig = {
    **kernel.bounded(kernel.BMC_READ, VERSIONS_READ_SECONDS),
    # A worker without the activity (a stand-in, an older build) answers NotFoundError: the read
    # is for show, so it ends at once as `unknown` instead of holding continue-as-new 300 s.
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=kernel.BMC_ATTEMPTS,
        non_retryable_error_types=[*kernel.NON_RETRYABLE, "NotFoundError"],
    ),
}


@workflow.defn(name="HostWorkflow")
class HostWorkflow(kernel.Runbook):
    """The entity of one host: instance, boot generation, the one operation, recent outcomes."""

    @workflow.init
    def __init__(self, start: HostWorkflowInput) -> None:
        super().__init__()
        self._input = start
        self._instance = start.instance
        self._boot_generation = start.boot_generation
        self._recent: list[OperationRecord] = list(start.recent)
        self._auto_approved_until = start.auto_approved_until
        self._phase_since = start.phase_since  # carried across continue-as-new (always idle then)
        self._shown_phase: str | None = IDLE if start.phase_since is not None else None
        self._current: CurrentOperation | None = None
        self._logged: tuple[str, str] | None = None  # last logged, not a command: replay-safe
        self._lock = asyncio.Lock()
        self._versions_due: str | None = None  # after what the versions are to be read next
        self._reading_versions = False

    @workflow.run
    async def run(self, start: HostWorkflowInput) -> None:
        """Serve requests forever; follow each operation to its end; continue-as-new when idle."""
        kernel.upsert_changed(  # none when the entity was started with them (`host_entity.ask`)
            [
                names.HOST_ID.value_set(start.host_id),
                names.OPERATION.value_set(names.HOST),
                names.SITE.value_set(start.site),
            ]
        )
        self._show_phase()
        if start.phase_since is None and self._current is None:  # a new entity, no operation asked yet
            self._versions_due = "the entity started"
        self._versions_task = asyncio.create_task(self._show_versions())  # for the whole run
        while True:
            await workflow.wait_condition(lambda: self._current is not None or self._history_is_long())
            current = self._current
            if current is not None:
                if current.child is not None:
                    await self._follow(current, current.child)
                elif not current.approved:
                    await self._await_approval(current)
                else:  # approved, its child being started by the handler: no approval timer
                    await self._await_start(current)
                continue
            # Idle and the history is long: hand the state to a fresh run once no handler is
            # midway and no versions read is due or running (a run never ends with an activity
            # pending); a handler that got in meanwhile may have started an operation: follow it first.
            await workflow.wait_condition(self._may_continue_as_new)
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
        self._refuse_request(names.PROVISION, request)

    @workflow.update(name=REQUEST_REPROVISION_UPDATE)
    async def request_reprovision(self, request: OperationRequest) -> OperationAccepted:
        """Reprovision the host's DPUs (all, or `dpu_ids`)."""
        return await self._request(names.REPROVISION, request)

    @request_reprovision.validator
    def _validate_reprovision(self, request: OperationRequest) -> None:
        self._refuse_request(names.REPROVISION, request)

    @workflow.update(name=REQUEST_REBOOT_UPDATE)
    async def request_reboot(self, request: OperationRequest) -> OperationAccepted:
        """Reboot the host once (the next boot generation)."""
        return await self._request(names.REBOOT, request)

    @request_reboot.validator
    def _validate_reboot(self, request: OperationRequest) -> None:
        self._refuse_request(names.REBOOT, request)

    @workflow.update(name=REQUEST_FIRMWARE_UPDATE)
    async def request_firmware_update(self, request: FirmwareRequest) -> OperationAccepted:
        """Stage and activate DPU firmware."""
        return await self._request(names.FIRMWARE, request)

    @request_firmware_update.validator
    def _validate_firmware(self, request: FirmwareRequest) -> None:
        self._refuse_request(names.FIRMWARE, request)

    @workflow.update(name=REQUEST_REMOVAL_UPDATE)
    async def request_removal(self, request: OperationRequest) -> OperationAccepted:
        """Remove the host's DPUs (or `dpu_ids`) from DPF; `force` removes finalizers too."""
        return await self._request(names.REMOVE, request)

    @request_removal.validator
    def _validate_removal(self, request: OperationRequest) -> None:
        self._refuse_request(names.REMOVE, request)

    @workflow.update(name=REQUEST_RESET_UPDATE)
    async def request_reset(self, request: ResetRequest) -> OperationAccepted:
        """One reset sequence: DPUs (Arm, or Arm and NIC), the host, or both (workflows/host_reset/)."""
        return await self._request(RESET_OPERATION, request)

    @request_reset.validator
    def _validate_reset(self, request: ResetRequest) -> None:
        self._refuse_request(RESET_OPERATION, request)

    @workflow.update(name=APPROVE_UPDATE)
    async def approve(self, request: OperatorRequest) -> OperatorAnswer:
        """Start the operation that awaits approval; opens the auto-approval window, if any."""
        async with self._lock:
            current = rules.refuse_approval(self._current)
            current.approved = True
            if self._input.auto_approval_window_seconds > 0:
                window = timedelta(seconds=self._input.auto_approval_window_seconds)
                self._auto_approved_until = workflow.now() + window
            current.record = current.record.model_copy(update={"approved_by": request.requested_by})
            await self._start(current)
            return OperatorAnswer(
                accepted=True,
                message=f"approved {current.record.operation}; started {current.record.workflow_id}",
            )

    @approve.validator
    def _validate_approve(self, request: OperatorRequest) -> None:
        rules.refuse_approval(self._current)

    @workflow.update(name=WITHDRAW_UPDATE)
    async def withdraw(self, request: WithdrawRequest) -> OperatorAnswer:
        """Drop the request awaiting approval (`workflow_id`) without starting it; its campaign is
        told. A campaign aborted with `cancel_running` sends it, so no approval is left pending."""
        async with self._lock:
            current = rules.awaiting(self._input.host_id, self._current, request)
            why = f": {request.reason}" if request.reason else ""
            outcome = f"withdrawn by {request.requested_by}{why}"
            self._finish(current, outcome)  # the approval wait sees it and ends
        await self._notify_campaign(current, outcome)
        operation = current.record.operation
        return OperatorAnswer(accepted=True, message=f"{operation} {outcome}; nothing started")

    @withdraw.validator
    def _validate_withdraw(self, request: WithdrawRequest) -> None:
        rules.awaiting(self._input.host_id, self._current, request)

    # -- the instance ---------------------------------------------------------------------------

    @workflow.update(name=ASSIGN_INSTANCE_UPDATE)
    async def assign_instance(self, request: AssignInstanceRequest) -> OperatorAnswer:
        """Give the host to an instance; refused while an operation runs or awaits approval."""
        async with self._lock:
            rules.refuse_assignment(self._input.host_id, self._instance, self._current, request)
            if self._instance == request.instance:
                return OperatorAnswer(accepted=True, message=f"already assigned to {request.instance}")
            self._instance = request.instance
            self._auto_approved_until = None  # an approval covered the previous instance only
            self._show_phase()
            return OperatorAnswer(accepted=True, message=f"assigned to {request.instance}")

    @assign_instance.validator
    def _validate_assign(self, request: AssignInstanceRequest) -> None:
        rules.refuse_assignment(self._input.host_id, self._instance, self._current, request)

    @workflow.update(name=RELEASE_INSTANCE_UPDATE)
    async def release_instance(self, request: AssignInstanceRequest) -> OperatorAnswer:
        """Take the instance off the host (the named instance only)."""
        async with self._lock:
            rules.refuse_release(self._input.host_id, self._instance, request)
            self._instance = None
            self._auto_approved_until = None
            self._show_phase()
            return OperatorAnswer(accepted=True, message=f"released {request.instance}")

    @release_instance.validator
    def _validate_release(self, request: AssignInstanceRequest) -> None:
        rules.refuse_release(self._input.host_id, self._instance, request)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostStatus:
        """The host as the entity sees it."""
        return HostStatus(
            host_id=self._input.host_id,
            instance=self._instance,
            boot_generation=self._boot_generation,
            current=self._current.record if self._current else None,
            recent=tuple(self._recent),
            phase=rules.phase_of(self._current),
            site=self._input.site,
            auto_approved_until=self._auto_approved_until,
        )

    # -- a request, recorded, then started or awaiting approval ---------------------------------

    def _refuse_request(
        self, operation: str, request: OperationRequest | FirmwareRequest | ResetRequest
    ) -> None:
        rules.refuse_if_busy(self._input.host_id, self._current, operation)
        rules.refuse_if_assigned(self._input.host_id, self._instance, request)

    async def _request(
        self, operation: str, request: OperationRequest | FirmwareRequest | ResetRequest
    ) -> OperationAccepted:
        async with self._lock:
            self._refuse_request(
                operation, request
            )  # again: the validator may have run before another handler
            record = OperationRecord(
                operation=operation,
                workflow_id=rules.child_id(operation, self._input.host_id, self._boot_generation),
                requested_by=request.requested_by,
                outcome=AWAITING_APPROVAL,
                requested_at=workflow.now(),
                reason=getattr(request, "reason", ""),
                request_id=request.request_id,
            )
            current = CurrentOperation(record=record, request=request)
            self._current = current
            if rules.needs_approval(self._instance, self._auto_approved_until, workflow.now()):
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
                    update={"approved_by": f"auto-approval window until {iso_z(self._auto_approved_until)}"}
                )
            await self._start(current)
            started = current.record.workflow_id  # a reboot's generation is known once started
            return OperationAccepted(workflow_id=started, message=f"started {operation} as {started}")

    # -- each operation as a child workflow -----------------------------------------------------

    async def _start(self, current: CurrentOperation) -> None:
        """Start the child of `current` (a reboot: the next boot generation no reboot used)."""
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
        child_input = rules.child_input(self._input, record.operation, current.request, self._boot_generation)
        if isinstance(child_input, HostRebootInput):
            # A failed operation may have spent generations this entity never heard of; reusing
            # one would start a second run under a reboot's id.
            current.child, _ = await start_next_reboot(
                child_input,
                summary=summary.replace("{", "{{").replace("}", "}}"),  # the helper formats it
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                search_attributes=attributes,
            )
            current.record = record.model_copy(
                update={"workflow_id": current.child.id, "outcome": "running", "started_at": workflow.now()}
            )
            self._show_phase()
            return
        try:
            current.child = await self._start_child(child_input, record.workflow_id, attributes, summary)
        except WorkflowAlreadyStartedError:
            self._current = None
            self._show_phase()
            raise HostBusy(
                f"host {self._input.host_id} is busy: workflow {record.workflow_id} already runs "
                f"(started outside this entity); {record.operation} refused"
            ) from None
        current.record = record.model_copy(update={"outcome": "running", "started_at": workflow.now()})
        self._show_phase()

    async def _start_child(
        self,
        child_input: FirmwareInput | HostRemovalInput | HostOperationInput | HostResetInput,
        workflow_id: str,
        attributes: TypedSearchAttributes,
        summary: str,
    ) -> workflow.ChildWorkflowHandle[Any, Any]:
        options: dict[str, Any] = {
            "id": workflow_id,
            "parent_close_policy": workflow.ParentClosePolicy.ABANDON,
            "search_attributes": attributes,
            "static_summary": summary,
        }
        if isinstance(child_input, FirmwareInput):
            return await workflow.start_child_workflow(
                workflow_api.FirmwareWorkflow.run, child_input, **options
            )
        if isinstance(child_input, HostRemovalInput):
            return await workflow.start_child_workflow(
                workflow_api.HostRemovalWorkflow.run, child_input, **options
            )
        if isinstance(child_input, HostResetInput):
            return await workflow.start_child_workflow(
                workflow_api.HostResetWorkflow.run, child_input, **options
            )
        return await workflow.start_child_workflow(
            workflow_api.HostOperationWorkflow.run, child_input, **options
        )

    async def _await_start(self, current: CurrentOperation) -> None:
        """An approved operation whose child the handler is starting: until it started (or was
        refused). No timer: an approval timer here was started and cancelled on every request."""
        await workflow.wait_condition(lambda: self._current is not current or current.child is not None)

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
            self._reached(rules.generation_reported(err))  # a failed operation's reboots count too
            self._finish(current, rules.outcome_of(err))
            # A failed operation may have changed versions too: read them as after any other.
            self._versions_due = f"{current.record.workflow_id} {rules.outcome_of(err)}"
            await self._notify_campaign(current, rules.outcome_of(err))
            return
        self._reached(getattr(result, "boot_generation", None))
        self._finish(current, "completed")
        self._versions_due = f"{current.record.workflow_id} completed"
        await self._notify_campaign(current, "completed")

    async def _notify_campaign(self, current: CurrentOperation, outcome: str) -> None:
        """Tell the campaign that asked for this operation how it ended (`host_finished`); a
        campaign that is gone (aborted, terminated) is not an error: its sweep, or nobody, cares."""
        target = current.request.campaign_workflow_id
        if not target:
            return
        finished = HostFinished(
            host_id=self._input.host_id, workflow_id=current.record.workflow_id, outcome=outcome
        )
        try:
            await workflow.get_external_workflow_handle(target).signal(HOST_FINISHED_SIGNAL, finished)
        except ApplicationError as err:  # the campaign no longer runs
            workflow.logger.info("campaign %s not told of %s: %s", target, current.record.workflow_id, err)

    # -- what the entity knows and shows --------------------------------------------------------

    async def _show_versions(self) -> None:
        """For the whole run: whenever a read is due, read the host's versions once and show them
        (one read at a time; one due meanwhile is read after it)."""
        while True:
            await workflow.wait_condition(lambda: self._versions_due is not None)
            after, self._versions_due = self._versions_due or "", None
            self._reading_versions = True
            try:
                await self._read_versions(after)
            finally:
                self._reading_versions = False

    def _may_continue_as_new(self) -> bool:
        """No handler midway, no versions read due or running."""
        idle = self._versions_due is None and not self._reading_versions
        return idle and workflow.all_handlers_finished()

    async def _read_versions(self, after: str) -> None:
        """One `read_host_versions_brief`, shown in the memo and `BfbVersion`; a failed read shows
        `unknown (why)` and is not raised."""
        host = self._input.host_id
        brief: HostVersionsBrief | None = None
        try:
            brief = await workflow.execute_activity(
                activity_api.read_host_versions_brief,
                ReadVersionsInput(host_id=host),
                **kernel.options(VERSIONS_READ, f"read the versions of {host} (after {after})"),
            )
            memo = host_versions.memo_of(brief, after, workflow.now())
        except ActivityError as err:
            workflow.logger.warning("versions of %s not read: %s", host, kernel.describe_failure(err))
            memo = host_versions.unknown_memo(kernel.describe_failure(err), after, workflow.now())
        workflow.upsert_memo({host_versions.MEMO_KEY: memo})
        kernel.upsert_changed([host_versions.bfb_attribute(brief)])

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

    def _show_phase(self) -> None:
        """The Phase and details, and the `Instance` and `PhaseSince` search attributes that
        `host list` reads from visibility."""
        phase = rules.phase_of(self._current)
        details = rules.details_of(self._current, self._instance, self._boot_generation, self._recent)
        # The run's first `_show_phase` can already see an operation that the same activation's
        # update accepted, then shows it again once started: the same line is logged once.
        if phase != self._shown_phase or self._phase_since is None:
            self._shown_phase, self._phase_since = phase, workflow.now()
        held = self._instance
        assigned = names.INSTANCE.value_set(held) if held else names.INSTANCE.value_unset()
        # One upsert of what changed: Phase, Instance and PhaseSince together.
        also: list[SearchAttributeUpdate[Any]] = [assigned, names.PHASE_SINCE.value_set(self._phase_since)]
        self.enter(phase, details, log=(phase, details) != self._logged, also=also)
        self._logged = (phase, details)

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > (
            self._input.max_history_events
        )
