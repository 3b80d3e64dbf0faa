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
  annotation), `abort` (clean up, fail with `OperationAborted`). `abort` is accepted at any time
  and acted on at the next wait.
- A Kubernetes call (`_call_kube`) that has not succeeded within `kube_call_timeout_seconds`
  (its retries included) -> manual intervention naming the call and its last error; `retry`
  (or `mark_rebooted`) calls it again. An `abort` while the call is retrying cancels it at once.
- A reboot child whose BMC cannot reboot the host (credentials rejected, unreachable after the
  activity's retries, a reset refused) fails with `BMCRebootFailed` naming why, and the
  operation enters manual intervention with that reason at once: `retry` starts a new reboot
  (the next generation; the BMC and its credentials are read afresh), `mark_rebooted` takes the
  host as rebooted by hand, `abort` ends the run.
- `host_rebooted` (signal) and `mark_rebooted` (update) go to the reboot child while one is in
  flight (a manual reboot, or a BMC that could not be reached); otherwise `host_rebooted` in
  manual intervention counts as `mark_rebooted`, and is ignored (logged) elsewhere: a stale
  confirmation must never stand in for a reboot DPF has not asked for yet. The update
  `host_rebooted` (what the CLI sends) is refused instead, naming the phase and what it waits for.

DPF v26 (docs/DOMAIN.md section 2; the barrier's extra conditions are in `workflows/parts/dpf_barrier.py`):

- The reset follows the method DPF requires (the DPUNode's aggregate): `PowerCycle` (or none
  named, or `Unknown`) gets a cold power cycle; a lesser method (`SystemLevelReset`,
  `SystemReboot`, `FirmwareReset`, `DPUWarmReboot`) a warm `ForceRestart` where the BMC offers it
  and can prove it (`policy.warm_reset`), else a cold one. A re-issued reboot is always cold.
- A DPU whose `rebootSequenceCount` passes `policy.max_reboot_sequence_count` ends the run with
  `RebootLoop` naming it, before any reboot for that round (DPF's agent stops at 5 by itself).
- DPF's deadline: the reboot must be done within `policy.dpf_reboot_deadline_seconds` (2 h) of
  DPF asking, or the DPU's cluster-join secret expires (it stays in `DPU Cluster Config`). A wait
  for the barrier still pending `policy.escalate_before_deadline_seconds` before it asks an
  operator, naming the deadline (once per request); the status query shows `reboot_deadline_at`.
- Error by reason: reasons of a DPF configuration problem (`dpf_barrier.PARK_REASONS`) park the
  run for an operator (`retry` reads again, `abort`); any other is reprovisioned within the
  per-DPU and per-host budgets (`max_dpu_error_reprovisions`, `max_host_error_reprovisions`),
  then `DPUFailed`.
- The acknowledgement removes the annotation once per token (`MarkRebootedInput`): a retry
  that lands after DPF asked again leaves that new request alone.
- Resets metalflow did not make are recorded (status `unplanned_resets`, the memo
  `unplanned_resets`: one history event each): a DPU whose agent restarted
  (`agentLastStartupTime`) beyond the restarts our own reboots explain, a DPU moved back to an
  earlier phase by a move DPF does not make itself, a host the BMC shows reset after the barrier
  was reached (the reboot then takes that reset as done: `owed_since`, never a second reboot;
  a reset before the barrier may have come before a DPU's install, so it does not count). The
  runbook re-plans from the state it reads.

What a failure or abort leaves behind: see `_clean_up`.

Cost per host and worst-case history: no activity slot while waiting (the site watch signals
each change; one short read joins it, again after each acknowledged reboot), no timers while
nothing changes (its join's read is the first state). About 40 events to reach the first
reboot, 4 per DPF change signalled, and per power cycle about 39 in the run itself (the reboot
child started and completed, the whole read before it (3), the acknowledgement, the watch's
re-read, phase changes) plus up to
50 in its reboot child (20 for a PowerCycle, 31 for ForceOff, the power-down wait and On; 19
more for a shared BMC's fleet-wide lease, `workflows/bmc_lease/workflow.py`; none for a BMC of one host).
Measured in the fleet bench (bench/README.md), a 2-DPU host with one reboot round: the run 66
events, its reboot child 19, its entity's share 17.
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
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    RetryState,
)
from temporalio.exceptions import TimeoutError as TemporalTimeout

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, metrics, names
    from contracts.errors import (
        BMCRebootFailed,
        DPUFailed,
        InvalidInput,
        RebootFailed,
        RebootLoop,
        WatcherFailed,
    )
    from contracts.models.control import RETRY_UPDATE, STATUS_QUERY, OperatorAnswer, OperatorRequest
    from contracts.models.dpf import (
        DPF_STATE_CHANGED_SIGNAL,
        ChangeResult,
        DPURef,
        GroupSpec,
        HostDPFState,
        HostRef,
        MarkRebootedInput,
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
        HostRebootInput,
        HostRebootResult,
        RebootMethod,
    )
    from contracts.models.inventory import HostInventory, HostLookup
    from contracts.wording import duration, plural
    from workflows import kernel
    from workflows.parts import dpf_barrier as barrier
    from workflows.parts.dpf_watch import DPFWatch
    from workflows.parts.host_status import build_status
    from workflows.parts.reboot_rounds import start_next_reboot

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


UNPLANNED_KEPT = 20  # unplanned resets kept in the status and memo


def _parse_time(value: str) -> datetime | None:
    """An RFC 3339 time as DPF writes it, or None."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def worst_case_events(*, power_cycles: int, dpf_changes: int, answers: int = 0, stalls: int = 0) -> int:
    """The most history events a run may cost (see the module docstring), given what it did."""
    return 40 + (39 + 50) * power_cycles + 4 * dpf_changes + 4 * answers + 6 * stalls


RESOLVING = "resolving-inventory"
REGISTERING = "registering-dpus"
DELETING = "deleting-dpus"
WAITING_FOR_HOLD = "waiting-for-hold"
WAITING_FOR_REBOOT_REQUEST = "waiting-for-reboot-request"
REBOOTING_HOST = "rebooting-host"
WAITING_FOR_DPF_AFTER_REBOOT = "waiting-for-dpf-after-reboot"
COMPLETED = "completed"
OPERATOR_ANSWERS = ("retry", "mark_rebooted")


@workflow.defn(name="HostOperationWorkflow")
class HostOperationWorkflow(kernel.Abortable):
    """Provision or reprovision all or some DPUs of one host; see the module docstring."""

    @workflow.init
    def __init__(self, request: HostOperationInput) -> None:
        super().__init__()
        self._request = request
        self.policy = request.policy
        self._dpu_ids: tuple[str, ...] = request.dpu_ids or ()
        self._host: HostRef | None = None
        self._replaced: dict[str, str] = {}  # DPU id -> uid of the object this operation deleted
        self._error_reprovisions: dict[str, int] = {}
        self._hold_released = False
        self._changes: list[str] = []  # what this run changed, in order (for cleanup and the result)
        self._reboots_requested = 0
        self._started_at = workflow.now()
        self.power_cycles = 0  # resets the BMC accepted (what its power log shows)
        self.reboots = 0  # reboots that happened: the BMC's, and those confirmed by hand
        self.reboot_attempts = 0  # reboots started, the BMC's refusals included
        self.generation = request.boot_generation  # moves once per reboot that happened
        self.cycled_without_ack = False
        self._reboot_child: workflow.ChildWorkflowHandle[Any, HostRebootResult] | None = None
        self._reboot_generation = 0  # the generation the reboot child in flight reboots to
        self.cleaning_up = False  # set by the cleanup: its calls are not abortable
        self._acks = 0  # acknowledgements made (each its own token)
        self._asked_at: datetime | None = None  # when this run first saw DPF's pending request
        self._escalated_for: datetime | None = None  # the request whose deadline was escalated
        self._host_error_reprovisions = 0
        self._unplanned: list[str] = []
        self._memo_shown = 0  # unplanned resets written to the memo
        self._seen: dict[str, tuple[str, str, str]] = {}  # dpu id -> (uid, phase, agent start)
        self._restarts_owed: dict[str, int] = {}  # dpu id -> agent restarts our reboots explain
        self._watch = DPFWatch(on_taken=self._observe)

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
        self._watch.start(self.host, self._dpu_ids, bound_seconds=self.policy.kube_call_timeout_seconds)
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
            reboots=self.reboots,
            boot_generation=self.generation,
            started_at=self._started_at,
            finished_at=workflow.now(),
        )

    # -- messages ----------------------------------------------------------------------------------
    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        """The site watch saw a change of the host's DPF objects."""
        self._watch.accept(state)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostOperationStatus:
        """Where the operation is, per DPU, and what it waits for."""
        return build_status(
            request=self._request,
            dpu_ids=self._dpu_ids,
            phase=self.phase,
            waiting_for=self.details,
            clock=self._watch.clock,
            error_reprovisions=self._error_reprovisions,
            reboots_requested=self._reboots_requested,
            power_cycles=self.power_cycles,
            reboot_attempts=self.reboot_attempts,
            rebooting_to=self._reboot_generation if self._reboot_child is not None else None,
            generation=self.generation,
            intervention=self.question,
            started_at=self._started_at,
        ).model_copy(
            update={"reboot_deadline_at": self._deadline_at(), "unplanned_resets": tuple(self._unplanned)}
        )

    @workflow.signal(name=HOST_REBOOTED_SIGNAL)
    async def host_rebooted(self, confirmation: OperatorRequest) -> None:
        """Someone rebooted the host: passed to the reboot in flight, taken as `mark_rebooted`
        while an operator is asked, and ignored (logged) otherwise: a stale confirmation must
        never stand in for a reboot DPF has not asked for yet."""
        child = self._reboot_child
        if child is not None:
            await self._pass_to_reboot(child, confirmation)
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
        if self._reboot_child is not None and self.policy.reboot_method == RebootMethod.MANUAL:
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
        if self._reboot_child is None:
            self.validate_decision("mark_rebooted", asked_in=MANUAL_INTERVENTION_REQUIRED)

    async def _confirm_reboot(self, request: OperatorRequest) -> OperatorAnswer:
        """A reboot confirmation: to the reboot in flight, else the operator's `mark_rebooted`."""
        child = self._reboot_child
        if child is None:
            return self.decide("mark_rebooted", request)
        refused = await self._pass_to_reboot(child, request)
        if refused is None:
            return OperatorAnswer(accepted=True, message=f"reboot confirmation passed to {child.id}")
        return OperatorAnswer(accepted=False, message=refused)

    async def _pass_to_reboot(
        self, child: workflow.ChildWorkflowHandle[Any, HostRebootResult], request: OperatorRequest
    ) -> str | None:
        """Signal the reboot child; None when delivered, else why not (logged, never raised).

        Why: the child may close between this handler's start and the signal's delivery (its
        completion and the confirmation can arrive in one workflow task, and handlers run
        first). A handler that raised would fail the whole operation for a late confirmation,
        which the closed reboot made moot anyway.
        """
        try:
            await child.signal(HOST_REBOOTED_SIGNAL, request)
        except Exception as err:  # noqa: BLE001 - see the docstring: a handler must not fail the run
            why = f"the reboot {child.id} had already ended: {err}"
            workflow.logger.warning("confirmation from %s not passed on: %s", request.requested_by, why)
            return why
        return None

    # -- the runbook's steps -----------------------------------------------------------------------
    async def _resolve_inventory(self) -> HostInventory:
        self.enter(RESOLVING, f"looking up {self._request.host_id}")
        inventory: HostInventory = await workflow.execute_activity(
            activity_api.resolve_host_inventory,
            HostLookup(host_id=self._request.host_id),
            **kernel.options(kernel.INVENTORY, f"resolve {self._request.host_id}"),
        )
        known = tuple(d.id for d in inventory.dpus)
        unknown = sorted(set(self._dpu_ids) - set(known))
        if unknown:
            raise InvalidInput(
                f"host {inventory.host_id} has no DPU {', '.join(unknown)} (it has {', '.join(known)})"
            )
        self._dpu_ids = self._dpu_ids or known
        if not self._dpu_ids:
            raise InvalidInput(f"host {inventory.host_id} has no DPUs")
        self._host = HostRef.of(inventory)
        return inventory

    def _show_identity(self, inventory: HostInventory) -> None:
        # None written when the entity started this run with them (the usual case).
        kernel.upsert_changed(
            [
                names.HOST_ID.value_set(inventory.host_id),
                names.OPERATION.value_set(self._request.kind.value),
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
            if not (isinstance(failure, ActivityError) and _timed_out(failure)):
                raise WatcherFailed(f"the DPF watch of {self.host.host_id} failed: {failure}")
            cause = failure.cause
            last = (cause.cause if isinstance(cause, TemporalTimeout) else None) or cause
            await self._intervene(
                f"the Kubernetes call `join the site's DPF watch for {self.host.host_id}` did not succeed "
                f"within {seconds:g} s (last error: {last})"
            )
            self._watch.rejoin(seconds)

    async def _ensure_site_objects(self, inventory: HostInventory) -> None:
        # Idempotent: existing objects are left as they are, so this is cheap on a set-up site.
        self.enter(REGISTERING, "making sure the site's DPF objects (BFB, flavor, deployments) exist")
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
            self._changes.append("created site objects")

    async def _register_dpus(self, inventory: HostInventory) -> None:
        self.enter(REGISTERING, f"registering DPUNode and {plural(len(self._dpu_ids), 'DPUDevice')}")
        result: ObjectsResult = await self._call_kube(
            activity_api.register_host_dpus,
            RegisterHostInput(inventory=inventory),
            kernel.KUBE_WRITE,
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
        result: ChangeResult = await self._call_kube(
            activity_api.reprovision_dpu,
            ReprovisionInput(dpu=self._dpu_ref(dpu_id), uid=current.uid),
            kernel.KUBE_WRITE,
            f"reprovision DPU {dpu_id} (delete uid {current.uid})",
        )  # fmt: skip
        self._replaced[dpu_id] = current.uid
        self._changes.append(f"deleted DPU {result.name} (uid {current.uid}): {result.detail}")

    async def _wait_until_held(self) -> None:
        await self._wait_for_dpf(
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
        result: ChangeResult = await self._call_kube(
            activity_api.release_node_effect_hold,
            self.host,
            kernel.KUBE_WRITE,
            f"release the Node Effect hold of {self.host.node_name()}",
        )
        if result.changed:
            self._changes.append("released the Node Effect hold")

    async def _reboot_rounds(self) -> None:
        while True:
            await self._wait_for_dpf(
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
            if not await self._confirmed_at_barrier():
                continue
            self._refuse_reboot_loop()
            self._reboots_requested += 1
            await self._reboot_and_confirm(barrier.progress_marks(self.state, self._dpu_ids))

    async def _confirmed_at_barrier(self) -> bool:
        """Read the host's DPF objects whole before a reboot and decide on that read.

        Why: a watch may carry less than the objects hold (DPF v26's `rebootStatus`, the
        agent's method and count); the reset, its method and the loop bound are decided on all
        of it. One read (3 events) per reboot round. False: not there after all (e.g. a DPU's Arm
        still shutting down); the wait goes on, woken by DPF's next change (the `Rebooted`
        condition follows `rebootStatus`, DOMAIN.md 2.5)."""
        state: HostDPFState = await self._call_kube(
            activity_api.read_host_dpf_state,
            self.host,
            kernel.KUBE_READ,
            f"read the DPF state of {self.host.host_id} before the reboot",
        )
        self._watch.adopt(state)
        return barrier.reboot_barrier_reached(state, self._dpu_ids, self._replaced)

    def _refuse_reboot_loop(self) -> None:
        """DPF asks for another host reboot of one sequence than the policy allows: stop, naming it."""
        bound = self.policy.max_reboot_sequence_count
        for dpu_id in self._dpu_ids:
            dpu = barrier.current_dpu(self.state, dpu_id, self._replaced.get(dpu_id))
            count = None if dpu is None else dpu.reboot_sequence_count
            if dpu is not None and dpu.phase == "Rebooting" and count is not None and count > bound:
                raise RebootLoop(
                    f"DPU {dpu.name} asks for host reboot {count} of one reboot sequence "
                    f"(rebootSequenceCount {count}, method {dpu.reboot_method or 'not named'}); the policy "
                    f"allows {bound} (max_reboot_sequence_count): a reboot loop, not rebooted again. "
                    "DPF's request stays on the DPUNode; reprovision the DPU once its cause is fixed"
                )

    # -- waiting on DPF ----------------------------------------------------------------------------
    async def _wait_for_dpf(
        self, phase: str, goal: Callable[[HostDPFState], bool], describe: Callable[[HostDPFState], str]
    ) -> None:
        """Wait until `goal` holds of DPF's state; no change for the phase timeout -> intervention."""
        self.enter(phase, describe(self.state))
        while True:
            # Counted before `_keep_dpus_moving`: a change that lands while it runs an activity
            # (e.g. a DPU going to Error during the hold's release) must wake the wait below, or
            # that DPU sits in Error unseen until the phase timeout.
            seen = self._watch.changes
            await self._keep_dpus_moving()
            if goal(self.state):
                return
            if self.phase != phase:
                self.enter(phase, describe(self.state))
            else:
                self.show(describe(self.state))
            timeout, escalate = self.policy.phase_timeout_seconds, False
            left = self._escalation_left()
            if left is not None and left < timeout:
                timeout, escalate = max(left, 0.001), True
            if await self.wait(
                self._changed_since(seen),
                timeout=timeout,
                # A bound, not an event: most of these timers are cancelled by the next DPF change.
                timeout_summary=f"{self.phase}: up to {duration(timeout)} for a DPF change",
            ):
                continue
            if escalate:
                self._escalated_for = self._asked_at
                reason = self._deadline_reason(describe(self.state))
            else:
                reason = f"nothing changed for {timeout:g} s while waiting for {describe(self.state)}"
            decision, _ = await self._intervene(reason)
            if decision == "mark_rebooted":
                await self._mark_node_rebooted()

    def _escalation_left(self) -> float | None:
        """Seconds until the pending reboot request is escalated (None: none pending, or done)."""
        deadline = self._deadline_at()
        if deadline is None or self._escalated_for == self._asked_at:
            return None
        escalate_at = deadline - timedelta(seconds=self.policy.escalate_before_deadline_seconds)
        return (escalate_at - workflow.now()).total_seconds()

    def _deadline_at(self) -> datetime | None:
        """DPF's deadline for the reboot it asks for now: from when it asked (its condition's
        time, or when this run first saw the request if that is earlier or unknown)."""
        if self._asked_at is None or self.state.node is None or not self.state.node.waiting_for_reboot:
            return None
        asked = self._asked_at
        stamped = _parse_time(self.state.node.reboot_requested_at)
        if stamped is not None and stamped < asked:
            asked = stamped
        return asked + timedelta(seconds=self.policy.dpf_reboot_deadline_seconds)

    def _deadline_reason(self, waiting_for: str) -> str:
        deadline = self._deadline_at()
        when = deadline.isoformat() if deadline is not None else "unknown"
        hours = self.policy.dpf_reboot_deadline_seconds / 3600
        return (
            f"DPF asked for the host reboot and it must be done by {when} ({hours:g} h after DPF asked): "
            "past that the DPU's cluster-join secret expires and it stays in DPU Cluster Config "
            f"(docs/DOMAIN.md 2.5). Still waiting for {waiting_for}"
        )

    def _changed_since(self, seen: int) -> Callable[[], bool]:
        return lambda: self._watch.changes != seen

    async def _keep_dpus_moving(self) -> None:
        """Between waits: handle DPUs in Error by reason, release a new hold, record resets."""
        self._show_unplanned()
        for dpu in barrier.failed(self.state, self._dpu_ids, self._replaced):
            dpu_id = dpu.dpu_id or dpu.name
            found = dpu.error_reason()
            if found is not None and found[1] in barrier.PARK_REASONS:
                await self._intervene(
                    f"DPU {dpu.name} is in Error ({found[0]}: {found[1]}: {dpu.failure_message()}): a DPF "
                    "configuration problem that reprovisioning cannot fix, and DPF never retries. Fix it, "
                    "then `retry` (DPF is read again) or `abort`"
                )
                continue
            done = self._error_reprovisions.get(dpu_id, 0)
            why = f"{found[0]}: {found[1]}: " if found is not None else ""
            if done >= self.policy.max_dpu_error_reprovisions:
                raise DPUFailed(
                    f"DPU {dpu.name} in Error after {done} automatic reprovisions: "
                    f"{why}{dpu.failure_message()}"
                )
            if self._host_error_reprovisions >= self.policy.max_host_error_reprovisions:
                raise DPUFailed(
                    f"DPU {dpu.name} in Error ({why}{dpu.failure_message()}); the host's budget of "
                    f"{self.policy.max_host_error_reprovisions} automatic reprovisions is spent"
                )
            self._error_reprovisions[dpu_id] = done + 1
            self._host_error_reprovisions += 1
            self.show(f"DPU {dpu.name} is in Error ({why}{dpu.failure_message()}): reprovisioning it")
            await self._reprovision_one(dpu_id)
        if self._hold_released:
            await self._release_if_held()
        failure = self._watch.failure()
        if failure is not None:
            raise WatcherFailed(f"the DPF watch of {self.host.host_id} failed: {failure}")

    # -- resets metalflow did not make ------------------------------------------------------------
    def _observe(self, state: HostDPFState) -> None:
        """Each state taken: note DPF's new request, and resets no reboot of ours explains."""
        if state.node is not None and state.node.waiting_for_reboot and self._asked_at is None:
            self._asked_at = workflow.now()
        for dpu_id in self._dpu_ids:
            dpu = state.dpu(dpu_id)
            if dpu is None or dpu.deleting:
                continue
            before = self._seen.get(dpu_id)
            found = barrier.unplanned_change(before, dpu)
            # A state without the agent's start time (a watch that does not carry it) keeps the last known.
            started = dpu.agent_started_at or (before[2] if before and before[0] == dpu.uid else "")
            self._seen[dpu_id] = (dpu.uid, dpu.phase, started)
            if found == "restarted" and self._restarts_owed.get(dpu_id, 0) > 0:
                self._restarts_owed[dpu_id] -= 1  # our reboot restarted it
            elif found == "restarted":
                self._unplanned_reset(
                    f"DPU {dpu_id} restarted (agentLastStartupTime {dpu.agent_started_at}) in {dpu.phase}"
                )
            elif found is not None:
                self._unplanned_reset(f"DPU {dpu_id} {found}")

    def _unplanned_reset(self, what: str) -> None:
        self._unplanned.append(f"{workflow.now().isoformat(timespec='seconds')}: {what} (not by metalflow)")
        del self._unplanned[:-UNPLANNED_KEPT]
        workflow.logger.warning("unplanned reset on %s: %s", self._request.host_id, what)

    def _show_unplanned(self) -> None:
        """Write new unplanned resets to the memo (one history event); the runbook re-plans anyway."""
        if len(self._unplanned) != self._memo_shown:
            self._memo_shown = len(self._unplanned)
            workflow.upsert_memo({"unplanned_resets": list(self._unplanned)})

    async def _intervene(self, reason: str) -> tuple[str, OperatorRequest]:
        """Manual intervention: wait for `retry` or `mark_rebooted` (or `abort`, which raises)."""
        return await self.await_decision(MANUAL_INTERVENTION_REQUIRED, reason, OPERATOR_ANSWERS)

    # -- Kubernetes calls --------------------------------------------------------------------------
    async def _call_kube(
        self,
        call: Callable[[ArgT], Awaitable[ResultT]],
        arg: ArgT,
        preset: workflow.ActivityConfig,
        summary: str,
    ) -> ResultT:
        """One Kubernetes call, bounded by the policy's `kube_call_timeout_seconds`.

        Past the bound: manual intervention (a visible stall an operator decides), then the call
        again. An abort (or a cancel) while it runs or retries cancels it and waits until it has
        ended (`kernel.Runbook.call`): the cleanup then reads a world no edit of this call changes
        any more. In cleanup the call is neither abortable nor escalated: its failure is logged
        by the cleanup and the run's own failure is the news.
        """
        seconds = self.policy.kube_call_timeout_seconds
        options = kernel.options(kernel.bounded(preset, seconds), summary)
        if self.cleaning_up:
            return await workflow.execute_activity(call, arg, **options)
        while True:
            try:
                return await self.call(call, arg, options)
            except ActivityError as err:
                # Past the bound the server either times the attempt out or stops retrying it
                # (retry state TIMEOUT, the last attempt's error as the cause).
                if not _timed_out(err):
                    raise
                last = (err.cause.cause if isinstance(err.cause, TemporalTimeout) else None) or err.cause
                await self._intervene(
                    f"the Kubernetes call `{summary}` did not succeed within {seconds:g} s "
                    f"(last error: {last})"
                )

    async def _mark_node_rebooted(self) -> None:
        """Remove the reboot-required annotation (only after a power cycle or an operator's word)."""
        self._acks += 1
        info = workflow.info()
        token = f"{info.workflow_id}@{info.run_id}#{self._acks}"
        result: ChangeResult = await self._call_kube(
            activity_api.mark_dpu_node_rebooted,
            MarkRebootedInput(host_id=self.host.host_id, namespace=self.host.namespace, token=token),
            kernel.KUBE_WRITE,
            f"tell DPF {self.host.node_name()} was rebooted",
        )
        if result.changed:
            self._changes.append(f"removed the reboot-required annotation (generation {self.generation})")
        self._asked_at = None  # a request seen from now on is DPF's next one
        self._restart_watch_after_removal()

    def _restart_watch_after_removal(self) -> None:
        """Read again from the state as it is after our removal of the annotation.

        Why: DPF may set the annotation again at once (a BF4's second round) and, with fast
        phases, the watch can see removal and re-set as one unchanged state and signal
        nothing; a signal sent just before the removal would also still carry the annotation.
        A new read, whose baseline is "annotation removed", sees any annotation set since.
        """
        state = self.state
        if state.node is not None:
            state = state.model_copy(update={"node": state.node.model_copy(update={"reboot_required": None})})
        self._watch.restart(state)

    # -- the reboot --------------------------------------------------------------------------------
    async def _reboot_and_confirm(self, marks_at_barrier: object) -> None:
        """One reboot for the round DPF asked for, re-issued while DPF does not move on."""
        retries = 0
        # Owed from now: every DPU is Rebooting and stamped, so a reset from here on (someone
        # else's, before ours) serves this round; one before it may have come before a DPU's install.
        await self._reboot_host(force_off=self.policy.force_off_from_retry == 0, owed_since=workflow.now())
        await self._acknowledge()
        while True:
            self.enter(
                WAITING_FOR_DPF_AFTER_REBOOT,
                f"DPF to move the DPUs on after the reboot to generation {self.generation}",
            )
            seconds = self.policy.reboot_wait_seconds
            if await self.wait(
                # The state after our removal has no annotation: one that appears is a new request.
                lambda: self._dpu_marks() != marks_at_barrier or self._dpf_asks_for_reboot(),
                timeout=seconds,
                timeout_summary=f"{self.phase}: up to {duration(seconds)} for DPF to move on after a reboot",
            ):
                return
            if retries < self.policy.max_power_cycle_retries:
                if barrier.installing(self.state):
                    return  # a DPU started installing meanwhile: back to the barrier
                retries += 1
                await self._reboot_host(force_off=retries >= self.policy.force_off_from_retry)
                await self._acknowledge()
                continue
            decision, _ = await self._intervene(
                f"DPF did not move on within {seconds:g} s of each of "
                f"{plural(retries + 1, 'power cycle')} (last: generation {self.generation})"
            )
            if decision == "retry":
                retries = 0
            elif decision == "mark_rebooted":
                await self._acknowledge()

    async def _acknowledge(self) -> None:
        await self._mark_node_rebooted()
        self.cycled_without_ack = False

    async def _reboot_host(self, *, force_off: bool, owed_since: datetime | None = None) -> None:
        reached = self.generation  # what the host has reached until a reboot happens
        refused: int | None = None  # the generation whose reboot the BMC refused: no reset happened
        first = True  # the round's first reboot: a reset since `owed_since` serves it
        while True:
            self.reboot_attempts += 1
            method = barrier.required_method(self.state, self._dpu_ids)
            warm = self.policy.warm_reset and not force_off and barrier.host_reset_for(method) == "warm"
            for dpu_id in self._dpu_ids:  # this reboot restarts each DPU's agent once
                self._restarts_owed[dpu_id] = self._restarts_owed.get(dpu_id, 0) + 1
            handle, generation = await start_next_reboot(
                HostRebootInput(
                    host_id=self.host.host_id,
                    boot_generation=refused or reached + 1,
                    requested_by=self._request.requested_by,
                    reason=self._request.reason or f"DPF asked for a reboot ({workflow.info().workflow_id})",
                    force_off=force_off,
                    warm=warm,
                    owed_since=owed_since if first and not force_off else None,
                    policy=self.policy,
                    escalate_bmc_failure=True,
                ),
                summary=f"reboot {self.host.host_id} to generation {{generation}}",
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                # The generation the BMC refused was not reached: the retry reboots to it again.
                retry_refused=refused is not None,
            )
            first = False
            self._reboot_child, self._reboot_generation = handle, generation
            how = "ForceOff then On" if force_off else "warm reset" if warm else "power cycle"
            asked = f", DPF asks for {method}" if method else ""
            self.enter(
                REBOOTING_HOST,
                f"{how} of {self.host.host_id} to generation {generation} "
                f"({self.policy.reboot_method.value}{asked})",
            )
            await self.wait(handle.done)
            try:
                result = await handle
            except ChildWorkflowError as err:
                cause = err.cause
                if not (isinstance(cause, ApplicationError) and cause.type == BMCRebootFailed.__name__):
                    raise RebootFailed(
                        f"the reboot of {self.host.host_id} to generation {generation} failed: {cause}"
                    ) from err
                bmc_failure = cause.message
            else:
                self.generation = generation
                self.reboots += 1
                if result.method.startswith("bmc") and not result.already_done:
                    self.power_cycles += 1  # a reset someone else made is not one of ours
                self.cycled_without_ack = True
                workflow.logger.info("host %s rebooted by %s", result.host_id, result.method)
                if result.already_done:
                    self._unplanned_reset(
                        f"host {result.host_id} was reset after DPF asked; taken as the reboot, none sent"
                    )
                return
            finally:
                self._reboot_child = None
            refused = generation
            # The BMC could not reboot it: a person decides, told why (no reboot happened by us).
            decision, _ = await self._intervene(
                f"{bmc_failure}; `retry` once the BMC is fixed, `mark_rebooted` once {self.host.host_id} "
                "was rebooted by hand"
            )
            if decision == "mark_rebooted":  # rebooted by hand: the generation the BMC refused
                self.generation = generation
                self.reboots += 1
                self.cycled_without_ack = True
                return

    async def _cancel_reboot_in_flight(self) -> None:
        """Cleanup: cancel the reboot child (a BMC cycle in flight finishes first)."""
        handle = self._reboot_child
        if handle is None:
            return
        if not handle.done():
            handle.cancel()
        try:  # one that ended as the abort came is counted too: its reboot happened
            result = await handle
            self.cycled_without_ack = True  # it rebooted the host before it stopped
            self.generation = self._reboot_generation
            self.reboots += 1
            self.power_cycles += result.method.startswith("bmc")
        except BaseException as err:  # noqa: BLE001 - the cancellation itself is expected here
            workflow.logger.info("reboot child ended on cleanup: %s", err)
        self._reboot_child = None

    # -- state --------------------------------------------------------------------------------------
    @property
    def host(self) -> HostRef:
        assert self._host is not None
        return self._host

    @property
    def state(self) -> HostDPFState:
        return self._watch.state or HostDPFState(host_id=self._request.host_id)

    def _dpf_asks_for_reboot(self) -> bool:
        return self.state.node is not None and self.state.node.waiting_for_reboot

    def _dpu_marks(self) -> object:
        return barrier.progress_marks(self.state, self._dpu_ids)

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
        await self._cancel_reboot_in_flight()
        if self.cycled_without_ack:
            try:
                await self._mark_node_rebooted()
            except Exception as ack_err:  # noqa: BLE001 - best effort: the failure below is the news
                workflow.logger.warning("could not acknowledge the reboot during cleanup: %s", ack_err)
        self._enter_end(err, changed="; ".join(self._changes) or "nothing")
        # A confirmation being passed to the reboot child is answered before the run ends.
        await workflow.wait_condition(workflow.all_handlers_finished)

    def _enter_end(self, err: BaseException, *, changed: str) -> None:
        """The final phase and details of a run that ends early: what ended it, what it changed."""
        phase, why = kernel.ending(err)
        self.enter(phase, f"{why}; generation reached {self.generation}. Changed by this run: {changed}")


def _timed_out(err: ActivityError) -> bool:
    """A bounded call past its bound: timed out, or no longer retried (retry state TIMEOUT)."""
    return isinstance(err.cause, TemporalTimeout) or err.retry_state == RetryState.TIMEOUT
