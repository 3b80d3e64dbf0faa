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

The lease's state is its `LeaseBook` (`state.py`: the rules above, no temporalio), whose data
is `BMCLeaseState`; it continues as new as it is.

Cost per power cycle: on the reboot, the lease step (or `request_bmc_lease`), the grant signal
when queued and the `release` signal; on the lease, `acquire` (or the `acquire_now` update), the
grant, `release`, the wait's timer and their workflow tasks (tests/test_bmc_lease.py checks at
most 20 events a cycle); one describe per holder per check while contended, nothing while idle
(it ends). Activity slots: the cycle's own while it runs, none while queued, one for the lease
request for a few milliseconds. Measured figures: bench/README.md, "workflows/bmc_lease/workflow.py".
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
        LeaseRelease,
        LeaseRequest,
        WorkflowRunRef,
        WorkflowRunRefs,
    )
    from workflows import kernel
    from workflows.bmc_lease.state import LeaseBook
    from workflows.parts.bmc_lease_holder import LEASE_CALL

HOLDER_AUDIT: Final = timedelta(minutes=10)
GRANTS_PER_RUN: Final = 400  # about 12 events each: far below Temporal's history limits

HOLDER_CHECK: Final[workflow.ActivityConfig] = LEASE_CALL  # one describe per holder, beating


@workflow.defn(name="BMCLeaseWorkflow")
class BMCLeaseWorkflow(kernel.Runbook):
    """A counting semaphore for one BMC endpoint; see the module docstring. What it knows and
    decides is its `LeaseBook` (`state.py`), carried over continue-as-new as it is."""

    @workflow.init
    def __init__(self, state: BMCLeaseState) -> None:
        super().__init__()
        self.book = LeaseBook.of(state)

    @workflow.run
    async def run(self, state: BMCLeaseState) -> BMCLeaseStatus:
        """Grant slots until no run holds or waits; see the module docstring."""
        workflow.upsert_search_attributes([names.OPERATION.value_set(names.BMC_LEASE)])
        book = self.book
        while True:
            await self._grant_free_slots()
            if book.granted >= GRANTS_PER_RUN or workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                self.settle_upserts()  # the phase entered in this activation goes with the run
                workflow.continue_as_new(book)
            if book.idle:
                # Idle: end now. An `acquire` that races the end makes Temporal refuse the
                # completion and run this task again with the signal, so it is never lost.
                await workflow.wait_condition(workflow.all_handlers_finished)
                if book.idle:
                    return book.status()
                continue
            had_waiters = bool(book.waiting)
            if not await self.wait(
                functools.partial(book.should_wake, had_waiters),
                timeout=book.wait_seconds(had_waiters, HOLDER_AUDIT.total_seconds()),
                abortable=False,  # the lease has no abort: it ends when idle
            ):
                await self._reclaim_closed_holders()

    @workflow.signal(name=BMC_LEASE_ACQUIRE_SIGNAL)
    def acquire(self, request: LeaseRequest) -> None:
        """Queue a run for a slot (a request already known is ignored: retries resend it)."""
        self.book.queue(request)

    @workflow.update(name=BMC_LEASE_ACQUIRE_UPDATE)
    def acquire_now(self, request: LeaseRequest) -> LeaseAnswer:
        """`acquire`, answering whether the slot is the request's now (it never waits for one).

        Granted only when nobody queued before it (first come, first served holds); a request
        already known answers as it stands (a holder: granted; queued or released: not).
        """
        held = self.book.granted
        self.book.queue(request)
        granted = self.book.grant_now(request.holder.request_id)
        if self.book.granted != held:
            self._show_slots()
        return LeaseAnswer(granted=granted)

    @workflow.signal(name=BMC_LEASE_RELEASE_SIGNAL)
    def release(self, release: LeaseRelease) -> None:
        """Give back a slot, or a place in the queue."""
        self.book.forget(release.request_id)

    @workflow.query(name=BMC_LEASE_STATUS_QUERY)
    def status(self) -> BMCLeaseStatus:
        return self.book.status()

    async def _grant_free_slots(self) -> None:
        while self.book.can_grant():
            holder = self.book.grant_next()
            grant = LeaseGrant(lease_workflow_id=workflow.info().workflow_id, request_id=holder.request_id)
            handle = workflow.get_external_workflow_handle(holder.workflow_id, run_id=holder.run_id)
            try:
                await handle.signal(BMC_LEASE_GRANTED_SIGNAL, grant)
            except FailureError as err:
                # The run is gone (closed, or never existed): nobody will release this slot.
                workflow.logger.info("grant to %s not delivered (%s): slot freed", holder.workflow_id, err)
                self.book.reclaim(holder)
        self._show_slots()

    def _show_slots(self) -> None:
        workflow.set_current_details(self.book.slots_words())

    async def _reclaim_closed_holders(self) -> None:
        if not self.book.holders:
            return
        runs = tuple(WorkflowRunRef(workflow_id=h.workflow_id, run_id=h.run_id) for h in self.book.holders)
        closed: WorkflowRunRefs = await self.call(
            activity_api.find_closed_workflow_runs,
            WorkflowRunRefs(runs=runs),
            kernel.options(HOLDER_CHECK, f"check the {len(runs)} holders of this BMC's lease"),
            abortable=False,
        )
        for holder in self.book.closed_holders({(run.workflow_id, run.run_id) for run in closed.runs}):
            workflow.logger.info("%s closed holding a slot: reclaimed", holder.workflow_id)
            self.book.reclaim(holder)
