"""Waiting on DPF with time limits, the host reboot with re-issues, and the operator's answers.

A mixin of `HostOperationWorkflow` (the message handlers are declared there; their logic is
here). The rules, all from `OperationPolicy`:

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
- A Kubernetes call (`call_kube`) that has not succeeded within `kube_call_timeout_seconds`
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
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    RetryState,
)
from temporalio.exceptions import TimeoutError as TemporalTimeout  # `_wait` catches the builtin one
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from contracts.models.dpf import HostDPFState, HostRef
    from contracts.models.host import (
        HOST_REBOOTED_SIGNAL,
        MANUAL_INTERVENTION_REQUIRED,
        HostOperationInput,
        HostRebootInput,
        HostRebootResult,
        OperationAnswer,
        OperatorRequest,
        RebootMethod,
    )
    from contracts.wording import plural
    from workflows import common
    from workflows.host_reboot import start_next_reboot
    from workflows.reboot_failure import BMC_REBOOT_FAILED

REBOOTING_HOST = "rebooting-host"
WAITING_FOR_DPF_AFTER_REBOOT = "waiting-for-dpf-after-reboot"
ABORTED_TYPE = "OperationAborted"
# A DPF change that lands while `keep_dpus_moving` runs an activity wakes the wait (see wait_for_dpf).
CHANGES_DURING_MOVES_PATCH = "dpf-wait-counts-changes-before-moves"
# `call_kube` waits for a call it cancels (abort or cancel); runs recorded before went on at once.
KUBE_CANCEL_AWAITED_PATCH = "kube-call-cancel-awaited"
FINISHED = frozenset({"completed", "failed", "aborted", "cancelled"})
ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


class Escalation(ABC):
    """Phase bookkeeping, timed waits, reboots and operator decisions of a host operation."""

    def __init__(self, request: HostOperationInput) -> None:
        self.policy = request.policy
        self.phase = "starting"
        self.waiting_for = ""
        self.intervention_reason: str | None = None
        self.power_cycles = 0
        self.generation = request.boot_generation
        self.cycled_without_ack = False
        self._decision: tuple[str, OperatorRequest] | None = None
        self._abort: OperatorRequest | None = None
        self._reboot_child: workflow.ChildWorkflowHandle[Any, HostRebootResult] | None = None
        self._requested_by = request.requested_by
        self._reason = request.reason
        self.cleaning_up = False  # set by the workflow's cleanup: its calls are not abortable

    # -- hooks the workflow provides --------------------------------------------------------------
    @property
    @abstractmethod
    def host(self) -> HostRef:
        """The host the operation works on."""

    @property
    @abstractmethod
    def state(self) -> HostDPFState:
        """The newest DPF state of the host (from the watcher's signals)."""

    @property
    @abstractmethod
    def state_changes(self) -> int:
        """How many DPF state changes the workflow has taken (a wait's progress marker)."""

    @abstractmethod
    async def keep_dpus_moving(self) -> None:
        """Act on DPUs that need it while waiting (e.g. reprovision a DPU in Error)."""

    @abstractmethod
    async def mark_node_rebooted(self) -> None:
        """Tell DPF the host was rebooted (remove the reboot-required annotation)."""

    @abstractmethod
    def safe_to_power_cycle(self) -> bool:
        """Whether no DPU of the host is installing, so a power cycle cannot cut one short."""

    @abstractmethod
    def dpu_marks(self) -> object:
        """A snapshot of the DPUs' progress, compared to tell whether DPF moved since."""

    @abstractmethod
    def dpf_asks_for_reboot(self) -> bool:
        """Whether DPF asks for a host reboot (the node's reboot-required annotation)."""

    # -- visibility -------------------------------------------------------------------------------
    def enter(self, phase: str, details: str) -> None:
        """A new phase: Phase search attribute and current details."""
        self.phase, self.waiting_for = phase, details
        common.enter_phase(phase, details)

    def set_details(self, details: str) -> None:
        """New details within the phase."""
        self.waiting_for = details
        common.set_details(self.phase, details)

    # -- waits ------------------------------------------------------------------------------------
    async def _wait(self, condition: Callable[[], bool], timeout: float | None, until: str = "") -> bool:
        """True once `condition` holds, False on timeout; an abort request raises.

        `until` labels the timeout's timer in the UI: what happens when it fires."""
        try:
            await workflow.wait_condition(
                lambda: self._abort is not None or condition(),
                timeout=None if timeout is None else timedelta(seconds=timeout),
                timeout_summary=f"{self.phase}: {until}" if until and timeout is not None else None,
            )
        except TimeoutError:
            return False
        if self._abort is not None:
            raise ApplicationError(
                f"aborted by {self._abort.requested_by}: {self._abort.reason or 'no reason given'}",
                type=ABORTED_TYPE,
                non_retryable=True,
            )
        return True

    async def _wait_for_change(self, seen: int, timeout: float) -> bool:
        until = f"no DPF change for {timeout:g} s: ask for manual intervention"
        return await self._wait(lambda: self.state_changes != seen, timeout, until)

    async def wait_for_dpf(
        self, phase: str, goal: Callable[[HostDPFState], bool], describe: Callable[[HostDPFState], str]
    ) -> None:
        """Wait until `goal` holds of DPF's state; no change for the phase timeout -> intervention."""
        self.enter(phase, describe(self.state))
        while True:
            # Counted before `keep_dpus_moving`: a change that lands while it runs an activity
            # (e.g. a DPU going to Error during the hold's release) must wake the wait below, or
            # that DPU sits in Error unseen until the phase timeout (issue 13's stuck host).
            seen = self.state_changes
            await self.keep_dpus_moving()
            if goal(self.state):
                return
            if self.phase != phase:
                self.enter(phase, describe(self.state))
            else:
                self.set_details(describe(self.state))
            if not workflow.patched(CHANGES_DURING_MOVES_PATCH):
                seen = self.state_changes  # recorded before the fix: counted after the moves
            if await self._wait_for_change(seen, self.policy.phase_timeout_seconds):
                continue
            decision = await self.intervene(
                f"nothing changed for {self.policy.phase_timeout_seconds:g} s while waiting for "
                f"{describe(self.state)}"
            )
            if decision == "mark_rebooted":
                await self.mark_node_rebooted()

    # -- Kubernetes calls -------------------------------------------------------------------------
    async def call_kube(
        self,
        call: Callable[[ArgT], Awaitable[ResultT]],
        arg: ArgT,
        preset: workflow.ActivityConfig,
        summary: str,
    ) -> ResultT:
        """One Kubernetes call, bounded by the policy's `kube_call_timeout_seconds`.

        Past the bound: manual intervention (a visible stall an operator decides), then the call
        again. An abort (or a cancel) while it runs or retries cancels it and waits until it has
        ended: the server retries nothing after a cancel, so that is at most the attempt in
        flight, and the cleanup then reads a world no edit of this call changes any more; the run
        ends with no call pending. (Runs recorded before patch `kube-call-cancel-awaited` did not
        wait, nor cancel on a cancel.) In cleanup the call is neither abortable nor escalated:
        its failure is logged by the cleanup and the run's own failure is the news.
        """
        seconds = self.policy.kube_call_timeout_seconds
        if self.cleaning_up:
            options = common.options(common.bounded(preset, seconds), summary)
            return await workflow.execute_activity(call, arg, **options)
        awaited = workflow.patched(KUBE_CANCEL_AWAITED_PATCH)
        options = common.options(
            common.bounded(preset, seconds),
            summary,
            cancellation_type=(
                workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED if awaited else None
            ),
        )
        while True:
            handle = workflow.start_activity(call, arg, **options)
            try:
                await self._wait(handle.done, None)
            except ApplicationError:  # aborted: stop the retrying call now
                handle.cancel()
                if not awaited:
                    handle.add_done_callback(_retrieve)
                    raise
                await common.cancelled_call_ended(handle)
                raise
            except asyncio.CancelledError:  # the run is cancelled: so is the call
                if not awaited:
                    raise
                handle.cancel()
                await common.cancelled_call_ended(handle)
                raise
            try:
                return await handle
            except ActivityError as err:
                # Past the bound the server either times the attempt out or stops retrying it
                # (retry state TIMEOUT, the last attempt's error as the cause).
                if not (isinstance(err.cause, TemporalTimeout) or err.retry_state == RetryState.TIMEOUT):
                    raise
                last = (err.cause.cause if isinstance(err.cause, TemporalTimeout) else None) or err.cause
                await self.intervene(
                    f"the Kubernetes call `{summary}` did not succeed within {seconds:g} s "
                    f"(last error: {last})"
                )

    # -- the reboot -------------------------------------------------------------------------------
    async def reboot_and_confirm(self, marks_at_barrier: object) -> None:
        """One reboot for the round DPF asked for, re-issued while DPF does not move on."""
        retries = 0
        await self._reboot_host(force_off=self.policy.force_off_from_retry == 0)
        await self._acknowledge()
        while True:
            self.enter(
                WAITING_FOR_DPF_AFTER_REBOOT,
                f"DPF to move the DPUs on after the reboot to generation {self.generation}",
            )
            if await self._wait(
                # The state after our removal has no annotation: one that appears is a new request.
                lambda: self.dpu_marks() != marks_at_barrier or self.dpf_asks_for_reboot(),
                self.policy.reboot_wait_seconds,
                f"DPF silent {self.policy.reboot_wait_seconds:g} s after the reboot: power-cycle again",
            ):
                return
            if retries < self.policy.max_power_cycle_retries:
                if not self.safe_to_power_cycle():
                    return  # a DPU started installing meanwhile: back to the barrier
                retries += 1
                await self._reboot_host(force_off=retries >= self.policy.force_off_from_retry)
                await self._acknowledge()
                continue
            decision = await self.intervene(
                f"DPF did not move on within {self.policy.reboot_wait_seconds:g} s of each of "
                f"{plural(retries + 1, 'power cycle')} (last: generation {self.generation})"
            )
            if decision == "retry":
                retries = 0
            elif decision == "mark_rebooted":
                await self._acknowledge()

    async def _acknowledge(self) -> None:
        await self.mark_node_rebooted()
        self.cycled_without_ack = False

    async def _reboot_host(self, *, force_off: bool) -> None:
        while True:
            self.power_cycles += 1
            handle = await self._start_reboot(force_off)
            self._reboot_child = handle
            how = "ForceOff then On" if force_off else "power cycle"
            method = self.policy.reboot_method.value
            self.enter(
                REBOOTING_HOST, f"{how} of {self.host.host_id} to generation {self.generation} ({method})"
            )
            await self._wait(handle.done, None)
            try:
                result = await handle
            except ChildWorkflowError as err:
                cause = err.cause
                if not (isinstance(cause, ApplicationError) and cause.type == BMC_REBOOT_FAILED):
                    raise ApplicationError(
                        f"the reboot of {self.host.host_id} to generation {self.generation} failed: {cause}",
                        type="RebootFailed",
                        non_retryable=True,
                    ) from err
                bmc_failure = cause.message
            else:
                self.cycled_without_ack = True
                workflow.logger.info("host %s rebooted by %s", result.host_id, result.method)
                return
            finally:
                self._reboot_child = None
            # The BMC could not reboot it: a person decides, told why (no reboot happened by us).
            decision = await self.intervene(
                f"{bmc_failure}; `retry` once the BMC is fixed, `mark_rebooted` once {self.host.host_id} "
                "was rebooted by hand"
            )
            if decision == "mark_rebooted":
                self.cycled_without_ack = True
                return

    async def _start_reboot(self, force_off: bool) -> workflow.ChildWorkflowHandle[Any, HostRebootResult]:
        handle, self.generation = await start_next_reboot(
            HostRebootInput(
                host_id=self.host.host_id,
                boot_generation=self.generation + 1,
                requested_by=self._requested_by,
                reason=self._reason or f"DPF asked for a reboot ({workflow.info().workflow_id})",
                force_off=force_off,
                policy=self.policy,
                escalate_bmc_failure=True,
            ),
            summary=f"reboot {self.host.host_id} to generation {{generation}}",
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        )
        return handle

    async def cancel_reboot_in_flight(self) -> None:
        """Cleanup: cancel the reboot child (a BMC cycle in flight finishes first)."""
        handle = self._reboot_child
        if handle is None or handle.done():
            return
        handle.cancel()
        try:
            await handle
            self.cycled_without_ack = True
        except BaseException as err:  # noqa: BLE001 - the cancellation itself is expected here
            workflow.logger.info("reboot child ended on cleanup: %s", err)
        self._reboot_child = None

    # -- operators --------------------------------------------------------------------------------
    async def intervene(self, reason: str) -> str:
        """Manual intervention: wait for `retry` or `mark_rebooted` (or `abort`, which raises)."""
        self.intervention_reason = reason
        self._decision = None
        self.enter(
            MANUAL_INTERVENTION_REQUIRED,
            f"{reason}. Answer with the update `retry`, `mark_rebooted` or `abort` "
            f"(`metalflow` CLI, Temporal CLI or UI)",
        )
        await self._wait(lambda: self._decision is not None, None)
        assert self._decision is not None
        kind, who = self._decision
        workflow.logger.info("operator %s answered %s", who.requested_by, kind)
        self.intervention_reason = None
        self._decision = None
        return kind

    def validate_decision(self, kind: str) -> None:
        """Validator of `retry`: only while waiting for an operator."""
        if self.intervention_reason is None or self._decision is not None:
            raise ValueError(
                f"`{kind}` is only accepted in {MANUAL_INTERVENTION_REQUIRED} (now: {self.phase})"
            )

    def decide(self, kind: str, request: OperatorRequest) -> OperationAnswer:
        """Record an operator's decision."""
        self._decision = (kind, request)
        return OperationAnswer(accepted=True, message=f"{kind} accepted from {request.requested_by}")

    def validate_mark_rebooted(self) -> None:
        """Validator of `mark_rebooted`: a reboot in flight, or an operator awaited."""
        if self._reboot_child is None:
            self.validate_decision("mark_rebooted")

    async def on_mark_rebooted(self, request: OperatorRequest) -> OperationAnswer:
        """`mark_rebooted`: to the reboot in flight, else a decision."""
        child = self._reboot_child
        if child is not None:
            passed = await self._pass_to_reboot(child, request)
            if passed is None:
                return OperationAnswer(accepted=True, message=f"reboot confirmation passed to {child.id}")
            return OperationAnswer(accepted=False, message=passed)
        return self.decide("mark_rebooted", request)

    def validate_host_rebooted(self) -> None:
        """Validator of the update `host_rebooted`: a manual reboot in flight, or an operator awaited."""
        if self._reboot_child is not None and self.policy.reboot_method == RebootMethod.MANUAL:
            return
        if self.intervention_reason is not None and self._decision is None:
            return
        raise ValueError(
            f"{workflow.info().workflow_id} is not waiting for a reboot: "
            f"it is {self.phase}: {self.waiting_for}"
        )

    async def on_host_rebooted_update(self, request: OperatorRequest) -> OperationAnswer:
        """The update `host_rebooted`: to the manual reboot in flight, else `mark_rebooted`."""
        child = self._reboot_child
        if child is not None:
            passed = await self._pass_to_reboot(child, request)
            if passed is None:
                return OperationAnswer(accepted=True, message=f"reboot confirmation passed to {child.id}")
            return OperationAnswer(accepted=False, message=passed)
        return self.decide("mark_rebooted", request)

    async def on_host_rebooted(self, request: OperatorRequest) -> None:
        """`host_rebooted`: to the reboot in flight, else `mark_rebooted` in intervention, else ignored."""
        child = self._reboot_child
        if child is not None:
            await self._pass_to_reboot(child, request)
        elif self.intervention_reason is not None and self._decision is None:
            self._decision = ("mark_rebooted", request)
        else:
            workflow.logger.warning(
                "host_rebooted from %s ignored: no reboot is in flight (phase %s)",
                request.requested_by,
                self.phase,
            )

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

    def validate_abort(self) -> None:
        """Validator of `abort`: not once finished or already aborting."""
        if self.phase in FINISHED:
            raise ValueError(f"the operation has already {self.phase}")
        if self._abort is not None:
            raise ValueError(f"already aborting (asked by {self._abort.requested_by})")

    def request_abort(self, request: OperatorRequest) -> OperationAnswer:
        """Record an abort; acted on at the next wait."""
        self._abort = request
        return OperationAnswer(accepted=True, message=f"aborting at the next safe point ({self.phase})")


def _retrieve(call: Any) -> None:
    # A cancelled call ends with an ActivityError nobody awaits: take it, so it is not logged.
    if not call.cancelled():
        call.exception()
