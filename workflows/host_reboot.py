"""HostRebootWorkflow: one host reboot per boot generation (`reboot/host-<id>/generation-<n>`).

Runbook:
1. Method `bmc`: power-cycle through the host's BMC. `power_cycle_host` cycles exactly once per
   generation across retries (PowerCycle where the BMC can prove it, else ForceOff then On);
   `force_off` (a re-issued reboot) sends ForceOff, waits `power_down_wait_seconds` on a durable
   timer, then On.
2. Method `manual`, or the BMC path failed for good (unreachable after the activity's retries,
   bad credentials, a rejected reset): wait for the signal `host_rebooted` (or the update
   `mark_rebooted`) from whoever rebooted the host; the Phase says so.

The id is the idempotency key: starters use `WorkflowIDReusePolicy.REJECT_DUPLICATE`, so asking
twice for one generation reboots once. Cancelled while a BMC cycle is in flight, the workflow
first lets the cycle finish (a cycle cut between Off and On would leave the host off), then
completes with its result: the reboot happened, and the canceller must know it did.

The BMC path holds a slot of the BMC's fleet-wide lease (`workflows/bmc_lease.py`,
`METALFLOW_BMC_MAX_IN_FLIGHT` per BMC across all workers) around the cycle or ForceOff/On: queued
for it, the workflow waits on a signal, holding no activity slot. Runs that started before the
lease existed keep their old command sequence (`workflow.patched(BMC_LEASE_PATCH)`).

Cost and worst-case history: one activity slot during the cycle; about 20 events by BMC (25 with
ForceOff, its wait a durable timer) plus 19 for the lease (an activity, a timer, the grant
signal, the release signal: 39 measured), about 12 plus 2 per confirmation signal when manual.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from temporalio.common import TypedSearchAttributes, WorkflowIDReusePolicy

    from metalflow import activity_api, names
    from metalflow.models.bmc_lease import BMC_LEASE_GRANTED_SIGNAL, LeaseGrant
    from metalflow.models.host import (
        HOST_REBOOTED_SIGNAL,
        MARK_REBOOTED_UPDATE,
        HostRebootInput,
        HostRebootResult,
        OperationAnswer,
        OperatorRequest,
        RebootMethod,
    )
    from metalflow.models.inventory import HostInventory, HostLookup
    from metalflow.models.redfish import PowerCycleInput, PowerCycleResult, SetPowerInput, SetPowerResult
    from workflows import common
    from workflows.bmc_lease import BMCLeaseHolder

_WAIT_FOR_CANCELLATION = workflow.ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED
MAX_SPENT_GENERATIONS = 50  # generations an earlier run used; each costs one refused start
POWERING: str = "powering"
WAITING_FOR_MANUAL_REBOOT: str = "waiting-for-manual-reboot"
REBOOTED: str = "rebooted"
BMC_LEASE_PATCH = "bmc-fleet-lease"


@workflow.defn(name="HostRebootWorkflow")
class HostRebootWorkflow:
    """Reboot a host once for one boot generation."""

    @workflow.init
    def __init__(self, request: HostRebootInput) -> None:
        self._request = request
        self._confirmation: OperatorRequest | None = None
        self._waiting_for_person = False
        self._leases = BMCLeaseHolder()

    @workflow.run
    async def run(self, request: HostRebootInput) -> HostRebootResult:
        """Reboot the host; see the module docstring."""
        workflow.upsert_search_attributes(
            [names.HOST_ID.value_set(request.host_id), names.OPERATION.value_set(names.REBOOT)]
        )
        if request.policy.reboot_method == RebootMethod.MANUAL:
            return await self._wait_for_manual_reboot("the reboot method is manual")
        inventory = await self._resolve_inventory()
        try:
            method, resets = await self._power_cycle(inventory)
        except ActivityError as err:
            cause = err.cause
            why = f"{cause.type}: {cause.message}" if isinstance(cause, ApplicationError) else str(err)
            return await self._wait_for_manual_reboot(f"the BMC could not reboot the host ({why})")
        common.enter_phase(REBOOTED, f"generation {request.boot_generation} by {method}")
        return HostRebootResult(
            host_id=request.host_id,
            boot_generation=request.boot_generation,
            method=f"bmc:{method}",
            reset_types=resets,
            finished_at=workflow.now(),
        )

    @workflow.signal(name=HOST_REBOOTED_SIGNAL)
    def host_rebooted(self, confirmation: OperatorRequest) -> None:
        """Someone rebooted the host (the first confirmation counts)."""
        if self._confirmation is None:
            self._confirmation = confirmation

    @workflow.signal(name=BMC_LEASE_GRANTED_SIGNAL)
    def bmc_lease_granted(self, grant: LeaseGrant) -> None:
        """The BMC's lease granted this run a slot."""
        self._leases.granted(grant)

    @workflow.update(name=MARK_REBOOTED_UPDATE)
    def mark_rebooted(self, confirmation: OperatorRequest) -> OperationAnswer:
        """Like `host_rebooted`, with an answer; only while waiting for a person."""
        self.host_rebooted(confirmation)
        return OperationAnswer(accepted=True, message=f"reboot of {self._request.host_id} confirmed")

    @mark_rebooted.validator
    def _validate_mark_rebooted(self, confirmation: OperatorRequest) -> None:
        if not self._waiting_for_person:
            raise ValueError("this reboot is not waiting for a person: the BMC is rebooting the host")

    async def _resolve_inventory(self) -> HostInventory:
        inventory: HostInventory = await workflow.execute_activity(
            activity_api.resolve_host_inventory,
            HostLookup(host_id=self._request.host_id),
            **common.options(common.INVENTORY, f"resolve the BMC of {self._request.host_id}"),
        )
        return inventory

    async def _power_cycle(self, inventory: HostInventory) -> tuple[str, tuple[str, ...]]:
        request = self._request
        how = "ForceOff then On" if request.force_off else "power cycle"
        common.enter_phase(POWERING, f"{how} for generation {request.boot_generation}")
        # The whole cycle is one task, shielded from a cancel request: cut between Off and On, or
        # in the wait between them, it would leave the host off.
        cycle = asyncio.ensure_future(self._power_under_lease(inventory, how))
        try:
            return await asyncio.shield(cycle)
        except asyncio.CancelledError:
            workflow.logger.info("cancelled during the %s: letting it finish first", how)
            # The reboot happens anyway (the cancel came too late to stop it): report it done, so
            # the operation that cancelled it still tells DPF the host was rebooted. A cycle that
            # fails now goes to the manual reboot wait, as it would uncancelled: the host may be off.
            return await cycle

    async def _power_under_lease(self, inventory: HostInventory, how: str) -> tuple[str, tuple[str, ...]]:
        """The cycle (or ForceOff/On) inside a slot of the BMC's fleet-wide lease."""
        work = self._force_off_then_on if self._request.force_off else self._cycle_once
        if not workflow.patched(BMC_LEASE_PATCH):
            return await work(inventory)
        async with self._leases.hold(inventory.bmc, f"{how} of {self._request.host_id}"):
            return await work(inventory)

    async def _force_off_then_on(self, inventory: HostInventory) -> tuple[str, tuple[str, ...]]:
        off = await self._set_power(inventory, "ForceOff")
        await workflow.sleep(timedelta(seconds=self._request.policy.power_down_wait_seconds))
        on = await self._set_power(inventory, "On")
        return "ForceOff+On", tuple(r.sent for r in (off, on) if r.sent is not None)

    async def _cycle_once(self, inventory: HostInventory) -> tuple[str, tuple[str, ...]]:
        request = self._request
        cycle: PowerCycleResult = await workflow.execute_activity(
            activity_api.power_cycle_host,
            PowerCycleInput(
                bmc=inventory.bmc,
                boot_generation=request.boot_generation,
                requested_at=workflow.info().start_time,
                power_down_wait_seconds=request.policy.power_down_wait_seconds,
            ),
            **common.options(
                common.power_cycle_options(request.policy.power_down_wait_seconds),
                f"power cycle {request.host_id} to generation {request.boot_generation}",
            ),
        )
        return cycle.method, cycle.reset_types

    def _set_power(self, inventory: HostInventory, reset_type: str) -> asyncio.Future[SetPowerResult]:
        return workflow.start_activity(
            activity_api.set_power_state,
            SetPowerInput(bmc=inventory.bmc, reset_type=reset_type),
            **common.options(common.BMC_READ, f"{reset_type} {self._request.host_id}"),
        )

    async def _wait_for_manual_reboot(self, why: str) -> HostRebootResult:
        self._waiting_for_person = True
        common.enter_phase(
            WAITING_FOR_MANUAL_REBOOT,
            f"{why}; reboot {self._request.host_id} and send the signal `{HOST_REBOOTED_SIGNAL}` "
            f"(`metalflow host-rebooted {self._request.host_id}`)",
        )
        await workflow.wait_condition(lambda: self._confirmation is not None)
        self._waiting_for_person = False
        confirmation = self._confirmation
        assert confirmation is not None
        common.enter_phase(REBOOTED, f"confirmed by {confirmation.requested_by}")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return HostRebootResult(
            host_id=self._request.host_id,
            boot_generation=self._request.boot_generation,
            method="manual",
            confirmed_by=confirmation.requested_by,
            finished_at=workflow.now(),
        )


async def start_next_reboot(
    request: HostRebootInput,
    *,
    summary: str,
    parent_close_policy: workflow.ParentClosePolicy,
    cancellation_type: workflow.ChildWorkflowCancellationType = _WAIT_FOR_CANCELLATION,
    search_attributes: TypedSearchAttributes | None = None,
    decode_result: bool = True,
) -> tuple[workflow.ChildWorkflowHandle[Any, HostRebootResult], int]:
    """Start the reboot of the first generation from `request.boot_generation` on that no reboot used.

    A generation already used (its id refuses a second start) means the caller's count is behind
    the host's: an earlier run of the operation, or another operation, rebooted it since. The
    caller still needs its reboot (DPF asks for it, or staged firmware waits for it), so it gets
    the next generation rather than an old reboot's result: a restarted operation never repeats
    an old reboot, and never skips the one it needs.

    Args:
        request: The reboot; its `boot_generation` is the first one to try.
        summary: The child's summary in the UI; `{generation}` is replaced by the generation.
        parent_close_policy: What becomes of the reboot when the caller closes.
        cancellation_type: How cancelling the caller reaches the reboot.
        search_attributes: The child's search attributes at start (the entity sets Site too).
        decode_result: False: the handle answers the result as sent (a dict), for a caller that
            must not fail on a result it cannot decode (the entity reads one field of it).

    Returns:
        The child's handle and the generation it reboots to.
    """
    generation = request.boot_generation
    for _ in range(MAX_SPENT_GENERATIONS):
        try:
            handle = await workflow.start_child_workflow(
                "HostRebootWorkflow",
                request.model_copy(update={"boot_generation": generation}),
                id=names.host_reboot_workflow_id(request.host_id, generation),
                result_type=HostRebootResult if decode_result else None,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                parent_close_policy=parent_close_policy,
                cancellation_type=cancellation_type,
                static_summary=summary.format(generation=generation),
                search_attributes=search_attributes,
            )
            return handle, generation
        except WorkflowAlreadyStartedError:
            workflow.logger.info(
                "generation %d of %s already used: taking the next", generation, request.host_id
            )
            generation += 1
    raise ApplicationError(
        f"boot generations {request.boot_generation}..{generation - 1} of {request.host_id} are all spent",
        type="InvalidInput",
        non_retryable=True,
    )
