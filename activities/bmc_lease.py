"""The two Temporal calls behind the fleet-wide BMC lease (`workflows/bmc_lease/workflow.py`).

`request_bmc_lease` queues a workflow run at the lease of its BMC: one signal-with-start of
`bmc-lease/<hash of the endpoint's origin and the task queue>` with the signal `acquire`,
carrying the run's ids, a request id and this worker's `METALFLOW_BMC_MAX_IN_FLIGHT`.
Signal-with-start starts the lease workflow when none runs and signals it otherwise, so the
first host of a BMC creates it and a lease that finished while idle comes back. A retried
attempt sends the same request id again; the lease ignores a request it already queued,
granted or saw released.

`lease_host_bmc` is the one step before a host power action (a reboot's power cycle, a reset's
host off and on; `BMCLeaseHolder.ask_for_host` in `workflows/parts/bmc_lease_holder.py`): it resolves the
host's inventory and asks its BMC's lease with an update-with-start of `acquire_now`, whose answer
says whether the slot is the run's already. A free BMC is then granted in this activity's result:
no grant signal, and two workflow tasks of the reboot and one of the lease fewer between DPF's ask
and the reset. A BMC at its limit answers "queued" at once (the update never waits for a slot, so
a queued run holds no activity slot) and the run waits for the grant signal as before. A retried
attempt sends the same request id (and update id): the lease answers "granted" again for a request
it holds, "queued" for one it queued.

A BMC that serves one host only (`Inventory.serves_one_host`: one host or DPU of the site file
behind its origin) takes no lease: `lease_host_bmc` answers `exclusive` once the host's previous
reboot has ended (one describe; see `_after_previous_reboot`), and the reboot releases nothing.
The fleet-wide limit then holds by the host's own lock; a BMC behind several hosts (a chassis
BMC, multi-system) still takes its lease. This saves, per reboot, the lease workflow (about 14
history events and 5 billable Actions) and the reboot's release signal (2 events, a workflow
task: 3 more).

`find_closed_workflow_runs` describes the runs a lease believes hold its slots and names the
ones that are no longer running (completed, failed, terminated, timed out, or gone from the
namespace's retention): the lease takes their slots back.

Both use the worker's own client (`activity.client()`): no client to hold, no credentials.
Cost: `request_bmc_lease` one RPC per lease request; `lease_host_bmc` the inventory read plus one
update-with-start RPC that returns once the lease's workflow task ran (a few ms on an idle
worker); `find_closed_workflow_runs` one describe per holder, and only while hosts wait for a
full lease (every `reclaim_check_seconds`).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Protocol

from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.heartbeat import beats_while_running
from contracts import names, workflow_api
from contracts.errors import InvalidInput, PreviousRebootRunning
from contracts.models.bmc_lease import (
    BMC_LEASE_ACQUIRE_SIGNAL,
    BMCLeaseState,
    LeaseHostBMCInput,
    LeaseHostBMCResult,
    LeaseRequest,
    RebootRunInput,
    RebootRunSeen,
    RequestLeaseInput,
    RequestLeaseResult,
    WorkflowRunRefs,
)
from contracts.models.control import STATUS_QUERY
from contracts.models.host import HostRebootResult
from contracts.models.inventory import BMCAccess, HostInventory, Source
from contracts.priorities import REBOOT_PRIORITY
from contracts.run_words import final_details
from contracts.with_start import execute_update_with_start
from drivers.settings import Settings


class HostResolver(Protocol):
    """What `lease_host_bmc` needs of the inventory (`drivers.inventory.Inventory`)."""

    async def resolve(self, host_id: str, source: Source | None = None) -> HostInventory: ...

    async def serves_one_host(self, bmc: BMCAccess) -> bool: ...


PREVIOUS_REBOOT_POLL_SECONDS = 1.0
PREVIOUS_REBOOT_WAIT_SECONDS = 20.0  # per attempt (the step's start-to-close is 30 s); then retried
WORDS_QUERY_TIMEOUT = timedelta(seconds=15)  # a cut run's words (`_cut_run_words`); then not read


class BMCLeaseActivities:
    """Lease requests and holder checks; holds the worker's settings (the per-BMC limit) and,
    for `lease_host_bmc`, the inventory."""

    def __init__(self, settings: Settings, inventory: HostResolver | None = None) -> None:
        self.settings = settings
        self.inventory = inventory

    def _lease_id(self, request: RequestLeaseInput) -> str:
        try:
            return names.bmc_lease_workflow_id(request.bmc.endpoint, activity.info().task_queue)
        except ValueError as err:
            raise InvalidInput(f"BMC {request.bmc.bmc_id}: {err}") from None

    @activity.defn(name="lease_host_bmc")
    @beats_while_running
    async def lease_host_bmc(self, request: LeaseHostBMCInput) -> LeaseHostBMCResult:
        """Resolve the host, then ask its BMC's lease for a slot: granted now, or queued."""
        if self.inventory is None:
            raise RuntimeError("lease_host_bmc needs the inventory: build BMCLeaseActivities with one")
        inventory = await self.inventory.resolve(request.lookup.host_id, request.lookup.source)
        if request.boot_generation is not None and await self.inventory.serves_one_host(inventory.bmc):
            # The BMC serves this host only: the host's lock (its entity, one operation at a
            # time, one reboot at a time within it) already keeps its reboots apart, except a
            # reboot still being stopped after its operation was terminated by hand. So: once the
            # previous generation's reboot has ended, no lease workflow.
            await self._after_previous_reboot(inventory.host_id, request.boot_generation)
            lease = RequestLeaseResult(
                lease_workflow_id="", limit=self.settings.bmc_max_in_flight, granted=True, exclusive=True
            )
            return LeaseHostBMCResult(inventory=inventory, lease=lease)
        asked = RequestLeaseInput(bmc=inventory.bmc, holder=request.holder)
        lease_id = self._lease_id(asked)
        limit = self.settings.bmc_max_in_flight
        reclaim = self.settings.bmc_lease_reclaim_seconds
        task_queue = activity.info().task_queue
        answer = await execute_update_with_start(
            activity.client(),
            workflow_api.BMCLeaseWorkflow.acquire_now,
            LeaseRequest(holder=request.holder, limit=limit, reclaim_check_seconds=reclaim),
            # The request id as the update id: a retried attempt is the same update to Temporal.
            id=f"acquire-{request.holder.request_id}",
            start=WithStartWorkflowOperation(
                workflow_api.BMCLeaseWorkflow.run,
                BMCLeaseState(limit=limit, reclaim_check_seconds=reclaim),
                id=lease_id,
                task_queue=task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=f"fleet-wide lease of the BMC of {inventory.bmc.bmc_id} (at most {limit})",
                priority=REBOOT_PRIORITY,  # its grants are on a reboot's path: see contracts.priorities
            ),
        )
        lease = RequestLeaseResult(lease_workflow_id=lease_id, limit=limit, granted=answer.granted)
        return LeaseHostBMCResult(inventory=inventory, lease=lease)

    async def _after_previous_reboot(self, host_id: str, generation: int) -> None:
        """Return once the host's reboot of `generation` - 1 is not running (or never was).

        Why it is enough: every reboot runs this step before it touches the BMC and never ends
        while the step runs (a cancel waits for it), so the previous one ended only after its
        own previous one had; by induction no earlier reboot of the host still runs. A reboot
        of another id form (tests) has no previous generation to wait for.

        Raises:
            PreviousRebootRunning: it still runs after `PREVIOUS_REBOOT_WAIT_SECONDS` (retried).
        """
        if generation <= 1:
            return
        previous = names.host_reboot_workflow_id(host_id, generation - 1)
        handle = activity.client().get_workflow_handle(previous)
        deadline = time.monotonic() + PREVIOUS_REBOOT_WAIT_SECONDS
        while True:
            try:
                described = await handle.describe()
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                return
            if described.status != WorkflowExecutionStatus.RUNNING:
                return
            if time.monotonic() >= deadline:
                raise PreviousRebootRunning(f"{previous} still runs: this reboot waits until it has ended")
            await asyncio.sleep(PREVIOUS_REBOOT_POLL_SECONDS)

    @activity.defn(name="request_bmc_lease")
    @beats_while_running
    async def request_bmc_lease(self, request: RequestLeaseInput) -> RequestLeaseResult:
        """Queue `request.holder` at its BMC's lease workflow, starting it when none runs."""
        info = activity.info()
        lease_id = self._lease_id(request)
        limit = self.settings.bmc_max_in_flight
        reclaim = self.settings.bmc_lease_reclaim_seconds
        await activity.client().start_workflow(
            workflow_api.BMCLeaseWorkflow.run,
            BMCLeaseState(limit=limit, reclaim_check_seconds=reclaim),
            id=lease_id,
            task_queue=info.task_queue,
            start_signal=BMC_LEASE_ACQUIRE_SIGNAL,  # `workflow_api.BMCLeaseWorkflow.acquire`
            start_signal_args=[
                LeaseRequest(holder=request.holder, limit=limit, reclaim_check_seconds=reclaim)
            ],
            static_summary=f"fleet-wide lease of the BMC of {request.bmc.bmc_id} (at most {limit})",
            priority=REBOOT_PRIORITY,
        )
        return RequestLeaseResult(lease_workflow_id=lease_id, limit=limit)

    @activity.defn(name="find_closed_workflow_runs")
    @beats_while_running
    async def find_closed_workflow_runs(self, runs: WorkflowRunRefs) -> WorkflowRunRefs:
        """The runs of `runs` that are not running any more."""
        client = activity.client()
        closed = []
        for run in runs.runs:
            activity.heartbeat()
            try:
                described = await client.get_workflow_handle(run.workflow_id, run_id=run.run_id).describe()
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                closed.append(run)
                continue
            if described.status != WorkflowExecutionStatus.RUNNING:
                closed.append(run)
        return WorkflowRunRefs(runs=tuple(closed))

    @activity.defn(name="describe_reboot_run")
    @beats_while_running
    async def describe_reboot_run(self, request: RebootRunInput) -> RebootRunSeen:
        """How the run holding the reboot id of `request`'s generation stands, and the generation
        a completed one reached (its result's): what `start_next_reboot` needs to know whether
        the generation is used up (`workflows.parts.boot_generation.spent`)."""
        workflow_id = request.workflow_id or names.host_reboot_workflow_id(
            request.host_id, request.boot_generation
        )
        handle = activity.client().get_workflow_handle(workflow_id, result_type=HostRebootResult)
        try:
            described = await handle.describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return RebootRunSeen(end="absent")
        status, phase = described.status, described.typed_search_attributes.get(names.PHASE) or ""
        if status == WorkflowExecutionStatus.COMPLETED:
            if request.workflow_id:  # an operation's own run: not a reboot's result
                return RebootRunSeen(end="completed", phase=phase)
            result = await handle.result(follow_runs=False)
            return RebootRunSeen(end="completed", boot_generation=result.boot_generation, phase=phase)
        ends = {
            WorkflowExecutionStatus.RUNNING: "running",
            WorkflowExecutionStatus.FAILED: "failed",
            WorkflowExecutionStatus.CANCELED: "cancelled",
            WorkflowExecutionStatus.TERMINATED: "terminated",
        }
        # TIMED_OUT, and what Temporal may add: unknown, as timed out (`spent`: used up).
        end = "timed-out" if status is None else ends.get(status, "timed-out")
        said = ""
        if status == WorkflowExecutionStatus.FAILED:  # its words: did it leave the host OFF?
            try:
                await handle.result(follow_runs=False)
            except WorkflowFailureError as failed:
                said = str(getattr(failed.cause, "message", None) or failed.cause or failed)
        elif request.workflow_id and request.words:  # cut by hand: what does it say it left?
            said = await _cut_run_words(activity.client(), workflow_id, end)
        return RebootRunSeen(end=end, phase=phase, said=said)


async def _cut_run_words(client: Client, workflow_id: str, end: str) -> str:
    """What an operation's run cut by hand says it did and left (`RebootRunInput.words`), "" none
    or not read: a cancelled run's final details, a terminated one's `status` query's `left` (a
    terminated run ran no finaliser: the state it had, replayed). One query either way."""
    if end == "cancelled":
        return await final_details(client, workflow_id, WORDS_QUERY_TIMEOUT) or ""
    if end != "terminated":
        return ""
    try:
        status = await client.get_workflow_handle(workflow_id).query(
            STATUS_QUERY, result_type=dict, rpc_timeout=WORDS_QUERY_TIMEOUT
        )
    except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
        return ""
    return str(status.get("left") or "") if isinstance(status, dict) else ""
