"""HostOperationWorkflow: provision or reprovision a host's DPUs (docs/DOMAIN.md section 2.8, flows 2-4).

Id `provision/<id>` or `reprovision/<id>` (`contracts.names.host_operation_workflow_id`);
the host's entity workflow starts it as a child with `static_summary` (e.g. "reprovision host-001
(2 DPUs) for alice: reason"). The runbook, top to bottom in `run`:

1. Resolve the host's inventory; show HostId, Operation, Site and Phase.
2. Start the DPF watcher; it signals every change of the host's DPF state.
3. Provision: ensure the site objects, register the DPUNode and DPUDevices. Reprovision: delete
   each chosen DPU, pinned by uid, so DPF recreates it (a retry never deletes the new one).
4. Wait until every DPU is held in `Node Effect` (or past it, when a restarted run finds them
   released), then release the hold.
5. Reboot rounds: wait until every DPU is in `Rebooting` with the node's reboot-required
   annotation (or `Ready`); exactly one host power cycle (a `HostRebootWorkflow` child for the
   next boot generation); remove the annotation; wait until DPF moves on. Again when DPF asks
   again (BF4: two rounds). Ends when every DPU is `Ready`.

The rules, all from `OperationPolicy`:

- A wait on DPF that sees no change at all for `phase_timeout_seconds` -> manual intervention.
- After a power cycle and the annotation's removal, DPF must move a DPU on (phase, uid or a
  condition) within `reboot_wait_seconds`; if not, the power cycle is re-issued with the next
  boot generation (ForceOff then On from retry `force_off_from_retry`), up to
  `max_power_cycle_retries` times; then manual intervention.
- Manual intervention: Phase `manual-intervention-required`, the reason in the current details
  and the status query, and a wait (no time limit) for an update: `retry` (start the wait over,
  with the retries counted afresh), `mark_rebooted` (the host was rebooted: remove the
  annotation), `abort` (clean up, then complete with Phase `aborted` and a result whose
  `aborted` says who, why and what was left: an abort is asked for, no Failed run). `abort` is
  accepted at any time and acted on at the next wait.
- A Kubernetes call (`_call_kube`, `kube_calls.py`) that has not succeeded within
  `kube_call_timeout_seconds` (its retries included) -> manual intervention naming the call and
  its last error; `retry` (or `mark_rebooted`) calls it again. An `abort` while the call is
  retrying cancels it at once.
- A reboot child whose BMC cannot reboot the host (credentials rejected, unreachable after the
  activity's retries, a reset refused) fails with `BMCRebootFailed` naming why, and the
  operation enters manual intervention with that reason at once: `retry` starts a new reboot
  (the next generation; the BMC and its credentials are read afresh), `mark_rebooted` takes the
  host as rebooted by hand, `abort` ends the run. One that left the host OFF takes `retry` only,
  and every early end while the host is OFF says so (`... its reboot ended, and the host HOST is
  OFF: ...`), so the entity marks the host. A cancel asks nobody: that reboot runs again, once,
  not abortable (`PowerCustody.cancelled`, the reset's rule), and only a host still OFF after it
  ends the run failed `HostLeftOff`.
- `host_rebooted` (signal) and `mark_rebooted` (update) go to the reboot child while one is in
  flight (a manual reboot, or a BMC that could not be reached); otherwise `host_rebooted` in
  manual intervention counts as `mark_rebooted`, and is ignored (logged) elsewhere: a stale
  confirmation must never stand in for a reboot DPF has not asked for yet. The update
  `host_rebooted` (what the CLI sends) is refused instead, naming the phase and what it waits for.

DPF v26 (docs/DOMAIN.md section 2): the barrier's extra conditions are in
`workflows/parts/dpf_barrier.py`; the reset's method, the reboot-loop bound, DPF's deadline and
its escalation, Error by reason and the resets metalflow did not make are the state's decisions
(`state.py`, whose docstring states them). The acknowledgement removes the annotation once per
token (`MarkRebootedInput`): a retry that lands after DPF asked again leaves that new request
alone.

The runbook is this module (`run` top to bottom, the handlers, the calls and waits) and its base,
the reboot round (`reboot_round.py`, step 5's reboot, acknowledgement and re-issues). What the
run knows and what it decides from it (the Error budgets, the reboot-loop refusal, DPF's
deadline, the reboot's method and counts, resets nobody of ours made, the status) is
`HostOperationState` in `state.py`; the reboots go through the reboot-rounds part the operations
share (`workflows/parts/reboot_rounds.py`). Every early end goes through the kernel's
`to_the_end`: what a failure or abort leaves behind is `_clean_up`'s; a failure's error carries
the generation reached (`ending_error`), an abort's result has it, and the entity counts it.

Cost per host and worst-case history: no activity slot while waiting (the site watch signals
each change; one short read joins it; after an acknowledged reboot the write's answer stands for
a read: `DPFWatch.written`), no timers while nothing changes (its join's read is the first
state). About 40 events to reach the first reboot, 4 per DPF change signalled, and per power
cycle about 39 in the run itself (the reboot child started and completed, the whole read before
it, the acknowledgement, phase changes) plus up to 50 in its reboot child (more on a shared
BMC's fleet-wide lease, none for a BMC of one host). Bounded by the policy: rounds DPF asks for
(1, or 2 for BF4) x (1 + `max_power_cycle_retries`) power cycles, plus 4 per operator answer and
6 per bounded Kubernetes call that stalls. `worst_case_events` is that bound as a function of
what a run did; tests/test_host_operation_escalation.py holds a run that re-issues every reboot
and takes operator answers to it. Measured figures: bench/README.md,
"workflows/host_operation/workflow.py".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import (
        DPUFailed,
        HostLeftOff,
        InvalidInput,
        OperationInstalling,
        RebootLoop,
        WatcherFailed,
    )
    from contracts.models.control import (
        ABORT_UPDATE,
        RETRY_UPDATE,
        STATUS_QUERY,
        OperatorAnswer,
        OperatorRequest,
    )
    from contracts.models.dpf import (
        DPF_STATE_CHANGED_SIGNAL,
        ChangeResult,
        DPURef,
        GroupSpec,
        HostDPFState,
        ObjectsResult,
        RegisterHostInput,
        ReprovisionInput,
        SiteSetupInput,
    )
    from contracts.models.host import (
        HOST_REBOOTED_SIGNAL,
        HOST_REBOOTED_UPDATE,
        MANUAL_INTERVENTION_REQUIRED,
        MARK_REBOOTED_UPDATE,
        HostOperationInput,
        HostOperationKind,
        HostOperationResult,
        HostOperationStatus,
        OperationAbortRequest,
        RebootMethod,
    )
    from contracts.models.inventory import HostInventory, HostLookup
    from contracts.wording import duration, plural
    from workflows import kernel
    from workflows.host_operation.dpf_owed import OwedWait
    from workflows.host_operation.kube_calls import stalled, timed_out
    from workflows.host_operation.reboot_round import RebootRound
    from workflows.host_operation.state import HostOperationState
    from workflows.parts.dpf_watch import DPFWatch
    from workflows.parts.host_power import PowerCustody, ended_off
    from workflows.parts.reboot_rounds import RebootRounds
    from workflows.parts.site_check_said import SiteCheckSaid


def worst_case_events(*, power_cycles: int, dpf_changes: int, answers: int = 0, stalls: int = 0) -> int:
    """The most history events a run may cost (see the module docstring), given what it did."""
    return 40 + (39 + 50) * power_cycles + 4 * dpf_changes + 4 * answers + 6 * stalls


RESOLVING = "resolving-inventory"
REGISTERING = "registering-dpus"
DELETING = "deleting-dpus"
WAITING_FOR_HOLD = "waiting-for-hold"
WAITING_FOR_REBOOT_REQUEST = "waiting-for-reboot-request"
COMPLETED = "completed"


@workflow.defn(name="HostOperationWorkflow")
class HostOperationWorkflow(SiteCheckSaid, RebootRound):
    """Provision or reprovision all or some DPUs of one host; see the module docstring. Its reboot
    round, and the tools the runbook shares with it, are its base (`reboot_round.py`)."""

    @workflow.init
    def __init__(self, request: HostOperationInput) -> None:
        super().__init__()
        self.state = HostOperationState.start(request, workflow.now())
        self.reboots = RebootRounds(self, request.power_before)  # its first reboot compares it
        self.power = PowerCustody(host_id=request.host_id)
        self._watch = DPFWatch(on_taken=self._observe)
        self._released_at: int | None = None  # the watch's changes when the last hold release began
        self.owed = OwedWait()  # a step only DPF takes, which the reboot barrier waits on (`dpf_owed.py`)
        self.operation_kind = request.kind.value
        self.site_check = request.site_check  # said by its phases (`SiteCheckSaid`)

    @workflow.run
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        """Run the operation to completion; see the module docstring."""
        try:
            return await self.to_the_end(self._operate, self._clean_up)
        finally:
            await self._watch.stop()  # after the cleanup: its acknowledgement may read DPF again

    async def _operate(self) -> HostOperationResult:
        inventory = await self._resolve_inventory()
        self._show_identity(inventory)
        self._watch.start(self.host, self.state.dpu_ids, bound_seconds=self.policy.kube_call_timeout_seconds)
        await self._read_first_state()
        if self.state.request.kind == HostOperationKind.PROVISION:
            await self._ensure_site_objects(inventory)
            await self._register_dpus(inventory)
        else:
            await self._delete_dpus_for_reprovision()
        await self._wait_until_held()
        await self._release_hold()
        await self._reboot_rounds()
        await self._watch.stop()
        await self.finish(COMPLETED, self.state.completed_words())
        return self._result()

    async def _clean_up(self, err: BaseException) -> str:
        """Leave the site consistent; undo only what this run changed and is safe to undo.

        - A reboot child in flight is stopped: a BMC cycle finishes first (never left Off), a
          manual wait just ends; a reboot that happened is counted.
        - The released hold is NOT re-asserted: DPUs past `Node Effect` are installing, and a hold
          cannot stop an install; DPF finishes it and the host is left with Ready DPUs.
        - Deleted DPUs are left to DPF, which recreates them (deleting is what reprovisioning is).
        - Registered DPUNode/DPUDevices stay: removing them is `HostRemovalWorkflow`'s job.
        - A power cycle done but not yet acknowledged (annotation still there) is acknowledged:
          the reboot DPF asked for happened, and DPF would otherwise wait for it forever.
        - A reboot that ended with the host OFF (`left_off`): a cancel (nobody to ask) runs it
          again once, not abortable (`_on_again_after_cancel`, the reset's custody rule); still
          OFF, whatever the end, it is said: the host is OFF.
        """
        self.state.cleaning_up = True
        stopped = await self.reboots.stop()
        if stopped is not None:
            self._took_reboot(stopped)
        if isinstance(err, asyncio.CancelledError | CancelledError):
            await self._on_again_after_cancel()
        if self.state.cycled_without_ack:
            try:
                await self._mark_node_rebooted()
            except Exception as ack_err:  # noqa: BLE001 - best effort: the failure below is the news
                workflow.logger.warning("could not acknowledge the reboot during cleanup: %s", ack_err)
        off = f"; {ended_off('its reboot', self.left_off)}" if self.left_off else ""
        return f"{self.state.left_behind()}{off}"

    def aborted_result(self, err: BaseException) -> HostOperationResult:
        """An operator's abort completes the run (Phase `aborted`): the result says who aborted,
        why and what the run left, and the generation reached, which the entity counts."""
        return self._result().model_copy(update={"aborted": self.aborted_words()})

    def _result(self) -> HostOperationResult:
        """The state's result, with what its reboots' reads found nobody here did (the entity shows it)."""
        unplanned, last_reset = self.reboots.unplanned_power, self.reboots.last_reset_time
        return self.state.result(workflow.now()).model_copy(
            update={"unplanned_power": unplanned, "last_reset_time": last_reset}
        )

    def ending_error(self, err: BaseException) -> BaseException | None:
        """The error ended with (ours, an abort's included, or an activity's or child's, in words:
        `said_in_words`) carries the generation reached (the entity counts it) and what the run
        left (each DPU and the host: our own errors too, e.g. a reboot that failed). A cancel with the
        host OFF (`left_off`) ends failed `HostLeftOff` with those words: a cancelled child reads
        only "aborted" to the entity, which must read that the host is OFF."""
        said = self.said_in_words(err) or err
        if isinstance(err, asyncio.CancelledError | CancelledError) and self.left_off:
            said = HostLeftOff(f"cancelled (the workflow was cancelled). {self.left_behind}")
        if not isinstance(said, ApplicationError):
            return None
        reached, left = {"boot_generation": self.state.generation}, self.left_behind  # its own error too
        message = said.message if not left or left in said.message else f"{said.message}. {left}"
        return ApplicationError(message, *said.details, reached, type=said.type, non_retryable=True)

    # -- messages ----------------------------------------------------------------------------------
    @workflow.update(name=ABORT_UPDATE)
    def abort(self, request: OperationAbortRequest) -> OperatorAnswer:
        """Stop at the next safe point (the kernel's abort); a campaign's (`finish_installing`) is
        refused once the DPUs install: they would wait for a reboot nobody gives."""
        return self.accept_abort(request)

    @abort.validator
    def _validate_abort(self, request: OperationAbortRequest) -> None:
        self.validate_abort()
        if request.finish_installing and (refusal := self.state.installing_refusal()) is not None:
            raise OperationInstalling(f"{workflow.info().workflow_id}: {refusal}")

    def abort_promise(self) -> str:
        promise = super().abort_promise()
        return promise if self.state.hold_released else f"{promise}; it leaves {self.state.abort_leaves()}"

    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        """The site watch saw a change of the host's DPF objects."""
        self._watch.accept(state)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostOperationStatus:
        """Where the operation is, per DPU, and what it waits for."""
        return self.state.status(
            phase=self.phase,
            waiting_for=self.details,
            dpf=self.dpf,
            phases=self._watch.clock.phases,
            rebooting_to=self.reboots.rebooting_to,
            intervention=self.question,
        ).model_copy(update={"site_check": self.site_check, "left": self.state.left_behind()})

    @workflow.signal(name=HOST_REBOOTED_SIGNAL)
    async def host_rebooted(self, confirmation: OperatorRequest) -> None:
        """Someone rebooted the host: passed to the reboot in flight, taken as `mark_rebooted`
        while an operator is asked, and ignored (logged) otherwise: a stale confirmation must
        never stand in for a reboot DPF has not asked for yet."""
        if self.reboots.child is not None:
            await self.reboots.confirm(confirmation)
        elif self.awaits("mark_rebooted"):
            self.decide("mark_rebooted", confirmation)
        else:
            workflow.logger.warning(
                "host_rebooted from %s ignored: no reboot is in flight (phase %s)",
                confirmation.requested_by,
                self.phase,
            )

    @workflow.update(name=HOST_REBOOTED_UPDATE)
    async def host_rebooted_update(self, confirmation: OperatorRequest) -> OperatorAnswer:
        """The host was rebooted by hand: refused, naming what the run waits for, unless awaited."""
        return await self._confirm_reboot(confirmation)

    @host_rebooted_update.validator
    def _validate_host_rebooted(self, confirmation: OperatorRequest) -> None:
        if self.reboots.child is not None and self.policy.reboot_method == RebootMethod.MANUAL:
            return
        if self.awaits("mark_rebooted"):
            return
        raise ValueError(
            f"{workflow.info().workflow_id} is not waiting for a reboot: it is {self.phase}: {self.details}"
        )

    @workflow.update(name=RETRY_UPDATE)
    def retry(self, request: OperatorRequest) -> OperatorAnswer:
        """Start the stuck wait over (only in manual-intervention-required)."""
        return self.decide("retry", request)

    @retry.validator
    def _validate_retry(self, request: OperatorRequest) -> None:
        self.validate_decision("retry", asked_in=MANUAL_INTERVENTION_REQUIRED)

    @workflow.update(name=MARK_REBOOTED_UPDATE)
    async def mark_rebooted(self, request: OperatorRequest) -> OperatorAnswer:
        """The host was rebooted: confirms a manual reboot in flight, or ends a stuck reboot wait."""
        return await self._confirm_reboot(request)

    @mark_rebooted.validator
    def _validate_mark_rebooted(self, request: OperatorRequest) -> None:
        if self.reboots.child is None:
            self.validate_decision("mark_rebooted", asked_in=MANUAL_INTERVENTION_REQUIRED)

    async def _confirm_reboot(self, request: OperatorRequest) -> OperatorAnswer:
        """A reboot confirmation: to the reboot in flight, else the operator's `mark_rebooted`."""
        child = self.reboots.child
        if child is None:
            return self.decide("mark_rebooted", request)
        refused = await self.reboots.confirm(request)
        if refused is None:
            return OperatorAnswer(accepted=True, message=f"reboot confirmation passed to {child.id}")
        return OperatorAnswer(accepted=False, message=refused)

    # -- the runbook's steps -----------------------------------------------------------------------
    async def _resolve_inventory(self) -> HostInventory:
        host_id = self.state.request.host_id
        self.enter(RESOLVING, f"the inventory's record of {host_id}")  # "waiting for ..."
        inventory: HostInventory = await self.call(
            activity_api.resolve_host_inventory,
            HostLookup(host_id=host_id),
            kernel.options(kernel.INVENTORY, f"resolve {host_id}"),
            abortable=False,  # a short read, as before: the first wait acts on an abort
        )
        refusal = self.state.take_inventory(inventory)
        if refusal is not None:
            raise InvalidInput(refusal)
        return inventory

    def _show_identity(self, inventory: HostInventory) -> None:
        # None written when the entity started this run with them (the usual case).
        kernel.upsert_changed(
            [
                names.HOST_ID.value_set(inventory.host_id),
                names.OPERATION.value_set(self.state.request.kind.value),
                names.SITE.value_set(inventory.site or "default"),
            ]
        )

    async def _read_first_state(self) -> None:
        """The join's own read (`DPFWatch.start`) is the first state: no second read. Its retries
        are bounded like any Kubernetes call (`_call_kube`): past the bound, manual
        intervention, then the join again."""
        seconds = self.policy.kube_call_timeout_seconds
        while True:
            await self.wait(lambda: self._watch.state is not None or self._watch.failure() is not None)
            failure = self._watch.failure()
            if self._watch.state is not None or failure is None:
                return
            if not (isinstance(failure, ActivityError) and timed_out(failure)):
                raise WatcherFailed(f"the DPF watch of {self.host.host_id} failed: {failure}")
            summary = f"join the site's DPF watch for {self.host.host_id}"
            await self._intervene(stalled(summary, seconds, failure))
            self._watch.rejoin(seconds)

    async def _ensure_site_objects(self, inventory: HostInventory) -> None:
        # Idempotent: existing objects are left as they are, so this is cheap on a set-up site.
        self.enter(REGISTERING, "the site's DPF objects (BFB, flavor, deployments) to exist")
        if not inventory.groups:
            return
        setup = SiteSetupInput(groups=tuple(GroupSpec(name=g) for g in inventory.groups))
        result: ObjectsResult = await self._call_kube(
            activity_api.create_site_objects,
            setup,
            kernel.KUBE_WRITE,
            "ensure the site's BFB, flavor and DPU deployments",
        )
        if result.changed():
            self.state.changes.append("created site objects")

    async def _register_dpus(self, inventory: HostInventory) -> None:
        devices = plural(len(self.state.dpu_ids), "DPUDevice")
        self.enter(REGISTERING, f"the DPUNode and {devices} to be registered")
        result: ObjectsResult = await self._call_kube(
            activity_api.register_host_dpus,
            RegisterHostInput(inventory=inventory),
            kernel.KUBE_WRITE,
            f"register the DPUs of {inventory.host_id}",
        )
        if result.changed():
            self.state.changes.append("registered the DPUNode and DPUDevices")

    async def _delete_dpus_for_reprovision(self) -> None:
        self.enter(DELETING, f"the deletion of {', '.join(self.state.dpu_ids)}, so DPF recreates them")
        for dpu_id in self.state.dpu_ids:
            await self._reprovision_one(dpu_id)

    async def _reprovision_one(self, dpu_id: str) -> None:
        current = self.state.current(self.dpf, dpu_id)
        if current is None:
            return  # already gone (a previous run deleted it): DPF is recreating it
        ref = DPURef(host_id=self.host.host_id, dpu_id=dpu_id, namespace=self.host.namespace)
        result: ChangeResult = await self._call_kube(
            activity_api.reprovision_dpu,
            ReprovisionInput(dpu=ref, uid=current.uid),
            kernel.KUBE_WRITE,
            f"reprovision DPU {dpu_id} (delete uid {current.uid})",
        )
        self.state.deleted(dpu_id, current.uid, result.name, result.detail)

    async def _wait_until_held(self) -> None:
        await self._wait_for_dpf(WAITING_FOR_HOLD, self.state.held, self.state.hold_words)

    async def _release_hold(self) -> None:
        self.state.hold_released = True
        await self._release_if_held()

    async def _release_if_held(self) -> None:
        seen = self._released_at != self._watch.changes  # a state taken since the last release began
        if not self.state.release_owed(self.dpf, seen):
            return
        began = self._watch.changes
        result: ChangeResult = await self._call_kube(
            activity_api.release_node_effect_hold,
            self.host,
            kernel.KUBE_WRITE,
            f"release the Node Effect hold of {self.host.node_name()}",
        )
        self._released_at = began  # states taken while it ran may show a hold set after it: released next
        if result.changed:
            self.state.changes.append("released the Node Effect hold")

    async def _reboot_rounds(self) -> None:
        while True:
            await self._wait_for_dpf(
                WAITING_FOR_REBOOT_REQUEST, self.state.ready_or_at_barrier, self.state.barrier_words
            )
            if self.state.all_ready(self.dpf):
                return
            if not await self._confirmed_at_barrier():
                continue
            loop = self.state.reboot_loop(self.dpf)
            if loop is not None:
                raise RebootLoop(loop)
            self.state.round_started(self.dpf)
            await self._reboot_and_confirm(self.state.marks(self.dpf))

    async def _confirmed_at_barrier(self) -> bool:
        """Read the host's DPF objects whole before a reboot and decide on that read.

        Why: a watch may carry less than the objects hold (DPF v26's `rebootStatus`, the
        agent's method and count); the reset, its method and the loop bound are decided on all
        of it. One read per reboot round. False: not there after all (e.g. a DPU's Arm still
        shutting down); the wait goes on, woken by DPF's next change (the `Rebooted` condition
        follows `rebootStatus`, DOMAIN.md 2.5)."""
        state: HostDPFState = await self._call_kube(
            activity_api.read_host_dpf_state,
            self.host,
            kernel.KUBE_READ,
            f"read the DPF state of {self.host.host_id} before the reboot",
        )
        self._watch.adopt_read(state)  # ordered: the acknowledgement's answer is ordered against it
        return self.state.at_reboot_barrier(state)

    # -- waiting on DPF ----------------------------------------------------------------------------
    async def _wait_for_dpf(
        self, phase: str, goal: Callable[[HostDPFState], bool], describe: Callable[[HostDPFState], str]
    ) -> None:
        """Wait until `goal` holds of DPF's state; no change for the phase timeout (or DPF's
        deadline close) -> intervention. At the reboot barrier a step only DPF takes, overdue,
        is said once (`_say_owed`), and the wait goes on."""
        self.enter(phase, describe(self.dpf))
        while True:
            # Counted before `_keep_dpus_moving`: a change that lands while it runs an activity
            # (e.g. a DPU going to Error during the hold's release) must wake the wait below, or
            # that DPU sits in Error unseen until the phase timeout.
            seen = self._watch.changes
            await self._keep_dpus_moving()
            if goal(self.dpf):
                self.owed.clear()
                return
            if phase == WAITING_FOR_REBOOT_REQUEST:
                self.owed.take(self.dpf, self.state.dpu_ids, self.state.replaced, workflow.now())
            details = describe(self.dpf) + self.owed.shown()
            if self.phase != phase:
                self.enter(phase, details)
            else:
                self.show(details)
            timeout, escalate = self.state.wait_bound(self.dpf, workflow.now())
            owed_first = self._owed_first(timeout)
            if await self.wait(
                self._changed_since(seen),
                timeout=owed_first or timeout,
                # A bound, not an event: most of these timers are cancelled by the next DPF change.
                timeout_summary=f"{self.phase}: up to {duration(owed_first or timeout)} for a DPF change",
            ):
                continue
            if owed_first:
                self._say_owed(describe(self.dpf))
                continue
            if escalate:
                self.state.escalated()
                reason = self.state.deadline_words(self.dpf, describe(self.dpf))
            else:
                reason = f"nothing changed for {timeout:g} s while waiting for {describe(self.dpf)}"
            decision, _ = await self._intervene(reason)
            if decision == "mark_rebooted":
                await self._mark_node_rebooted()

    async def _keep_dpus_moving(self) -> None:
        """Between waits: handle DPUs in Error by reason, release a new hold, record resets."""
        self._show_unplanned()
        for dpu in self.state.failed(self.dpf):
            call = self.state.error_call(dpu)
            if call.kind == "park":
                await self._intervene(call.words)
                continue
            if call.kind == "fail":
                raise DPUFailed(call.words)
            self.state.spend_reprovision(call.dpu_id, call.words)
            self.show(call.words)
            await self._reprovision_one(call.dpu_id)
        if self.state.hold_released:
            await self._release_if_held()
        failure = self._watch.failure()
        if failure is not None:
            raise WatcherFailed(f"the DPF watch of {self.host.host_id} failed: {failure}")
