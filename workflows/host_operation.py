"""HostOperationWorkflow: provision or reprovision a host's DPUs (DOMAIN.md flows 2-4).

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

Escalation and operator answers: see `workflows.escalation`. What a failure or abort leaves
behind: see `_clean_up`.

Cost per host and worst-case history: one watcher activity slot for the run (restarted after
each acknowledged reboot), no timers while nothing changes. About 40 events to reach the first
reboot, 4 per DPF change signalled, and per power cycle about 36 in the run itself (the reboot
child started and completed, the acknowledgement, the watcher restart, phase changes) plus up to
50 in its reboot child (20 for a PowerCycle, 31 for ForceOff, the power-down wait and On; 19
more for the BMC's fleet-wide lease, `workflows/bmc_lease.py`).
Bounded by the policy: rounds DPF asks for (1, or 2 for BF4) x (1 + `max_power_cycle_retries`)
power cycles, plus 4 per operator answer and 6 per bounded Kubernetes call that stalls. With
the defaults, a BF4 host whose every reboot is re-issued: about 40 + 8 x 86 + 4 x (DPF changes,
~40) = 890 events across the run and its children (measured: 466 for 5 cycles, 9 changes and 2
answers). `worst_case_events` is that bound as a function of what a run did;
tests/test_host_operation_escalation.py holds a run that re-issues every reboot and takes
operator answers to it.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, metrics, names
    from contracts.models.dpf import (
        DPF_STATE_CHANGED_SIGNAL,
        ChangeResult,
        DPURef,
        GroupSpec,
        HostDPFState,
        HostRef,
        ObjectsResult,
        RegisterHostInput,
        ReprovisionInput,
        SiteSetupInput,
    )
    from contracts.models.host import (
        ABORT_UPDATE,
        HOST_REBOOTED_SIGNAL,
        HOST_REBOOTED_UPDATE,
        MARK_REBOOTED_UPDATE,
        RETRY_UPDATE,
        STATUS_QUERY,
        HostOperationInput,
        HostOperationKind,
        HostOperationResult,
        HostOperationStatus,
        OperationAnswer,
        OperatorRequest,
    )
    from contracts.models.inventory import HostInventory, HostLookup
    from contracts.wording import plural
    from workflows import common
    from workflows import dpf_barrier as barrier
    from workflows.dpf_watch import TRY_CANCEL, DPFWatch
    from workflows.escalation import Escalation
    from workflows.host_status import build_status


def worst_case_events(*, power_cycles: int, dpf_changes: int, answers: int = 0, stalls: int = 0) -> int:
    """The most history events a run may cost (see the module docstring), given what it did."""
    return 40 + (36 + 50) * power_cycles + 4 * dpf_changes + 4 * answers + 6 * stalls


# A per-host watcher is stopped with WAIT_CANCELLATION_COMPLETED from this patch on (older runs:
# TRY_CANCEL, and the ended run showed the watcher pending).
WATCHER_AWAITED_PATCH = "operation-watcher-awaited"

RESOLVING = "resolving-inventory"
REGISTERING = "registering-dpus"
DELETING = "deleting-dpus"
WAITING_FOR_HOLD = "waiting-for-hold"
WAITING_FOR_REBOOT_REQUEST = "waiting-for-reboot-request"
WAITING_FOR_DPF_AFTER_REBOOT = "waiting-for-dpf-after-reboot"
COMPLETED = "completed"
FAILED = "failed"
ABORTED = "aborted"
CANCELLED = "cancelled"


@workflow.defn(name="HostOperationWorkflow")
class HostOperationWorkflow(Escalation):
    """Provision or reprovision all or some DPUs of one host; see the module docstring."""

    @workflow.init
    def __init__(self, request: HostOperationInput) -> None:
        super().__init__(request)
        self._request = request
        self._dpu_ids: tuple[str, ...] = request.dpu_ids or ()
        self._host: HostRef | None = None
        self._watch = DPFWatch(
            cancellation=TRY_CANCEL,
            summary="watch the DPF objects of {host}",
            wait_from_patch=WATCHER_AWAITED_PATCH,  # the ended run leaves no watcher pending
        )
        self._replaced: dict[str, str] = {}  # DPU id -> uid of the object this operation deleted
        self._error_reprovisions: dict[str, int] = {}
        self._hold_released = False
        self._changes: list[str] = []  # what this run changed, in order (for cleanup and the result)
        self._reboots_requested = 0
        self._started_at = workflow.now()

    @workflow.run
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        """Run the operation to completion; see the module docstring."""
        metrics.workflow_operation_started(request.kind.value)
        try:
            inventory = await self._resolve_inventory()
        except (FailureError, asyncio.CancelledError) as err:
            metrics.workflow_operation_finished(request.kind.value, metrics.outcome_of(err))
            self._enter_end(err, changed="nothing")  # nothing was changed yet
            raise
        self._show_identity(inventory)
        self._watch.start(self.host, self._dpu_ids)
        try:
            await self._read_first_state()
            if request.kind == HostOperationKind.PROVISION:
                await self._ensure_site_objects(inventory)
                await self._register_dpus(inventory)
            else:
                await self._delete_dpus_for_reprovision()
            await self._wait_until_held()
            await self._release_hold()
            await self._reboot_rounds()
        except (FailureError, asyncio.CancelledError) as err:
            # Every way a run ends early: an activity or reboot child that failed for good, our
            # own non-retryable error (abort included), a cancel while anything was awaited.
            metrics.workflow_operation_finished(request.kind.value, metrics.outcome_of(err))
            await self._clean_up(err)
            if isinstance(err, ApplicationError):  # ours: the entity learns the generation reached
                raise ApplicationError(
                    err.message,
                    *err.details,
                    {"boot_generation": self.generation},
                    type=err.type,
                    non_retryable=True,
                ) from err
            raise
        finally:
            await self._watch.stop()
        self.enter(COMPLETED, f"every DPU Ready after {plural(self.power_cycles, 'power cycle')}")
        await workflow.wait_condition(workflow.all_handlers_finished)
        metrics.workflow_operation_finished(request.kind.value, "succeeded")
        return HostOperationResult(
            host_id=request.host_id,
            operation=request.kind.value,
            dpu_ids=self._dpu_ids,
            reboots=self.power_cycles,
            boot_generation=self.generation,
            started_at=self._started_at,
            finished_at=workflow.now(),
        )

    # -- messages ----------------------------------------------------------------------------------
    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        """The watcher saw a change (a replaced watcher's signals are dropped)."""
        self._watch.accept(state)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostOperationStatus:
        """Where the operation is, per DPU, and what it waits for."""
        return build_status(
            request=self._request,
            dpu_ids=self._dpu_ids,
            phase=self.phase,
            waiting_for=self.waiting_for,
            clock=self._watch.clock,
            error_reprovisions=self._error_reprovisions,
            reboots_requested=self._reboots_requested,
            power_cycles=self.power_cycles,
            generation=self.generation,
            intervention=self.intervention_reason,
            started_at=self._started_at,
        )

    @workflow.signal(name=HOST_REBOOTED_SIGNAL)
    async def host_rebooted(self, confirmation: OperatorRequest) -> None:
        """Someone rebooted the host: passed to the reboot in flight, or taken as `mark_rebooted`."""
        await self.on_host_rebooted(confirmation)

    @workflow.update(name=HOST_REBOOTED_UPDATE)
    async def host_rebooted_update(self, confirmation: OperatorRequest) -> OperationAnswer:
        """The host was rebooted by hand: refused, naming what the run waits for, unless awaited."""
        return await self.on_host_rebooted_update(confirmation)

    @host_rebooted_update.validator
    def _validate_host_rebooted(self, confirmation: OperatorRequest) -> None:
        self.validate_host_rebooted()

    @workflow.update(name=RETRY_UPDATE)
    def retry(self, request: OperatorRequest) -> OperationAnswer:
        """Start the stuck wait over (only in manual-intervention-required)."""
        return self.decide("retry", request)

    @retry.validator
    def _validate_retry(self, request: OperatorRequest) -> None:
        self.validate_decision("retry")

    @workflow.update(name=MARK_REBOOTED_UPDATE)
    async def mark_rebooted(self, request: OperatorRequest) -> OperationAnswer:
        """The host was rebooted: confirms a manual reboot in flight, or ends a stuck reboot wait."""
        return await self.on_mark_rebooted(request)

    @mark_rebooted.validator
    def _validate_mark_rebooted(self, request: OperatorRequest) -> None:
        self.validate_mark_rebooted()

    @workflow.update(name=ABORT_UPDATE)
    def abort(self, request: OperatorRequest) -> OperationAnswer:
        """Stop at the next safe point, clean up, and fail with `OperationAborted`."""
        return self.request_abort(request)

    @abort.validator
    def _validate_abort(self, request: OperatorRequest) -> None:
        self.validate_abort()

    # -- the runbook's steps -----------------------------------------------------------------------
    async def _resolve_inventory(self) -> HostInventory:
        self.enter(RESOLVING, f"looking up {self._request.host_id}")
        inventory: HostInventory = await workflow.execute_activity(
            activity_api.resolve_host_inventory,
            HostLookup(host_id=self._request.host_id),
            **common.options(common.INVENTORY, f"resolve {self._request.host_id}"),
        )
        known = tuple(d.id for d in inventory.dpus)
        unknown = sorted(set(self._dpu_ids) - set(known))
        if unknown:
            raise ApplicationError(
                f"host {inventory.host_id} has no DPU {', '.join(unknown)} (it has {', '.join(known)})",
                type="InvalidInput",
                non_retryable=True,
            )
        self._dpu_ids = self._dpu_ids or known
        if not self._dpu_ids:
            raise ApplicationError(
                f"host {inventory.host_id} has no DPUs", type="InvalidInput", non_retryable=True
            )
        self._host = HostRef.of(inventory)
        return inventory

    def _show_identity(self, inventory: HostInventory) -> None:
        workflow.upsert_search_attributes(
            [
                names.HOST_ID.value_set(inventory.host_id),
                names.OPERATION.value_set(self._request.kind.value),
                names.SITE.value_set(inventory.site or "default"),
            ]
        )

    async def _read_first_state(self) -> None:
        state: HostDPFState = await self.call_kube(
            activity_api.read_host_dpf_state,
            self.host,
            common.KUBE_READ,
            f"read the DPF state of {self.host.host_id}",
        )
        if self._watch.state is None:  # the watcher's first signal may have come first: it is as new
            self._watch.adopt(state)

    async def _ensure_site_objects(self, inventory: HostInventory) -> None:
        # Idempotent: existing objects are left as they are, so this is cheap on a set-up site.
        self.enter(REGISTERING, "making sure the site's DPF objects (BFB, flavor, deployments) exist")
        if not inventory.groups:
            return
        setup = SiteSetupInput(groups=tuple(GroupSpec(name=g) for g in inventory.groups))
        result: ObjectsResult = await self.call_kube(
            activity_api.create_site_objects,
            setup,
            common.KUBE_WRITE,
            "ensure the site's BFB, flavor and DPU deployments",
        )
        if result.changed():
            self._changes.append("created site objects")

    async def _register_dpus(self, inventory: HostInventory) -> None:
        self.enter(REGISTERING, f"registering DPUNode and {plural(len(self._dpu_ids), 'DPUDevice')}")
        result: ObjectsResult = await self.call_kube(
            activity_api.register_host_dpus,
            RegisterHostInput(inventory=inventory),
            common.KUBE_WRITE,
            f"register the DPUs of {inventory.host_id}",
        )
        if result.changed():
            self._changes.append("registered the DPUNode and DPUDevices")

    async def _delete_dpus_for_reprovision(self) -> None:
        self.enter(DELETING, f"deleting {', '.join(self._dpu_ids)} so DPF recreates them")
        for dpu_id in self._dpu_ids:
            await self._reprovision_one(dpu_id)

    async def _reprovision_one(self, dpu_id: str) -> None:
        current = barrier.current_dpu(self.state, dpu_id, self._replaced.get(dpu_id))
        if current is None:
            return  # already gone (a previous run deleted it): DPF is recreating it
        result: ChangeResult = await self.call_kube(
            activity_api.reprovision_dpu,
            ReprovisionInput(dpu=self._dpu_ref(dpu_id), uid=current.uid),
            common.KUBE_WRITE,
            f"reprovision DPU {dpu_id} (delete uid {current.uid})",
        )  # fmt: skip
        self._replaced[dpu_id] = current.uid
        self._changes.append(f"deleted DPU {result.name} (uid {current.uid}): {result.detail}")

    async def _wait_until_held(self) -> None:
        await self.wait_for_dpf(
            WAITING_FOR_HOLD,
            lambda s: barrier.held_or_beyond(s, self._dpu_ids, self._replaced),
            lambda s: (
                f"every DPU held in Node Effect ({self._count(s, 'Node Effect')} of {len(self._dpu_ids)})"
            ),
        )

    async def _release_hold(self) -> None:
        self._hold_released = True
        await self._release_if_held()

    async def _release_if_held(self) -> None:
        if not barrier.any_held(self.state, self._dpu_ids, self._replaced):
            return
        result: ChangeResult = await self.call_kube(
            activity_api.release_node_effect_hold,
            self.host,
            common.KUBE_WRITE,
            f"release the Node Effect hold of {self.host.node_name()}",
        )
        if result.changed:
            self._changes.append("released the Node Effect hold")

    async def _reboot_rounds(self) -> None:
        while True:
            await self.wait_for_dpf(
                WAITING_FOR_REBOOT_REQUEST,
                lambda s: (
                    barrier.all_ready(s, self._dpu_ids, self._replaced)
                    or barrier.reboot_barrier_reached(s, self._dpu_ids, self._replaced)
                ),
                lambda s: (
                    f"every DPU to reach Rebooting ({self._count(s, 'Rebooting')} of {len(self._dpu_ids)}) "
                    f"or Ready ({self._count(s, 'Ready')} of {len(self._dpu_ids)})"
                    + self._not_there_yet(s, ("Rebooting", "Ready"))
                ),
            )
            if barrier.all_ready(self.state, self._dpu_ids, self._replaced):
                return
            self._reboots_requested += 1
            await self.reboot_and_confirm(barrier.progress_marks(self.state, self._dpu_ids))

    # -- hooks the escalation mixin calls ----------------------------------------------------------
    async def keep_dpus_moving(self) -> None:
        """Between waits: reprovision DPUs in Error (up to the limit), release a new hold."""
        for dpu in barrier.failed(self.state, self._dpu_ids, self._replaced):
            dpu_id = dpu.dpu_id or dpu.name
            done = self._error_reprovisions.get(dpu_id, 0)
            if done >= self._request.policy.max_dpu_error_reprovisions:
                raise ApplicationError(
                    f"DPU {dpu.name} in Error after {done} automatic reprovisions: {dpu.failure_message()}",
                    type="DPUFailed",
                    non_retryable=True,
                )
            self._error_reprovisions[dpu_id] = done + 1
            self.set_details(f"DPU {dpu.name} is in Error ({dpu.failure_message()}): reprovisioning it")
            await self._reprovision_one(dpu_id)
        if self._hold_released:
            await self._release_if_held()
        failure = self._watch.failure()
        if failure is not None:
            raise ApplicationError(
                f"the DPF watcher of {self.host.host_id} failed: {failure}",
                type="WatcherFailed",
                non_retryable=True,
            )

    async def mark_node_rebooted(self) -> None:
        """Remove the reboot-required annotation (only after a power cycle or an operator's word)."""
        result: ChangeResult = await self.call_kube(
            activity_api.mark_dpu_node_rebooted,
            self.host,
            common.KUBE_WRITE,
            f"tell DPF {self.host.node_name()} was rebooted",
        )
        if result.changed:
            self._changes.append(f"removed the reboot-required annotation (generation {self.generation})")
        self._restart_watcher_after_removal()

    def _restart_watcher_after_removal(self) -> None:
        """Watch again from the state as it is after our removal of the annotation.

        Why: DPF may set the annotation again at once (a BF4's second round) and, with fast
        phases, the old watcher can see removal and re-set as one unchanged state and signal
        nothing; a signal it sent just before the removal would also still carry the
        annotation. A new watcher numbered above the old one, whose baseline is "annotation
        removed", signals any annotation it lists, and the old watcher's signals are dropped.
        """
        state = self.state
        if state.node is not None:
            state = state.model_copy(update={"node": state.node.model_copy(update={"reboot_required": None})})
        self._watch.restart(state)

    def dpf_asks_for_reboot(self) -> bool:
        return self.state.node is not None and self.state.node.waiting_for_reboot

    def safe_to_power_cycle(self) -> bool:
        return not barrier.installing(self.state)

    def dpu_marks(self) -> object:
        return barrier.progress_marks(self.state, self._dpu_ids)

    @property
    def state_changes(self) -> int:
        return self._watch.changes

    # -- state --------------------------------------------------------------------------------------
    @property
    def host(self) -> HostRef:
        assert self._host is not None
        return self._host

    @property
    def state(self) -> HostDPFState:
        return self._watch.state or HostDPFState(host_id=self._request.host_id)

    def _dpu_ref(self, dpu_id: str) -> DPURef:
        return DPURef(host_id=self.host.host_id, dpu_id=dpu_id, namespace=self.host.namespace)

    def _count(self, state: HostDPFState, phase: str) -> int:
        return barrier.count(state, self._dpu_ids, self._replaced, (phase,))

    def _not_there_yet(self, state: HostDPFState, phases: tuple[str, ...]) -> str:
        laggards = barrier.elsewhere(state, self._dpu_ids, self._replaced, phases)
        return f"; not there yet: {', '.join(laggards)}" if laggards else ""

    async def _clean_up(self, err: BaseException) -> None:
        """Leave the site consistent; undo only what this run changed and is safe to undo.

        - A reboot child in flight is cancelled: a BMC cycle finishes first (never left Off), a
          manual wait just ends.
        - The released hold is NOT re-asserted: DPUs past `Node Effect` are installing, and a hold
          cannot stop an install; DPF finishes it and the host is left with Ready DPUs.
        - Deleted DPUs are left to DPF, which recreates them (deleting is what reprovisioning is).
        - Registered DPUNode/DPUDevices stay: removing them is `HostRemovalWorkflow`'s job.
        - A power cycle done but not yet acknowledged (annotation still there) is acknowledged:
          the reboot DPF asked for happened, and DPF would otherwise wait for it forever.
        """
        self.cleaning_up = True
        await self.cancel_reboot_in_flight()
        if self.cycled_without_ack:
            try:
                await self.mark_node_rebooted()
            except Exception as ack_err:  # noqa: BLE001 - best effort: the failure below is the news
                workflow.logger.warning("could not acknowledge the reboot during cleanup: %s", ack_err)
        self._enter_end(err, changed="; ".join(self._changes) or "nothing")
        # A confirmation being passed to the reboot child is answered before the run ends.
        await workflow.wait_condition(workflow.all_handlers_finished)

    def _enter_end(self, err: BaseException, *, changed: str) -> None:
        """The final phase and details of a run that ends early: what ended it, what it changed."""
        phase, why = common.ending(err)
        self.enter(phase, f"{why}; generation reached {self.generation}. Changed by this run: {changed}")
