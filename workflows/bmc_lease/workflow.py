"""BMCLeaseWorkflow: at most N operations on one BMC at a time, across every worker of the fleet.

`METALFLOW_BMC_MAX_IN_FLIGHT` caps requests per BMC inside one worker process (the Redfish
client's semaphore); two workers would double it. The fleet-wide limit is a counting semaphore
kept in Temporal, one small workflow per BMC endpoint, `bmc-lease/<hash>`
(`names.bmc_lease_workflow_id`: a SHA-256 of the endpoint's origin and the task queue, so hosts
behind one BMC share it, the workers that ask for it serve it, and no URL or credential lands in
an id). Its slots are held by workflow RUNS, not by workers:

1. A run that is about to touch a BMC (today: `HostRebootWorkflow`, around its power cycle or
   ForceOff/On; `HostResetWorkflow`, around the host's ForceOff ... On of a full DPU reset) runs
   the activity `request_bmc_lease`, a signal-with-start of `acquire` carrying its workflow id,
   run id, a request id (`workflow.uuid4`) and the worker's limit N. Since patch
   `reboot-lease-in-one-step` a host power action runs `lease_host_bmc` instead
   (`BMCLeaseHolder.ask_for_host` in `workflows/parts/bmc_lease_holder.py`, shared by the reboot
   and the reset): its inventory and an
   update-with-start of `acquire_now`, the same request, answered at once: granted when a slot is
   free and nobody waits before it, else queued (the update never waits for a slot).
2. The lease grants slots first come, first served: it adds the run to its holders and signals
   it `bmc_lease_granted` (unless `acquire_now` already answered "granted"). The run waits for
   that signal (`wait_condition`: no activity slot, no worker resource while queued), then runs
   its BMC activity, then signals `release`.
3. A worker that dies mid-cycle does not lose the slot: the run still holds it, its activity is
   retried on another worker after the heartbeat timeout, and the slot is released when the run
   is done. So a crash never lets a second cycle of the same BMC start beside it, and the
   power cycle's own "never twice" rules (`drivers/redfish/powercycle.py`) are untouched.
4. A run that closed without releasing (terminated, timed out, failed between grant and
   release) is reclaimed: while runs wait for a full lease, every `reclaim_check_seconds`
   (`METALFLOW_BMC_LEASE_RECLAIM_SECONDS`, default 30 s) the activity
   `find_closed_workflow_runs` describes the holders and the lease drops the closed ones; a
   grant that cannot be delivered (the run is gone) frees its slot at once; with holders and
   nobody waiting it checks every `HOLDER_AUDIT` (10 min). A run never holds a slot past its
   own end plus one check.
5. A server crash loses nothing: the lease's state is its history. A run waiting for a grant
   asks again every `REQUEST_REFRESH` (5 min; the lease ignores a request it already has), so
   even a lease workflow terminated by hand is started afresh and the run is served.

The limit is the N of the worker that sent the latest `acquire` (a changed setting takes effect
as workers roll; a lower N waits for holders to release). The lease ends as soon as no run
holds or waits (a later `acquire` starts a new run: a BMC costs nothing between bursts, and
10,000 hosts on BMCs of their own leave no idle workflows behind), and continues as new after
`GRANTS_PER_RUN` grants or when Temporal suggests it, so its history stays bounded. A duplicate
`acquire` that arrives after its run ended (an activity attempt Temporal had already given up
on) is granted to a run that no longer waits for it: that slot comes back when the run closes.

Limits of the guarantee: an activity attempt that Temporal timed out while its worker is alive
but stalled (not dead) can still reach the BMC beside the retry; the per-worker semaphore and
the cycle's own checks still hold then. The lease is taken for the endpoint the run resolved
before its cycle; a BMC re-pointed in the inventory mid-cycle is leased at its old address
until the cycle ends.

A BMC that serves one host only takes no lease at all: `lease_host_bmc` answers `exclusive`
(after the host's previous reboot has ended; `activities/bmc_lease.py`), the holder enters at
once and releases nothing. The host's own lock (its entity) keeps that BMC's reboots apart.

Cost per power cycle, measured (tests/histories/host_reboot_bmc_leased.json against
host_reboot_bmc.json): the reboot workflow's history grows from 20 to 39 events (the patch
marker and its search attribute, `request_bmc_lease` 3, the wait's timer 2, the grant signal 1,
the `release` signal 2, three more workflow tasks 9); RPCs: one signal-with-start from the
activity, one signal each way. On the lease workflow 16 events per cycle (48 for three hosts
queued at once: `acquire`, the grant, `release`, the wait's timer and their workflow tasks;
tests/test_bmc_lease.py checks at most 20), one describe per holder per check while
contended, nothing while idle (it ends). Activity slots: the cycle's own while it runs, none
while queued, one for `request_bmc_lease` for a few milliseconds. CPU: a few workflow tasks.
With `acquire_now` granting a free BMC (tests/histories/host_reboot_bmc_lease_one_step.json):
the reboot's history has no inventory activity, no `request_bmc_lease`, no timer and no grant
signal (see workflows/host_reboot/workflow.py for the count), the lease has the update's 2 events in
place of the signal's 1 and the grant signal's 2.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Final

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.bmc_lease import (
        BMC_LEASE_ACQUIRE_SIGNAL,
        BMC_LEASE_ACQUIRE_UPDATE,
        BMC_LEASE_GRANTED_SIGNAL,
        BMC_LEASE_RELEASE_SIGNAL,
        BMC_LEASE_STATUS_QUERY,
        BMCLeaseState,
        BMCLeaseStatus,
        LeaseAnswer,
        LeaseGrant,
        LeaseHolder,
        LeaseRelease,
        LeaseRequest,
        WorkflowRunRef,
        WorkflowRunRefs,
    )
    from workflows import kernel
    from workflows.parts.bmc_lease_holder import LEASE_CALL

HOLDER_AUDIT: Final = timedelta(minutes=10)
GRANTS_PER_RUN: Final = 400  # about 12 events each: far below Temporal's history limits
RELEASED_REMEMBERED: Final = 200

HOLDER_CHECK: Final[workflow.ActivityConfig] = {**LEASE_CALL, "heartbeat_timeout": timedelta(seconds=30)}


@workflow.defn(name="BMCLeaseWorkflow")
class BMCLeaseWorkflow:
    """A counting semaphore for one BMC endpoint; see the module docstring."""

    @workflow.init
    def __init__(self, state: BMCLeaseState) -> None:
        self._limit = state.limit
        self._holders: dict[str, LeaseHolder] = {h.request_id: h for h in state.holders}
        self._waiting: list[LeaseHolder] = list(state.waiting)
        self._released: list[str] = list(state.released)
        self._reclaim_check = timedelta(seconds=state.reclaim_check_seconds)
        self._reclaimed = state.reclaimed
        self._granted = 0

    @workflow.run
    async def run(self, state: BMCLeaseState) -> BMCLeaseStatus:
        """Grant slots until no run holds or waits; see the module docstring."""
        workflow.upsert_search_attributes([names.OPERATION.value_set(names.BMC_LEASE)])
        while True:
            await self._grant_free_slots()
            if self._granted >= GRANTS_PER_RUN or workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._carried_over())
            if not self._holders and not self._waiting:
                # Idle: end now. An `acquire` that races the end makes Temporal refuse the
                # completion and run this task again with the signal, so it is never lost.
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._holders and not self._waiting:
                    return self.status()
                continue
            had_waiters = bool(self._waiting)
            try:
                await workflow.wait_condition(
                    functools.partial(self._should_wake, had_waiters),
                    timeout=self._reclaim_check if had_waiters else HOLDER_AUDIT,
                )
            except TimeoutError:
                await self._reclaim_closed_holders()

    @workflow.signal(name=BMC_LEASE_ACQUIRE_SIGNAL)
    def acquire(self, request: LeaseRequest) -> None:
        """Queue a run for a slot (a request already known is ignored: retries resend it)."""
        holder = request.holder
        known = holder.request_id in self._holders or holder.request_id in self._released
        if known or any(w.request_id == holder.request_id for w in self._waiting):
            return
        self._limit = request.limit
        self._reclaim_check = timedelta(seconds=request.reclaim_check_seconds)
        self._waiting.append(holder)

    @workflow.update(name=BMC_LEASE_ACQUIRE_UPDATE)
    def acquire_now(self, request: LeaseRequest) -> LeaseAnswer:
        """`acquire`, answering whether the slot is the request's now (it never waits for one).

        Granted only when nobody queued before it (first come, first served holds); a request
        already known answers as it stands (a holder: granted; queued or released: not).
        """
        self.acquire(request)
        request_id = request.holder.request_id
        if self._waiting and self._waiting[0].request_id == request_id and self._can_grant():
            self._holders[request_id] = self._waiting.pop(0)
            self._granted += 1
            self._show_slots()
        return LeaseAnswer(granted=request_id in self._holders)

    @workflow.signal(name=BMC_LEASE_RELEASE_SIGNAL)
    def release(self, release: LeaseRelease) -> None:
        """Give back a slot, or a place in the queue."""
        self._forget(release.request_id)

    @workflow.query(name=BMC_LEASE_STATUS_QUERY)
    def status(self) -> BMCLeaseStatus:
        return BMCLeaseStatus(
            limit=self._limit,
            holders=tuple(self._holders.values()),
            waiting=tuple(self._waiting),
            granted=self._granted,
            reclaimed=self._reclaimed,
        )

    def _should_wake(self, had_waiters: bool) -> bool:
        # A first waiter also wakes the loop: its wait for holders to close must be checked on.
        idle = not (self._holders or self._waiting)
        return self._can_grant() or idle or bool(self._waiting) != had_waiters

    def _can_grant(self) -> bool:
        return bool(self._waiting) and len(self._holders) < self._limit

    def _forget(self, request_id: str) -> None:
        self._holders.pop(request_id, None)
        self._waiting = [w for w in self._waiting if w.request_id != request_id]
        if request_id not in self._released:
            self._released = [*self._released, request_id][-RELEASED_REMEMBERED:]

    async def _grant_free_slots(self) -> None:
        while self._can_grant():
            holder = self._waiting.pop(0)
            self._holders[holder.request_id] = holder
            self._granted += 1
            grant = LeaseGrant(lease_workflow_id=workflow.info().workflow_id, request_id=holder.request_id)
            handle = workflow.get_external_workflow_handle(holder.workflow_id, run_id=holder.run_id)
            try:
                await handle.signal(BMC_LEASE_GRANTED_SIGNAL, grant)
            except FailureError as err:
                # The run is gone (closed, or never existed): nobody will release this slot.
                workflow.logger.info("grant to %s not delivered (%s): slot freed", holder.workflow_id, err)
                self._reclaimed += 1
                self._forget(holder.request_id)
        self._show_slots()

    def _show_slots(self) -> None:
        workflow.set_current_details(
            f"{len(self._holders)} of {self._limit} slots held, {len(self._waiting)} waiting"
        )

    async def _reclaim_closed_holders(self) -> None:
        if not self._holders:
            return
        runs = tuple(
            WorkflowRunRef(workflow_id=h.workflow_id, run_id=h.run_id) for h in self._holders.values()
        )
        closed: WorkflowRunRefs = await workflow.execute_activity(
            activity_api.find_closed_workflow_runs,
            WorkflowRunRefs(runs=runs),
            **kernel.options(HOLDER_CHECK, f"check the {len(runs)} holders of this BMC's lease"),
        )
        gone = {(run.workflow_id, run.run_id) for run in closed.runs}
        for holder in list(self._holders.values()):
            if (holder.workflow_id, holder.run_id) in gone:
                workflow.logger.info("%s closed holding a slot: reclaimed", holder.workflow_id)
                self._reclaimed += 1
                self._forget(holder.request_id)

    def _carried_over(self) -> BMCLeaseState:
        return BMCLeaseState(
            limit=self._limit,
            holders=tuple(self._holders.values()),
            waiting=tuple(self._waiting),
            released=tuple(self._released),
            reclaim_check_seconds=self._reclaim_check.total_seconds(),
            reclaimed=self._reclaimed,
        )
