"""HostWorkflow (`host/<id>`): the one owner of a host, long-running.

Every operation on a host is asked of this entity by an update, so an instance assignment and a
reprovision can never race (the single-program device race of docs/DOMAIN.md section 5):

1. `request_*` is refused while another operation runs or awaits approval, naming it.
2. A disruptive request on a host with an instance assigned waits for `approve` (or starts at
   once inside the auto-approval window that an earlier approval opened for that instance).
3. `assign_instance` is refused while an operation runs or awaits approval, naming it.
4. `approve` of the monitor's own reprovision first reads its DPUs from DPF: when none is degraded
   any more, the request is withdrawn, nothing started, and the approval refused naming what DPF
   says (`ReasonNoLongerHolds`); an approval never runs a request whose reason no longer holds.
5. In maintenance (`set_maintenance`, `metalflow host maintenance`: who, why, since when) every
   `request_*`, and an `approve`, is refused (`InMaintenance`, naming the maintenance) unless the
   request or approval says `in_maintenance` (an operator's `--in-maintenance`, recorded with the
   operation); the monitor and campaigns never say it. Turning it on stops nothing that runs; off
   replays nothing.
6. An operator's abort (or withdrawal) of the monitor's request holds automation back: every
   automatic request (the monitor's, a campaign's) is refused naming who and why, until
   `host retry` of the idle host (`release_automation`) or an operator's own request
   (`automation_hold.py`). It lives here, so a restarted monitor finds it.
7. A new entity (after a terminate) takes over what its predecessor's memo carried, adopts the
   operation it left running (busy with it, its end recorded) and records the runs that ended
   unrecorded (`takeover.py`): never two operations on one host.
8. A run that can power the host off, ended without saying its power, has it read once (`power_after_end`).

The rules are the entity's state's (`state.py`): validators answer at once, without writing
history; handlers ask again under one `asyncio.Lock` (two updates delivered in one workflow task
are both validated before either handler runs). The operation requests are declared once, in
`contracts.host_requests`: each row's handler here is one line (`requested`). The power watch
(`power_watch.py`, the base class) tells a power change nobody here made (`UnplannedPower`).

Each operation runs as a child workflow of the row's type, with the business-key id
(`reprovision/<id>`, `reboot/<id>/generation-<n>`, ...). Children are ABANDONed on parent close
(the entity continues-as-new only while idle): if the entity is terminated or reset by hand, a
power cycle half done keeps going and the next entity adopts it. A reboot (`host reboot`) is
cancelled with the entity (REQUEST_CANCEL) and powers the host back on at once. A campaign that
asked is told the end (`host_finished`); an operator's abort completes the child (`outcome.py`).

The host's versions (memo entry `versions`, search attribute `BfbVersion`: `versions.py`) are
read only when they can have changed, never a BMC for a value the entity knows
(`versions_known.py` states the rule and its sources); `host versions --refresh` hands the entity
the command's own read (signal `versions_read`). One read at a time, in the background; one that
fails shows `unknown (why)` and never fails the entity. Cost per read: about 8 events.

Worst-case history: about 26 events per operation (update, child start and end, an upsert per phase
change, the versions read after it; 3 more per reboot run a cancelled or terminated one has read,
`reached_when_ended`, and 3 for its own run's read: a cancelled one's final words, a terminated reboot's,
reset's or reprovision's last Phase or state, `takeover_rules.cut_read`; 3 more per operation that
reboots the host other than a reboot: the reboot id it would take, read before its start,
`refuse_behind_waiting`; ~12 for rule 8's read, and when it is not answered 17 per re-read of the
host's power, at most 4: `power_watch.py`) plus 5 per other update, 17 (+6 per DPU) per power watch
reading, about 6 once per new entity (its predecessor read, `takeover.py`; 6 more per adopted operation),
a memo upsert per carried change; continues-as-new idle past `max_history_events` (10,000) or when asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes
from temporalio.exceptions import (
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from contracts import names
    from contracts.errors import HostBusy
    from contracts.host_requests import (
        FIRMWARE,
        PROVISION,
        REBOOT,
        REMOVAL,
        REPROVISION,
        RESET,
        EntityRequest,
        of_operation,
    )
    from contracts.models.campaign import HOST_FINISHED_SIGNAL, HostFinished
    from contracts.models.control import STATUS_QUERY, OperatorAnswer, OperatorRequest
    from contracts.models.host import (
        APPROVE_UPDATE,
        ASSIGN_INSTANCE_UPDATE,
        MAINTENANCE_UPDATE,
        RELEASE_AUTOMATION_UPDATE,
        RELEASE_INSTANCE_UPDATE,
        WITHDRAW_UPDATE,
        ApproveRequest,
        AssignInstanceRequest,
        EntityRequestBody,
        HostRebootInput,
        HostStatus,
        HostWorkflowInput,
        MaintenanceRequest,
        OperationAccepted,
        OperationEnd,
        PendingOperation,
        WithdrawRequest,
    )
    from contracts.models.inventory import (
        EVERYTHING,
        VERSIONS_READ_SIGNAL,
        VersionsRead,
    )
    from workflows import kernel
    from workflows.host import versions as host_versions
    from workflows.host.approval_check import ApprovalCheck
    from workflows.host.child_input import reboot_held_first
    from workflows.host.maintenance_rules import leaves_running
    from workflows.host.outcome import ended_as, generation_reported, outcome_of
    from workflows.host.power_watch import PowerWatch
    from workflows.host.state import HostEntityState
    from workflows.host.takeover import Gate, TakeOver
    from workflows.host.versions_shown import VersionsShown
    from workflows.parts.reboot_rounds import (
        reached_when_ended,
        refuse_behind_waiting,
        start_next_reboot,
    )

RequestT = TypeVar("RequestT", bound=EntityRequestBody)


def requested(
    kind: EntityRequest[RequestT],
) -> workflow.UpdateMethodMultiParam[[HostWorkflow, RequestT], Awaitable[OperationAccepted]]:
    """The entity's update for one operation request (a row of `contracts.host_requests`): its
    validator refuses by the entity's rules, its handler records the request, then starts the
    operation or holds it for approval (`HostWorkflow._request`)."""

    async def handle(self: HostWorkflow, request: RequestT) -> OperationAccepted:
        return await self._request(kind, request)

    def validate(self: HostWorkflow, request: RequestT) -> None:
        self.state.refuse_request(kind, request)

    update = workflow.update(name=kind.update)(kind.typed(handle, OperationAccepted))
    update.validator(kind.typed(validate, None))
    return update


@workflow.defn(name="HostWorkflow")
class HostWorkflow(VersionsShown, PowerWatch, ApprovalCheck, TakeOver):
    """The entity of one host: instance, boot generation, the one operation, recent outcomes."""

    @workflow.init
    def __init__(self, start: HostWorkflowInput) -> None:
        super().__init__()
        self._input = start
        self.state = HostEntityState.of(start)
        # This run's own (runtime, not carried): the one lock of the handlers, the current
        # operation's child, whether the versions task is reading, and what this run logged.
        self._lock = Gate()  # opens once a new entity took over its predecessor's record (takeover.py)
        self._child: workflow.ChildWorkflowHandle[Any, Any] | None = None
        self._reading_versions = self._reading_power = False
        self._logged: tuple[str, str] | None = None  # not a command: replay-safe

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
        asked = not workflow.all_handlers_finished()  # a request came with the start: its end reads
        await self._take_over(start.state is None)  # takeover.py: a new entity reads its predecessor
        self._show_phase()
        if start.state is None and self.state.current is None and not asked:  # a new entity, nothing asked
            self.state.versions_wanted("the entity started", EVERYTHING)
        self._versions_task = asyncio.create_task(self._show_versions())  # for the whole run
        self._power_task = asyncio.create_task(self._watch_power())  # power_watch.py
        while True:
            await workflow.wait_condition(lambda: self.state.current is not None or self._history_is_long())
            current = self.state.current
            if current is not None:
                if self._child is not None:
                    await self._follow(current, self._child)
                elif current.adopted_run:  # its predecessor's child, still running (takeover.py)
                    await self.follow_adopted(current)
                elif not current.approved:
                    await self._await_approval(current)
                else:  # approved, its child being started by the handler: no approval timer
                    await self._await_start(current)
                continue
            # Idle and the history is long: hand the state to a fresh run once no handler is
            # midway and no versions read is due or running (a run never ends with an activity
            # pending); a handler that got in meanwhile may have started an operation: follow it first.
            await workflow.wait_condition(self._may_continue_as_new)
            if self.state.current is None:
                break
        self.settle_upserts()  # the phase entered in this activation goes with the run
        workflow.continue_as_new(start.model_copy(update={"state": self.state}))

    # -- requests: one line per row of `contracts.host_requests` ----------------------------------
    request_provision = requested(PROVISION)
    request_reprovision = requested(REPROVISION)
    request_reboot = requested(REBOOT)
    request_firmware_update = requested(FIRMWARE)
    request_removal = requested(REMOVAL)
    request_reset = requested(RESET)

    @workflow.update(name=APPROVE_UPDATE)
    async def approve(self, request: ApproveRequest) -> OperatorAnswer:
        """Start the operation awaiting approval (in maintenance: rule 5); opens the auto-approval
        window, if any. The monitor's reprovision starts only while its reason holds (else it is
        withdrawn and the approval refused naming what DPF says now: `_reason_gone`)."""
        async with self._lock:
            waiting = self.state.awaiting_approval(request)  # in maintenance: `--in-maintenance`?
            if self.state.reason_to_check(waiting):
                why = await self._reason_gone(waiting)
                if why is not None:
                    outcome = self.state.withdrawn_at_approval(request.requested_by, why)
                    self._finish(waiting, outcome)  # the approval wait sees it and ends
                    await self._notify_campaign(waiting, outcome)
                    raise self.state.refuse_stale_approval(waiting, why)
            current = self.state.approve(request.requested_by, workflow.now(), request.in_maintenance)
            await self._start(current)
            started = f"approved {current.record.operation}; started {current.record.workflow_id}"
            return OperatorAnswer(accepted=True, message=started)

    @approve.validator
    def _validate_approve(self, request: ApproveRequest) -> None:
        if self._lock.open:  # a new entity's awaiting request is its predecessor's: after takeover
            self.state.awaiting_approval(request)

    @workflow.update(name=RELEASE_AUTOMATION_UPDATE)
    async def release_automation(self, request: OperatorRequest) -> OperatorAnswer:
        """`metalflow host retry HOST` on an idle host an operator held automation back on: the
        monitor and campaigns may ask again (`automation_hold.py`)."""
        async with self._lock:
            words = self.state.release_automation(request.requested_by)
            self._show_phase()
        return OperatorAnswer(accepted=True, message=words)

    @release_automation.validator
    def _validate_release_automation(self, request: OperatorRequest) -> None:
        if self._lock.open:  # a new entity's hold is its predecessor's: the handler, after takeover
            self.state.release_automation(request.requested_by, dry=True)

    @workflow.update(name=WITHDRAW_UPDATE)
    async def withdraw(self, request: WithdrawRequest) -> OperatorAnswer:
        """Drop the request awaiting approval (`workflow_id`) without starting it; its campaign is
        told. A campaign aborted with `cancel_running` sends it, so no approval is left pending."""
        async with self._lock:
            current = self.state.to_withdraw(request)
            why = f": {request.reason}" if request.reason else ""
            outcome = f"withdrawn by {request.requested_by}{why}"
            self._finish(current, outcome)  # the approval wait sees it and ends
        await self._notify_campaign(current, outcome)
        operation = current.record.operation
        return OperatorAnswer(accepted=True, message=f"{operation} {outcome}; nothing started")

    @withdraw.validator
    def _validate_withdraw(self, request: WithdrawRequest) -> None:
        if self._lock.open:  # as `_validate_approve`
            self.state.to_withdraw(request)

    # -- the instance ---------------------------------------------------------------------------

    @workflow.update(name=ASSIGN_INSTANCE_UPDATE)
    async def assign_instance(self, request: AssignInstanceRequest) -> OperatorAnswer:
        """Give the host to an instance; refused while an operation runs or awaits approval."""
        async with self._lock:
            self.state.refuse_assignment(request)
            if not self.state.assign(request.instance):
                return OperatorAnswer(accepted=True, message=f"already assigned to {request.instance}")
            self._show_phase()
            return OperatorAnswer(accepted=True, message=f"assigned to {request.instance}")

    @assign_instance.validator
    def _validate_assign(self, request: AssignInstanceRequest) -> None:
        self.state.refuse_assignment(request)

    @workflow.update(name=RELEASE_INSTANCE_UPDATE)
    async def release_instance(self, request: AssignInstanceRequest) -> OperatorAnswer:
        """Take the instance off the host (the named instance only)."""
        async with self._lock:
            self.state.refuse_release(request)
            self.state.release()
            self._show_phase()
            return OperatorAnswer(accepted=True, message=f"released {request.instance}")

    @release_instance.validator
    def _validate_release(self, request: AssignInstanceRequest) -> None:
        self.state.refuse_release(request)

    # -- maintenance ----------------------------------------------------------------------------

    @workflow.update(name=MAINTENANCE_UPDATE)
    async def set_maintenance(self, request: MaintenanceRequest) -> OperatorAnswer:
        """Maintenance on (who, why, since now) or off. While on, every operation request is
        refused unless it says `in_maintenance` (the monitor's and campaigns' never do); turning
        it on stops nothing that runs (the answer says so, and how to abort it); turning it off
        replays nothing. Shown in the details, `Maintenance`/`MaintenanceSince` and an Event."""
        async with self._lock:
            self.state.refuse_maintenance(request)
            words = self.state.set_maintenance(request, workflow.now())
            host = self.state.host_id
            if words is None:
                held = self.state.maintenance
                now = f"already in maintenance ({held.by}: {held.reason})" if held else "not in maintenance"
                return OperatorAnswer(accepted=True, message=f"{host} is {now}; nothing changed")
            self._show_phase(log=False)
            kernel.report("maintenance-on" if request.on else "maintenance-off", words)
            message = f"{host} is {words}" if request.on else f"{host}: {words}; nothing skipped is replayed"
            running = leaves_running(self.state.host_id, self.state.current) if request.on else None
            return OperatorAnswer(accepted=True, message=message + (f"; {running}" if running else ""))

    @set_maintenance.validator
    def _validate_maintenance(self, request: MaintenanceRequest) -> None:
        self.state.refuse_maintenance(request)

    # -- versions -------------------------------------------------------------------------------

    @workflow.signal(name=VERSIONS_READ_SIGNAL)
    def versions_read(self, read: VersionsRead) -> None:
        """`metalflow host versions HOST --refresh`: everything, read by the command; shown as the
        entity's own read would be, and no BMC asked again for it."""
        brief = self.state.brief_known(read.brief, EVERYTHING, workflow.now(), refresh=True)
        after = f"host versions --refresh by {read.requested_by}"
        workflow.upsert_memo({host_versions.MEMO_KEY: host_versions.memo_of(brief, after, workflow.now())})
        kernel.upsert_changed([host_versions.bfb_attribute(brief)])

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostStatus:
        """The host as the entity sees it (`taking_over` until the gate opens: requests wait)."""
        status = self.state.status()
        return status if self._lock.open else status.model_copy(update={"taking_over": True})

    # -- a request, recorded, then started or awaiting approval ---------------------------------

    async def _request(self, kind: EntityRequest[Any], request: EntityRequestBody) -> OperationAccepted:
        async with self._lock:
            # again: the validator may have run before another handler
            self.state.refuse_request(kind, request)
            current = self.state.record_request(kind, request, workflow.now())
            left = self.state.left_out_said(request)  # "; left out D: DPF no longer has it ..."
            if self.state.needs_approval(kind, workflow.now()):
                self._show_phase()
                host, instance = self.state.host_id, self.state.instance
                return OperationAccepted(
                    workflow_id=current.record.workflow_id,
                    awaiting_approval=True,
                    message=f"{kind.operation} of {host} awaits approval: the host is assigned "
                    f"to instance {instance} (approve with: metalflow approve {host}){left}",
                )
            self.state.approve_at_once(current)
            await self._start(current)
            started = current.record.workflow_id  # a reboot's generation is known once started
            return OperationAccepted(
                workflow_id=started, message=f"started {kind.operation} as {started}{left}"
            )

    # -- each operation as a child workflow -----------------------------------------------------

    async def _start(self, current: PendingOperation) -> None:
        """Start the child of `current` (a reboot: the next boot generation no reboot used)."""
        self.state.starting(current)
        record, host = current.record, self.state.host_id
        attributes = TypedSearchAttributes(
            [
                SearchAttributePair(names.HOST_ID, host),
                SearchAttributePair(names.OPERATION, record.operation),
                SearchAttributePair(names.SITE, self._input.site),
            ]
            + (
                [SearchAttributePair(names.CAMPAIGN, current.request.campaign)]
                if current.request.campaign
                else []
            )
        )
        summary = f"{record.operation} of host {host}, requested by {record.requested_by}"
        child_input = self.state.child_input(current)
        if isinstance(child_input, HostRebootInput):
            # A failed operation may have spent generations this entity never heard of; reusing
            # one would start a second run under a reboot's id.
            try:
                self._child, _ = await start_next_reboot(
                    child_input,
                    summary=summary.replace("{", "{{").replace("}", "}}"),  # the helper formats it
                    parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                    search_attributes=attributes,
                )
            except HostBusy:  # an abandoned reboot waits for a person: refused, naming it
                self.state.drop()
                self._show_phase()
                raise
            self.state.started(current, workflow.now(), workflow_id=self._child.id)
            self._show_phase()
            return
        first = reboot_held_first(child_input)
        if first is not None:  # a reboot waiting for a person holds it: refused before any change
            try:
                await refuse_behind_waiting(host, first)
            except HostBusy:
                self.state.drop()
                self._show_phase()
                raise
        kind = of_operation(record.operation)
        try:
            self._child = await workflow.start_child_workflow(
                kind.child,
                child_input,
                id=record.workflow_id,
                result_type=OperationEnd,  # of any operation's result, what the entity reads
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                # The phase its runbook enters first, free at the start: no upsert of it (issue 37).
                search_attributes=TypedSearchAttributes(
                    [*attributes, SearchAttributePair(names.PHASE, kind.first_phase)]
                ),
                static_summary=summary,
            )
        except WorkflowAlreadyStartedError:
            self.state.drop()
            self._show_phase()
            raise HostBusy(
                f"host {host} is busy: workflow {record.workflow_id} already runs "
                f"(started outside this entity); {record.operation} refused"
            ) from None
        self.state.started(current, workflow.now())
        self._show_phase()

    async def _await_start(self, current: PendingOperation) -> None:
        """An approved operation whose child the handler is starting: until it started (or was
        refused). No timer: an approval timer here was started and cancelled on every request."""
        await workflow.wait_condition(lambda: self.state.current is not current or self._child is not None)

    async def _await_approval(self, current: PendingOperation) -> None:
        timeout = timedelta(seconds=self._input.policy.approval_timeout_seconds)
        try:
            await workflow.wait_condition(
                lambda: self.state.current is not current or self._child is not None,
                timeout=self.state.approval_wait(current, workflow.now()),
                timeout_summary=f"approval of {current.record.operation}: expires unless approved",
            )
        except TimeoutError:
            async with self._lock:
                if self.state.current is not current or current.approved:
                    return
                self._finish(current, f"expired: not approved within {timeout}")
            await self._notify_campaign(current, f"expired: not approved within {timeout}")

    async def _follow(self, current: PendingOperation, child: workflow.ChildWorkflowHandle[Any, Any]) -> None:
        try:
            result = await child
        except ChildWorkflowError as err:
            state, reported = self.state, generation_reported(err)  # its reboots count too
            generation, reboot = await reached_when_ended(err, reported, state.host_id, state.boot_generation)
            state.reached(generation, workflow.now())
            unplanned, deletes_sent, last_reset = "", False, None  # cut by hand: what its run says
            outcome = await self.said_when_cut(current.record, outcome_of(err), reboot)
        else:  # `completed`, or an operator's abort: `aborted by ...` (a removal's: after a delete?)
            self.state.reached(result.boot_generation, workflow.now())
            outcome, unplanned, deletes_sent = ended_as(result), result.unplanned_power, result.deletes_sent
            last_reset = result.last_reset_time  # its last reboot's mark: the baseline keeps it
        await self.ended(current, outcome, unplanned, deletes_sent=deletes_sent, last_reset=last_reset)

    async def ended(
        self, current: PendingOperation, outcome: str, unplanned: str, *, deletes_sent: bool = False,
        last_reset: datetime | None = None,
    ) -> None:  # fmt: skip
        """An operation's end (own child or adopted): power read if unsaid (rule 8), recorded, told."""
        outcome = await self.power_after_end(current.record, outcome)
        self._finish(current, outcome, deletes_sent=deletes_sent, last_reset=last_reset)
        self._operation_found(unplanned)  # power_watch.py: the status and memo (its Event was its own)
        # A failed or aborted operation may have changed versions too: read them as after any other.
        self.state.versions_after(current, outcome)
        await self._notify_campaign(current, outcome)

    async def _notify_campaign(self, current: PendingOperation, outcome: str) -> None:
        """Tell the campaign that asked for this operation how it ended (`host_finished`); a
        campaign that is gone (aborted, terminated) is not an error: its sweep, or nobody, cares."""
        target = current.request.campaign_workflow_id
        if not target:
            return
        finished = HostFinished(
            host_id=self.state.host_id, workflow_id=current.record.workflow_id, outcome=outcome
        )
        try:
            await workflow.get_external_workflow_handle(target).signal(HOST_FINISHED_SIGNAL, finished)
        except ApplicationError as err:  # the campaign no longer runs
            workflow.logger.info("campaign %s not told of %s: %s", target, current.record.workflow_id, err)

    def _finish(
        self,
        current: PendingOperation,
        outcome: str,
        *,
        deletes_sent: bool = False,
        last_reset: datetime | None = None,
    ) -> None:
        self.state.finish(current, outcome, workflow.now(), deletes_sent=deletes_sent, last_reset=last_reset)
        self._child = None
        self._show_phase()
        workflow.logger.info("%s of %s: %s", current.record.operation, self.state.host_id, outcome)

    # -- what the entity knows and shows --------------------------------------------------------

    def _may_continue_as_new(self) -> bool:
        """No handler midway, no versions read due or running."""
        idle = self.state.versions_due is None and not (self._reading_versions or self._reading_power)
        return idle and workflow.all_handlers_finished()

    def _show_phase(self, *, log: bool = True) -> None:
        """The Phase and details, the `Instance`, `PhaseSince`, `Maintenance`, `MaintenanceSince`,
        `LeftOffBy` search attributes and the memo entries `left_off`, `maybe_off`, `awaiting` (written
        when they change) that `host list` reads (`log=False`: no log line or Event, e.g. when
        only the maintenance changed: its own says it)."""
        phase, details = self.state.phase(), self.state.details()
        # The run's first `_show_phase` can already see an operation that the same activation's
        # update accepted, then shows it again once started: the same line is logged once.
        since = self.state.show(phase, workflow.now())
        held, kept = self.state.instance, self.state.maintenance
        assigned = names.INSTANCE.value_set(held) if held else names.INSTANCE.value_unset()
        maintenance: list[SearchAttributeUpdate[Any]] = (
            [names.MAINTENANCE.value_set(kept.by), names.MAINTENANCE_SINCE.value_set(kept.since)]
            if kept
            else [names.MAINTENANCE.value_unset(), names.MAINTENANCE_SINCE.value_unset()]
        )
        # One upsert of what changed (`upsert_changed`: never in maintenance, none of those two).
        # The OFF mark, searchable (`host list` after a terminate; moves rarely): `names.LEFT_OFF_BY`.
        off = self.state.left_off_by
        maintenance.append(names.LEFT_OFF_BY.value_set(off) if off else names.LEFT_OFF_BY.value_unset())
        also: list[SearchAttributeUpdate[Any]] = [assigned, names.PHASE_SINCE.value_set(since), *maintenance]
        self.enter(phase, details, log=log and (phase, details) != self._logged, also=also)
        self._logged = (phase, details)
        self._carry()  # takeover.py: what outlives the run, for a successor after a terminate
        # What `host list` reads from the memo in the same listing: an idle host its last run left
        # OFF (or may have: `maybe_off`), the operation a request awaiting approval would run. One
        # upsert of what changed.
        shown = {**self._power_memo(), names.AWAITING_MEMO: self.state.awaiting_operation()}
        changed = {key: value for key, value in shown.items() if workflow.memo_value(key, None) != value}
        if changed:
            workflow.upsert_memo(changed)  # None removes an entry

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > (
            self._input.max_history_events
        )
