"""What a host's entity knows and what it decides; `HostWorkflow` (workflow.py) asks, then acts.

`HostEntityState` is the entity's one state object: its memory (`HostEntityMemory`, the data
shape in contracts/models/host.py, which a continued run's input carries whole) and its rules as
methods over that memory:

- the refusals (one operation at a time, naming it; none in maintenance unless asked
  `in_maintenance`: `maintenance_refusal`; no automatic one while an operator holds automation
  back: `automation_hold.py`; the instance rules; nothing to approve or withdraw)
  raise the entity's error (`contracts.errors`, naming what stands in the way) or return.
  A handler asks twice, in its validator (no history written) and again under its lock, because
  two updates delivered in one workflow task are both validated before either handler runs;
- what a request, an approval, an assignment and an ended operation change: the record of the
  one operation (`current`), the recent records, the instance, the auto-approval window, the
  boot generation;
- whether an approval re-reads DPF (the monitor's own reprovision) and what DPF says when its
  reason no longer holds: `approval_reason.py` (`ApprovalReason`, inherited);
- the child's id and input; the Phase and details the entity shows, and its `status`.

What it knows of the host's versions and what it reads again: `versions_known.py` (`KnownVersions`);
the doubt after an end whose power read was not answered: `power_doubt.py` (`PowerDoubt`).

Pure: no Temporal (not even `workflow.unsafe`), no clock (`now` is an argument), no I/O. The
runtime handles (the child's handle, the lock, the versions task) are the workflow's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from pydantic import BaseModel, PrivateAttr

from contracts import names
from contracts.errors import (
    HostBusy,
    InMaintenance,
    InstanceConflict,
    InvalidInput,
    NothingAwaitsApproval,
    OperationStarted,
)
from contracts.host_requests import EntityRequest
from contracts.models.host import (
    ApproveRequest,
    AssignInstanceRequest,
    EntityRequestBody,
    HostEntityMemory,
    HostStatus,
    HostWorkflowInput,
    Maintenance,
    MaintenanceRequest,
    OperationRecord,
    PendingOperation,
    ResetRequest,
    WithdrawRequest,
)
from contracts.wording import is_completed, iso_z
from workflows.host import dpf_removed
from workflows.host.abort_rule import AWAITING_APPROVAL, STARTING
from workflows.host.approval_reason import ApprovalReason
from workflows.host.automation_hold import (
    automatic,
    hold_after,
    nothing_to_retry,
    refuse_automatic,
    released,
)
from workflows.host.awaiting import awaiting_request
from workflows.host.child_input import child_input
from workflows.host.maintenance_rules import approved_in_maintenance, maintenance_refusal, maintenance_words
from workflows.host.maintenance_rules import standing as _standing
from workflows.host.power_doubt import PowerDoubt
from workflows.host.power_rest import after_operation, baseline, forget_baseline, found_by_operation
from workflows.host.takeover_rules import no_longer_awaiting, no_longer_off
from workflows.host.versions_known import KnownVersions
from workflows.parts.boot_generation import generation_after
from workflows.parts.host_power import HOST_IS_OFF, HOST_IS_ON

RECENT_LIMIT: Final = 20
IDLE: Final = "idle"
MINIMUM_APPROVAL_WAIT: Final = timedelta(seconds=1)  # an expiry already past still gets one timer


class HostEntityState(HostEntityMemory, KnownVersions, ApprovalReason, PowerDoubt):
    """The entity of one host: its memory, and its rules over it (see the module docstring)."""

    _start: HostWorkflowInput = PrivateAttr()  # the run's input: the host, its policy, the window
    # The ending operation reached a new boot generation (`reached`, then `finish`, in one step)
    _cycled: bool = PrivateAttr(default=False)

    @classmethod
    def of(cls, start: HostWorkflowInput) -> HostEntityState:
        """The state a run starts from: the previous run's (`start.state`), or a new entity's,
        with the instance and boot generation its start names."""
        if start.state is not None:
            state = cls.model_validate(start.state.model_dump())
        else:
            state = cls(instance=start.instance, boot_generation=start.boot_generation)
        state._start = start
        return state

    @property
    def host_id(self) -> str:
        return self._start.host_id

    # -- the refusals: each raises the entity's error, or returns ----------------------------------
    def refuse_request(self, kind: EntityRequest[Any], request: EntityRequestBody) -> None:
        """One operation at a time, none in maintenance unless asked `in_maintenance`, and on an
        assigned host none for a campaign that skips those."""
        self.refuse_if_busy(kind.operation)
        refuse_automatic(self.host_id, self.automation_held_back, kind.operation, request)
        refusal = maintenance_refusal(self.host_id, self.maintenance, kind, request.in_maintenance)
        if refusal is not None:
            raise InMaintenance(refusal, {"by": self.maintenance.by if self.maintenance else ""})
        if request.refuse_if_assigned and self.instance is not None:  # the check and the start, atomic
            raise InstanceConflict(
                f"host {self.host_id} is assigned to instance {self.instance}; skipped (refuse_if_assigned)"
            )
        self.refuse_if_removed(kind.operation, request)
        if isinstance(request, ResetRequest) and request.policy is not None and request.target != "host":
            raise InvalidInput(
                f"reset of {self.host_id}: a policy (--power-down-wait) applies to the host target only "
                f"(--host); the {request.target} target keeps the host off until its DPUs are up"
            )

    def refuse_if_removed(self, operation: str, request: EntityRequestBody) -> None:
        """No request for a DPU DPF no longer has, whoever asks (the CLI, the monitor, a campaign,
        a script): a reprovision of one, a reset naming one, a reset of every DPU once the whole
        node was removed (`dpf_removed.refusal`). Known here: what this entity's completed
        removals took out (`removed_from_dpf`), until a provision brings it back. A reset of
        every DPU leaves the removed ones out (`left_out`)."""
        refused = dpf_removed.refusal(self.host_id, self.removed_from_dpf, operation, request)
        if refused is not None:
            raise refused

    def left_out(self, request: EntityRequestBody) -> dict[str, str]:
        """The DPUs a reset of every DPU leaves out, DPF no longer having them (`dpf_removed`)."""
        return dpf_removed.left_out(self.removed_from_dpf, request)

    def left_out_said(self, request: EntityRequestBody) -> str:
        """What the entity's answer adds for them ("" none): "; left out D: DPF no longer has it ..."."""
        words = dpf_removed.left_out_words(self.left_out(request))
        return f"; {words}" if words else ""

    def refuse_if_busy(self, operation: str) -> None:
        """Refused while another operation runs or awaits approval, naming it."""
        current = self.current
        if current is None:
            return
        record = current.record
        raise HostBusy(
            f"host {self.host_id} is busy: {record.operation} {_standing(current)} "
            f"(workflow {record.workflow_id}, requested by {record.requested_by}); {operation} refused"
        )

    def refuse_assignment(self, request: AssignInstanceRequest) -> None:
        """An instance is taken only by an idle host that holds no other instance."""
        if self.current is not None:
            record = self.current.record
            raise HostBusy(
                f"host {self.host_id} cannot take instance {request.instance}: "
                f"{record.operation} {_standing(self.current)} (workflow {record.workflow_id})"
            )
        if self.instance is not None and self.instance != request.instance:
            raise InstanceConflict(
                f"host {self.host_id} is assigned to instance {self.instance}; release it first"
            )

    def refuse_release(self, request: AssignInstanceRequest) -> None:
        """Only the instance the host holds is released."""
        if self.instance != request.instance:
            raise InstanceConflict(
                f"host {self.host_id} holds {self.instance or 'no instance'}, not {request.instance}"
            )

    def refuse_maintenance(self, request: MaintenanceRequest) -> None:
        """Maintenance on needs a reason (it is what the refusals and skips name)."""
        if request.on and not request.reason.strip():
            raise InvalidInput(f"host {self.host_id}: maintenance on needs a reason (--reason)")

    def set_maintenance(self, request: MaintenanceRequest, now: datetime) -> str | None:
        """Maintenance on (who, why, since `now`) or off; the change in words, or None when
        nothing changes (already on: the first who and why stand; already off). Turning it off
        replays nothing: what was refused or skipped meanwhile is not asked again by the entity."""
        if request.on:
            if self.maintenance is not None:
                return None
            self.maintenance = Maintenance(by=request.requested_by, reason=request.reason, since=now)
            self.power = forget_baseline(self.power)  # a person's power actions are expected (power_rest.py)
            return maintenance_words(self.maintenance)
        if self.maintenance is None:
            return None
        words = f"maintenance ended by {request.requested_by} (it was {maintenance_words(self.maintenance)})"
        self.maintenance = None
        return words

    def release_automation(self, by: str, *, dry: bool = False) -> str:
        """An operator ends the hold on automation (`host retry` of the idle host): the words; the
        refusal when there is none (or an operation is in flight: `retry` is that operation's)."""
        hold, current = self.automation_held_back, self.current
        if current is not None:
            raise InvalidInput(
                f"host {self.host_id}: {current.record.workflow_id} {_standing(current)}: nothing to retry "
                "here (a hold on automation ends with host retry once the host is idle)"
            )
        if hold is None:
            raise InvalidInput(nothing_to_retry(self.host_id, self.recent[-1] if self.recent else None))
        if not dry:
            self.automation_held_back = None
        return released(self.host_id, hold, by, "host retry")

    def awaiting_approval(self, request: ApproveRequest | None = None) -> PendingOperation:
        """What `approve` approves: the operation awaiting approval, or the refusal (with the
        approval `request`: its maintenance rule too, `approved_in_maintenance`)."""
        if self.current is None or self.current.approved:
            raise NothingAwaitsApproval(self.nothing_awaits())
        if request is not None:
            approved_in_maintenance(self.host_id, self.maintenance, self.current, request.in_maintenance)
        return self.current

    def nothing_awaits(self) -> str:
        """The refusal of an `approve` with nothing to approve; it names the last request when it
        ended unstarted (withdrawn, e.g. by the monitor once its DPUs were Ready again, or
        expired), so an approval of it is never refused without saying why."""
        last = self.recent[-1] if self.recent else None
        unstarted = last is not None and last.started_at is None
        if last is None or not unstarted or not last.outcome.startswith(("withdrawn", "expired")):
            return "nothing awaits approval"
        return (
            f"nothing awaits approval: the last request, {last.operation} ({last.workflow_id}) "
            f"requested by {last.requested_by}, was {last.outcome}"
        )

    def to_withdraw(self, request: WithdrawRequest) -> PendingOperation:
        """The operation a `withdraw` names, still awaiting approval; or the refusal."""
        current = self.current
        if current is not None and current.record.workflow_id == request.workflow_id and current.approved:
            raise OperationStarted(f"{request.workflow_id} was approved and started: abort it instead")
        if current is None or current.record.workflow_id != request.workflow_id:
            raise NothingAwaitsApproval(
                f"{request.workflow_id} does not await approval on host {self.host_id}"
            )
        return current

    # -- what a request, an approval and an instance change ----------------------------------------
    def record_request(
        self, kind: EntityRequest[Any], request: EntityRequestBody, now: datetime
    ) -> PendingOperation:
        """The request, recorded as the one operation, awaiting approval until decided."""
        record = OperationRecord(
            operation=kind.operation,
            workflow_id=self.child_id(kind),
            requested_by=request.requested_by,
            outcome=AWAITING_APPROVAL,
            requested_at=now,
            reason=getattr(request, "reason", ""),
            request_id=request.request_id,
            in_maintenance=(
                maintenance_words(self.maintenance) if request.in_maintenance and self.maintenance else ""
            ),
        )
        self.current = PendingOperation(record=record, request=request)
        if self.automation_held_back is not None and not automatic(request):  # an operator's own request
            self.automation_held_back = None  # ends the hold (`automation_hold.py`)
        return self.current

    def needs_approval(self, kind: EntityRequest[Any], now: datetime) -> bool:
        """A disruptive request on an assigned host waits for `approve`, unless an approval's
        auto-approval window for that instance is still open."""
        if not kind.approval or self.instance is None:
            return False
        return self.auto_approved_until is None or now >= self.auto_approved_until

    def approve_at_once(self, current: PendingOperation) -> None:
        """No approval needed: on an assigned host, the open window approves it (and says so)."""
        current.approved = True
        if self.instance is not None:
            window = f"auto-approval window until {iso_z(self.auto_approved_until)}"
            current.record = current.record.model_copy(update={"approved_by": window})

    def approve(self, by: str, now: datetime, in_maintenance: bool = False) -> PendingOperation:
        """`approve`: the operation awaiting approval, approved by `by` (`in_maintenance`: its
        `--in-maintenance`) unless the maintenance rule refuses (`approved_in_maintenance`); it
        opens the instance's auto-approval window, if the entity has one."""
        current = self.awaiting_approval()
        current.record = approved_in_maintenance(self.host_id, self.maintenance, current, in_maintenance)
        current.approved = True
        if self._start.auto_approval_window_seconds > 0:
            self.auto_approved_until = now + timedelta(seconds=self._start.auto_approval_window_seconds)
        current.record = current.record.model_copy(update={"approved_by": by})
        self.taken_over = no_longer_awaiting(self.taken_over, current.record, f"approved by {by}")
        return current

    def approval_wait(self, current: PendingOperation, now: datetime) -> timedelta:
        """How long `current` still waits for its approval before it expires."""
        requested_at = current.record.requested_at or now
        remaining = requested_at + timedelta(seconds=self._start.policy.approval_timeout_seconds) - now
        return max(remaining, MINIMUM_APPROVAL_WAIT)

    def assign(self, instance: str) -> bool:
        """Give the host to `instance` (True), or say it holds it already (False). An approval's
        window covered the previous instance only."""
        if self.instance == instance:
            return False
        self.instance, self.auto_approved_until = instance, None
        return True

    def release(self) -> None:
        self.instance, self.auto_approved_until = None, None

    # -- the operation's child ---------------------------------------------------------------------
    def child_id(self, kind: EntityRequest[Any]) -> str:
        """The business-key id of an operation's child (a reboot: the next boot generation)."""
        if kind.operation == names.REBOOT:
            return names.host_reboot_workflow_id(self.host_id, self.boot_generation + 1)
        return names.host_operation_workflow_id(kind.operation, self.host_id)

    def child_input(self, current: PendingOperation) -> BaseModel:
        """The input of the operation's child, from its request and what the entity knows
        (`child_input.child_input`)."""
        return child_input(
            current,
            self.host_id,
            self.boot_generation,
            baseline(self.power),
            self._start.policy,
            left_out=self.left_out(current.request),
        )

    def starting(self, current: PendingOperation) -> None:
        current.record = current.record.model_copy(update={"outcome": STARTING})

    def started(self, current: PendingOperation, now: datetime, workflow_id: str | None = None) -> None:
        """The child runs (a reboot's id is known once started: the generation it took)."""
        update: dict[str, Any] = {"outcome": "running", "started_at": now}
        if workflow_id is not None:
            update["workflow_id"] = workflow_id
        current.record = current.record.model_copy(update=update)

    def drop(self) -> None:
        """The operation's child could not start (its id runs outside this entity): no record."""
        self.current = None

    def reached(self, generation: int | None, now: datetime | None = None) -> None:
        """The boot generation an operation reported, however it ended (a failed or aborted
        one's power cycles count too): `boot_generation.generation_after`, the one rule. `now`:
        when it was learnt (the cleared mark's words say it)."""
        before = self.boot_generation
        self.boot_generation = generation_after(before, generation)
        self._cycled = self.boot_generation > before
        if self._cycled:  # it booted: it was On (`finish`, next, reads the words)
            self._no_longer_off(f"generation {self.boot_generation} booted", now)

    def finish(
        self,
        current: PendingOperation,
        outcome: str,
        now: datetime,
        *,
        deletes_sent: bool = False,
        last_reset: datetime | None = None,
    ) -> None:
        """The operation ended (or was withdrawn, or expired): recorded, and the host idle. A
        completed removal records what it took out of DPF, a completed provision what it brought
        back (`refuse_if_removed`); so does a removal aborted after its first delete
        (`deletes_sent`: DPF finishes the deletes sent). `last_reset`: the host's LastResetTime as
        its last reboot read it at its end (its result's), kept by the baseline it leaves On."""
        if is_completed(outcome) or (deletes_sent and current.record.operation == names.REMOVE):
            self._completed(current)
        if is_completed(outcome) or current.adopted_run:  # what a takeover reported is past (an
            self.taken_over = ""  # adopted run's "still running" too): the line goes (`take_over`)
        elif not current.approved:  # a taken-over request withdrawn or expired: no longer "still awaiting"
            self.taken_over = no_longer_awaiting(self.taken_over, current.record, outcome)
        self.recent.append(current.record.model_copy(update={"outcome": outcome, "finished_at": now}))
        del self.recent[:-RECENT_LIMIT]
        self.current = None
        self.automation_held_back = (
            hold_after(self.host_id, current, outcome, now) or self.automation_held_back
        )
        ran = current.record.started_at is not None  # the power it left, as of its end (power_rest.py)
        # An end whose power read was not answered: read again soon (power_doubt.py).
        self.doubt_after_end(current.record, outcome, ran, self._cycled)
        if HOST_IS_OFF in outcome:
            self.left_off_by = current.record.workflow_id
        elif HOST_IS_ON in outcome:  # this run powered the host on or saw it On, and says so
            self._no_longer_off(f"{current.record.workflow_id} says the host is on", now)
        kept = self.maintenance is not None  # a person's power actions are expected: no baseline
        self.power = after_operation(
            self.power, outcome, ran, self._cycled, now, in_maintenance=kept, last_reset=last_reset
        )
        self._cycled = False

    def found_unplanned(self, words: str) -> bool:
        """An ended operation's result said a power change nobody here made (`unplanned_power`):
        shown as the last one (`status().unplanned_power`); True when there was one to show."""
        if not words:
            return False
        self.power = found_by_operation(self.power, words)
        return True

    def _completed(self, current: PendingOperation) -> None:
        operation, dpu_ids = current.record.operation, getattr(current.request, "dpu_ids", None)
        if operation == names.REMOVE:
            for dpu_id in dpu_ids or ("",):  # none named: the whole DPU node
                self.removed_from_dpf[dpu_id] = current.record.workflow_id
        elif operation == names.PROVISION:
            if dpu_ids:
                for dpu_id in dpu_ids:
                    self.removed_from_dpf.pop(dpu_id, None)
                self.removed_from_dpf.pop("", None)  # a provision recreates the node with those
            else:
                self.removed_from_dpf.clear()

    # -- what the entity shows -----------------------------------------------------------------------
    def phase(self) -> str:
        """The entity's Phase: idle, awaiting-approval or `running <operation>`."""
        if self.current is None:
            return IDLE
        if not self.current.approved:
            return AWAITING_APPROVAL
        return f"running {self.current.record.operation}"

    def details(self) -> str:
        """The entity's current details: the operation and requester, or the last outcome."""
        held = f"instance {self.instance}" if self.instance else "no instance"
        maintenance = f"; {maintenance_words(self.maintenance)}" if self.maintenance else ""
        if self.current is None:
            details = f"{held}; boot generation {self.boot_generation}"
            if self.recent:
                details += f"; last: {self.recent[-1].operation} {self.recent[-1].outcome}"
            return details + maintenance
        record = self.current.record
        asked = (
            f"; asked with --in-maintenance while {record.in_maintenance}" if record.in_maintenance else ""
        )
        said = "; ".join(self.current.request.site_check)  # degraded: its start Event says it too
        return (
            f"{record.operation} ({record.workflow_id}) requested by {record.requested_by}; {held}"
            f"{asked or maintenance}" + (f"; site check: {said}" if said else "")
        )

    def awaiting_operation(self) -> str | None:
        """The operation of the request awaiting approval (None: none awaits), as `host list`'s
        OPERATION column names it (the memo entry `names.AWAITING_MEMO`): the Phase
        `awaiting-approval` alone does not say what would run."""
        if self.current is None or self.current.approved:
            return None
        return self.current.record.operation

    def read_at_rest(self, power_state: str | None, now: datetime | None = None) -> str:
        """A power watch reading at rest (`power_watch.py`): the host read On clears the mark of
        a run that left it OFF (a reading is the world, e.g. after `metalflow bmc power HOST on`,
        the WARNING's advice). The words of what it cleared ("" nothing); `now`: the reading's
        time, which the cleared mark's words say."""
        if power_state != "On" or not self.left_off_by:
            return ""
        words = f"the host is On at rest: no longer OFF as {self.left_off_by} left it"
        self._no_longer_off("the host read On at rest", now)
        return words

    def powered_on_by_hand(self, how: str, power_state: str, at: datetime) -> str:
        """`metalflow bmc power HOST on|cycle` saw the host `power_state` at `at` (signal
        `power_set`; `how`: who, which command): On clears the mark of a run that left it OFF at
        once, not at the watch's next reading (the WARNING's advice, done); an Off by `bmc power
        off` is no run's OFF and marks nothing. The words of what it cleared ("" nothing)."""
        if power_state != "On" or not self.left_off_by:
            return ""
        words = f"the host is On by {how}: no longer OFF as {self.left_off_by} left it"
        self._no_longer_off(f"powered On by {how}", at)
        return words

    def _no_longer_off(self, why: str, now: datetime | None = None) -> None:
        """The OFF mark cleared; the taken-over words naming it say so, and when (`now`;
        `no_longer_off`): without a time the line read as if the mark had never held."""
        if self.left_off_by:
            when = f" at {iso_z(now)}" if now is not None else ""
            self.taken_over = no_longer_off(self.taken_over, self.left_off_by, f"{why}{when}")
        self.left_off_by = ""

    def left_off(self) -> str | None:
        """The run whose final words said it left the host OFF (`workflows/parts/host_power.py`),
        while the host is idle: `host status` warns of it and `host list` marks it (the memo entry
        `names.LEFT_OFF_MEMO`), from runs' words alone, no BMC read. Cleared by a run that says
        the host is on or reached a boot generation, not by any run's end (`finish`, `reached`),
        by a power watch reading the host On at rest (`read_at_rest`) and by `metalflow bmc power
        HOST on` seeing it On (`powered_on_by_hand`)."""
        if self.current is None and self.left_off_by:
            return self.left_off_by
        return None

    def show(self, phase: str, now: datetime) -> datetime:
        """Since when the entity is in `phase`, as `PhaseSince` shows: moved by a new phase only."""
        if phase != self.shown_phase or self.phase_since is None:
            self.shown_phase, self.phase_since = phase, now
        return self.phase_since

    def status(self) -> HostStatus:
        """The host as the entity sees it (the `status` query)."""
        return HostStatus(
            host_id=self.host_id,
            instance=self.instance,
            boot_generation=self.boot_generation,
            current=self.current.record if self.current else None,
            recent=tuple(self.recent),
            phase=self.phase(),
            site=self._start.site,
            auto_approved_until=self.auto_approved_until,
            approval_expires_at=self.approval_expires_at(),
            maintenance=self.maintenance,
            unplanned_power=self.power.unplanned if self.power else "",
            left_off_by=self.left_off_by,
            maybe_off_after=self.maybe_off_after,
            power_read_at=self.power_read_at,  # set by the power watch only (None: no watch)
            automation_held_back=self.automation_held_back,
            taken_over=self.taken_over,
            awaiting=awaiting_request(self.current),
            site_check=self.current.request.site_check if self.current else (),
        )

    def approval_expires_at(self) -> datetime | None:
        """When the operation awaiting approval expires unless approved (None: nothing awaits it)."""
        current = self.current
        if current is None or current.approved or current.record.requested_at is None:
            return None
        return current.record.requested_at + timedelta(seconds=self._start.policy.approval_timeout_seconds)
