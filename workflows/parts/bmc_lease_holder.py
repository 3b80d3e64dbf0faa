"""The holder's side of the fleet-wide BMC lease (`workflows/bmc_lease/workflow.py`): what a
workflow run that touches a host's BMC does to hold one of its slots.

A host power action (a reboot's cycle, a reset's host off and on) first asks with
`BMCLeaseHolder.ask_for_host`: one activity, `lease_host_bmc`, resolves the host and asks its
BMC's lease for a slot by an update-with-start of `acquire_now`, answered at once (granted when
a slot is free and nobody waits before it, else queued); a BMC that serves this host only takes
no lease (`activities/bmc_lease.py`). Then `hold` waits for the grant where it was queued (the
signal `bmc_lease_granted`, which the workflow forwards to `granted`: no activity slot while
queued; the request is sent again every `REQUEST_REFRESH`, so a lease workflow terminated by
hand is started afresh), holds the slot for the block, and releases it after.

Stopped while queued (an abort through `runbook`, or a cancel of the waiting task), the place
is given back: nothing touched the BMC, and the lease neither grants it nor waits for this run's
end to reclaim it. Slots belong to workflow runs, not to workers: a worker that dies mid-cycle
leaves the slot with the run, whose retried activity still holds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.models.bmc_lease import (
        BMC_LEASE_RELEASE_SIGNAL,
        LeaseGrant,
        LeaseHolder,
        LeaseHostBMCInput,
        LeaseHostBMCResult,
        LeaseRelease,
        RequestLeaseInput,
        RequestLeaseResult,
    )
    from contracts.models.inventory import BMCAccess, HostInventory, HostLookup
    from workflows import kernel

REQUEST_REFRESH: Final = timedelta(minutes=5)


def queued_words(lease_workflow_id: str, host_id: str) -> str:
    """What a run queued for a BMC's lease waits for, in `host status` (the reset's `status`
    query, a reboot's details read by the CLI): the lease, that nothing was sent, the way out."""
    return (
        f"a slot of the BMC's lease {lease_workflow_id} (queued: nothing sent to the BMC yet; "
        f"`metalflow host abort {host_id}` withdraws it)"
    )


def withdrawn_words(what: str, lease_workflow_id: str) -> str:
    """What an abort of a run still queued for a BMC's lease promises (attack 40f: it read "a
    power cycle in flight is cut short"): the queued `what` is withdrawn, nothing was sent."""
    return (
        f"the {what} queued for a slot of the BMC's lease {lease_workflow_id} is withdrawn (its "
        "place given back): no power action was sent to the BMC"
    )


LEASE_CALL: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "heartbeat_timeout": kernel.CALL_HEARTBEAT,  # a worker killed holding the call: retried in 10 s
    # Unlimited attempts: a lease that cannot be asked for yet (Temporal busy) is waited for,
    # never turned into a failed reboot.
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        non_retryable_error_types=kernel.NON_RETRYABLE,
    ),
}


class BMCLeaseHolder:
    """The holder's side, kept by a workflow that touches BMCs (see the module docstring).

    The workflow forwards its `bmc_lease_granted` signal to `granted` and wraps each BMC
    activity in `async with holder.hold(bmc, what):`. A host power action (a reboot's cycle, a
    reset's host off and on) first asks with `ask_for_host`, the one step that applies the rule
    for a host's BMC (its lease, or none for a BMC of this host only), then holds with its answer.
    """

    def __init__(self) -> None:
        self._granted: set[str] = set()
        self.queued = False  # inside `hold`, waiting for the grant: nothing touched the BMC yet
        self.queued_for: str | None = None  # the lease it waits in, while queued (for queries)

    @staticmethod
    def new_request() -> LeaseHolder:
        """This run's next lease request (its id from `workflow.uuid4`: replays the same)."""
        info = workflow.info()
        return LeaseHolder(workflow_id=info.workflow_id, run_id=info.run_id, request_id=str(workflow.uuid4()))

    async def ask_for_host(
        self, host_id: str, boot_generation: int | None, summary: str
    ) -> tuple[HostInventory, tuple[LeaseHolder, RequestLeaseResult]]:
        """The one step before a host power action: `lease_host_bmc` resolves the host and asks
        its BMC's lease for a slot (granted in the answer when free, else queued); a BMC that
        serves this host only takes no lease, once the host's reboot of `boot_generation` - 1
        has ended (`activities/bmc_lease.py`; None: always the lease). Returns the inventory and
        the request with its answer, for `hold`.

        Unlimited attempts as for any lease request (a non-retryable error, e.g. an unknown host,
        still fails at once): a busy Temporal is waited for, not a failed power action. A cancel
        while the step runs waits for it (it is short; cut, it may hold a slot already), gives
        back what it got, and is raised.
        """
        holder = self.new_request()
        step = workflow.start_activity(
            activity_api.lease_host_bmc,
            LeaseHostBMCInput(
                lookup=HostLookup(host_id=host_id), holder=holder, boot_generation=boot_generation
            ),
            **kernel.options(LEASE_CALL, summary),
        )
        try:
            # Not awaited directly: a cancel must not cut the step, which may hold a slot already.
            await workflow.wait_condition(step.done)
        except asyncio.CancelledError:
            try:
                got: LeaseHostBMCResult = await step
            except ActivityError:
                pass  # failed for good: it holds nothing (a lost answer's slot is reclaimed)
            else:
                await self.give_back(got.lease, holder)
            raise
        got = await step
        return got.inventory, (holder, got.lease)

    def granted(self, grant: LeaseGrant) -> None:
        """The lease's grant arrived (a grant for a request this run no longer waits on is kept
        unused: the lease takes the slot back when this run closes)."""
        self._granted.add(grant.request_id)

    @asynccontextmanager
    async def hold(
        self,
        bmc: BMCAccess,
        what: str,
        asked: tuple[LeaseHolder, RequestLeaseResult] | None = None,
        *,
        runbook: kernel.Runbook | None = None,
    ) -> AsyncIterator[RequestLeaseResult]:
        """Wait for a slot of `bmc`'s fleet-wide lease, hold it for the block, release it.

        `asked`: a request already sent (by `ask_for_host`) and its answer; a granted one
        enters the block at once, a queued one waits for the grant signal like any other.
        `runbook`: its abort ends the wait for the grant: the place is given back and its
        `aborted()` raised, nothing touched the BMC (without one, cancel the waiting task).
        """
        if asked is None:
            holder = self.new_request()
            lease = await self._request(bmc, holder, what)
        else:
            holder, lease = asked
            if lease.granted:
                self._granted.add(holder.request_id)
        request_id = holder.request_id

        def stopped() -> bool:
            return runbook is not None and runbook.aborting and request_id not in self._granted

        self.queued = True
        try:
            while request_id not in self._granted:
                self.queued_for = lease.lease_workflow_id
                workflow.set_current_details(
                    f"{what}: waiting for a slot of the BMC's lease {lease.lease_workflow_id}"
                )
                try:
                    await workflow.wait_condition(
                        lambda: holder.request_id in self._granted or stopped(), timeout=REQUEST_REFRESH
                    )
                except TimeoutError:
                    lease = await self._request(bmc, holder, what)  # harmless when still queued
                if stopped():
                    assert runbook is not None
                    await self._release(lease, request_id)  # the place, given back: nothing was sent
                    raise runbook.aborted(
                        f"stopped while queued for the BMC's lease ({what}): nothing was sent to the BMC"
                    )
        except asyncio.CancelledError:
            # Stopped while queued (`HostRebootWorkflow._stop_cycle`): give the place back, so the
            # lease neither grants it nor waits for this run's end to reclaim it.
            await self._release(lease, request_id)
            raise
        finally:
            self.queued, self.queued_for = False, None
        try:
            yield lease
        finally:
            await self._release(lease, request_id)

    async def withdraw(self, task: asyncio.Future[Any]) -> bool:
        """A stop while `task` (a run's work under `hold`) still waits for its slot: it is
        cancelled (`hold` gives the queued place back) and True, nothing was sent to the BMC;
        False when not queued (the work is under way: the caller stops it its own way)."""
        if not self.queued:
            return False
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False  # unreachable: a queued task can only end by the cancel

    async def give_back(self, lease: RequestLeaseResult, holder: LeaseHolder) -> None:
        """Release a request sent but not used (the run stopped before `hold`): slot or place."""
        await self._release(lease, holder.request_id)

    async def _release(self, lease: RequestLeaseResult, request_id: str) -> None:
        if lease.exclusive:  # a BMC of this host only: no lease was asked, nothing to give back
            return
        try:
            await workflow.get_external_workflow_handle(lease.lease_workflow_id).signal(
                BMC_LEASE_RELEASE_SIGNAL, LeaseRelease(request_id=request_id)
            )
        except FailureError as err:  # the lease is gone: there is nothing left to give back
            workflow.logger.info("release of %s not delivered: %s", lease.lease_workflow_id, err)

    async def _request(self, bmc: BMCAccess, holder: LeaseHolder, what: str) -> RequestLeaseResult:
        lease: RequestLeaseResult = await workflow.execute_activity(
            activity_api.request_bmc_lease,
            RequestLeaseInput(bmc=bmc, holder=holder),
            **kernel.options(LEASE_CALL, f"ask the BMC lease of {bmc.bmc_id} for a slot ({what})"),
        )
        return lease
