"""The campaign's I/O: select hosts from the inventory, check which already run the target, ask
each host's entity for the operation, sweep in-flight hosts, abort running operations.

A workflow cannot send an update (the Python SDK's external handle offers signal and cancel), so
the requests to `host/<id>` go through the worker's Temporal client here, as an update-with-start
(the entity is created on first use, like `metalflow host ...` does). The entity decides, as for
any operator: busy, assigned (when the campaign skips assigned hosts) or awaiting approval.

A retried `request_campaign_hosts` attempt never asks a host twice: before asking, it reads the
entity's status and reports an operation this campaign already asked for (current or recent) as
started. Cost per host: one update (plus one query on a retried attempt); per sweep one describe
per in-flight host (plus a describe and a query of the entity once its operation ended, or one
query of a running operation's phase: one waiting for an operator is reported); selection reads
the site file once (or lists the DPUNodes once).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.dpf.kube import DPU, DPUNODE, Kube
from activities.heartbeat import heartbeating
from activities.inventory import Inventory
from activities.redfish.client import RedfishClient
from activities.redfish.firmware import read_versions
from metalflow import names
from metalflow.errors import InvalidInput, MetalflowError
from metalflow.models.campaign import (
    AbortHostsInput,
    CampaignHost,
    CheckHostsInput,
    CheckHostsResult,
    Failure,
    HostFinished,
    HostRequestInput,
    HostRequestOutcome,
    HostRequestsInput,
    HostRequestsResult,
    HostSelection,
    InFlight,
    SelectHostsInput,
    SelectHostsResult,
    SweepInput,
    SweepResult,
    TargetKind,
)
from metalflow.models.dpf import DPUNODE_NAME_LABEL, HOST_ID_LABEL
from metalflow.models.host import (
    ABORT_UPDATE,
    MANUAL_INTERVENTION_REQUIRED,
    REQUEST_FIRMWARE_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    STATUS_QUERY,
    WITHDRAW_UPDATE,
    FirmwareRequest,
    HostStatus,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
    OperatorRequest,
    WithdrawRequest,
)
from metalflow.models.inventory import HostInventory
from metalflow.models.redfish import ReadFirmwareInput

UPDATE_TIMEOUT = timedelta(seconds=60)
PARALLEL_REQUESTS = 20  # updates in flight at once from one activity
STATUS_TIMEOUT = timedelta(seconds=10)  # the entity's status, read after an ask went unanswered
ABORT_GRACE_SECONDS = 3.0  # after an abort, how long the asks under way may still answer
NIC_FIRMWARE = ReadFirmwareInput.model_fields["component"].default  # what the firmware workflow reads
# The entity's error types (workflows/host.py).
BUSY, ASSIGNED, STARTED = "HostBusy", "InstanceConflict", "OperationStarted"


def matches(host: HostInventory, selection: HostSelection) -> bool:
    """Whether the host belongs to the selection (`hosts` is checked by the caller)."""
    if selection.group:
        return selection.group in host.groups
    if selection.selector:
        return all(host.labels.get(k) == v for k, v in selection.selector.items())
    return True


def campaign_host(host: HostInventory) -> CampaignHost:
    return CampaignHost(
        host_id=host.host_id,
        site=host.site or "default",
        group=host.groups[0] if host.groups else "",
        bmc=host.bmc.endpoint,
    )


class CampaignActivities:
    """Holds the worker's inventory, Kubernetes, Temporal and Redfish clients."""

    def __init__(
        self, inventory: Inventory, kube: Kube, temporal: Client, redfish: RedfishClient | None = None
    ) -> None:
        self.inventory = inventory
        self.kube = kube
        self.temporal = temporal
        self.redfish = redfish  # the worker's one client: firmware campaigns read DPU versions

    # -- selection ----------------------------------------------------------------------------------
    async def _all_hosts(self) -> list[HostInventory]:
        settings = self.inventory.settings
        if settings.inventory == "site":
            site = await asyncio.to_thread(self.inventory.site_file.site)
            ids = [h.id for h in site.hosts]
        else:
            listed = await self.kube.list(
                "campaign", DPUNODE, settings.dpf_namespace, label_selector=HOST_ID_LABEL
            )
            ids = [item["metadata"]["labels"][HOST_ID_LABEL] for item in listed.get("items") or []]
        return [await self.inventory.resolve(host_id) for host_id in ids]

    @activity.defn(name="select_campaign_hosts")
    async def select_campaign_hosts(self, request: SelectHostsInput) -> SelectHostsResult:
        """The selected hosts, in inventory order (a list: in its own order).

        Raises:
            InvalidInput: An unknown host is listed, or the selection matches no host.
        """
        selection = request.selection
        known = await self._all_hosts()
        source = f"the {self.inventory.settings.inventory} inventory"
        if selection.hosts:
            by_id = {h.host_id: h for h in known}
            unknown = [h for h in selection.hosts if h not in by_id]
            if unknown:
                raise InvalidInput(f"unknown hosts {', '.join(unknown)}: not in {source}")
            chosen = [by_id[h] for h in dict.fromkeys(selection.hosts)]
        else:
            chosen = [h for h in known if matches(h, selection)]
        if not chosen:
            hint = ""
            if selection.group:
                groups = sorted({g for h in known for g in h.groups})
                hint = f" (groups there: {', '.join(groups) or 'none'})"
            raise InvalidInput(f"{selection.describe()} matches no host in {source}{hint}")
        return SelectHostsResult(
            hosts=tuple(campaign_host(h) for h in chosen),
            assigned=tuple(h.host_id for h in chosen if h.instance),
        )

    # -- at target ----------------------------------------------------------------------------------
    @activity.defn(name="check_campaign_hosts")
    async def check_campaign_hosts(self, request: CheckHostsInput) -> CheckHostsResult:
        """Hosts already at the target: every DPU runs the target BFB or flavor and is not
        Outdated (DPF), or every DPU's own BMC reports the target firmware running (Redfish).
        A reprovision has no such state: none is at target."""
        target = request.target
        if target.kind == TargetKind.FIRMWARE:
            return await self._firmware_at_target(request)
        field = {TargetKind.BFB: "bfb", TargetKind.FLAVOR: "dpuFlavor"}.get(target.kind)
        if field is None:
            return CheckHostsResult(at_target=())
        ns = self.inventory.settings.dpf_namespace
        done = []
        for host_id in request.host_ids:
            listed = await self.kube.list(
                host_id, DPU, ns, label_selector=f"{DPUNODE_NAME_LABEL}=node-{host_id}"
            )
            dpus = list(listed.get("items") or [])
            if dpus and all(_runs(dpu, field, target.value) for dpu in dpus):
                done.append(host_id)
        return CheckHostsResult(at_target=tuple(done))

    async def _firmware_at_target(self, request: CheckHostsInput) -> CheckHostsResult:
        """Read each DPU's running firmware from its BMC (at most PARALLEL_REQUESTS hosts at once;
        the Redfish client's cap per BMC holds). A host whose BMC cannot say is not at target: its
        firmware operation runs and reports the BMC's words."""
        redfish = self.redfish
        if redfish is None:
            raise ApplicationError(
                "no Redfish client: this worker cannot read DPU firmware", non_retryable=True
            )
        gate = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def runs_target(host_id: str) -> bool:
            async with gate:
                host = await self.inventory.resolve(host_id)
                bmcs = [d.bmc for d in host.dpus if d.bmc is not None]
                if not host.dpus or len(bmcs) != len(host.dpus):
                    return False
                try:
                    for access in bmcs:
                        async with redfish.connect(access, on_wait=activity.heartbeat) as bmc:
                            versions = await read_versions(
                                bmc, ReadFirmwareInput.model_fields["component"].default
                            )
                        if versions.running != request.target.value:
                            return False
                except MetalflowError as err:
                    activity.logger.info("firmware of %s unknown, not at target: %s", host_id, err)
                    return False
                return True

        async with heartbeating():
            found = await asyncio.gather(*(runs_target(h) for h in request.host_ids))
        return CheckHostsResult(
            at_target=tuple(h for h, ok in zip(request.host_ids, found, strict=True) if ok)
        )

    # -- requests -----------------------------------------------------------------------------------
    @activity.defn(name="request_campaign_hosts")
    async def request_campaign_hosts(self, request: HostRequestsInput) -> HostRequestsResult:
        """Ask every host's entity (at most PARALLEL_REQUESTS at once); one outcome per host.

        Cancelled (the campaign is aborting), it asks no further host (`not-asked`), gives the
        asks under way ABORT_GRACE_SECONDS to answer, and returns: an ask still unanswered then
        (an entity nobody serves holds it up to UPDATE_TIMEOUT) is `unanswered`, which the
        campaign reports by name, since its entity may still take it later."""
        retried = activity.info().attempt > 1
        gate = asyncio.Semaphore(PARALLEL_REQUESTS)
        stop = asyncio.Event()

        async def ask(one: HostRequestInput) -> HostRequestOutcome:
            async with gate:
                if stop.is_set():
                    return HostRequestOutcome(host_id=one.host_id, outcome="not-asked")
                if retried and (earlier := await self._asked_before(one)) is not None:
                    return earlier
                try:
                    return await self._ask(one)
                except (RPCTimeoutOrCancelledError, RPCError) as err:
                    timed_out = isinstance(err, RPCTimeoutOrCancelledError) or (
                        err.status == RPCStatusCode.DEADLINE_EXCEEDED
                    )
                    if stop.is_set() or not timed_out:
                        raise
                    # One entity that does not answer (its workers down) puts off that host only;
                    # failing the activity would ask every host of the round again.
                    return await self._unanswered(one)

        asks = [asyncio.ensure_future(ask(one)) for one in request.requests]
        late: set[asyncio.Future[HostRequestOutcome]] = set()
        try:
            async with heartbeating():  # the campaign's cancel arrives with a heartbeat's answer
                await asyncio.shield(asyncio.gather(*asks))
        except asyncio.CancelledError:
            stop.set()
            _, pending = await asyncio.wait(asks, timeout=ABORT_GRACE_SECONDS)
            late = set(pending)
            for task in late:
                task.cancel()  # the client raises its own "update timed out or cancelled" then
            await asyncio.gather(*asks, return_exceptions=True)
        outcomes = [
            task.result()
            if task not in late
            else HostRequestOutcome(
                host_id=one.host_id,
                outcome="unanswered",
                message=f"its entity did not answer within {ABORT_GRACE_SECONDS:g} s of the abort",
            )
            for one, task in zip(request.requests, asks, strict=True)
        ]
        return HostRequestsResult(outcomes=tuple(outcomes))

    async def _ask(self, one: HostRequestInput) -> HostRequestOutcome:
        update, body = _body(one)
        entity = HostWorkflowInput(host_id=one.host_id, site=one.site)
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            "HostWorkflow",
            entity,
            id=names.host_workflow_id(one.host_id),
            task_queue=activity.info().task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(names.HOST_ID, one.host_id),
                    SearchAttributePair(names.OPERATION, names.HOST),
                    SearchAttributePair(names.SITE, one.site),
                ]
            ),
            static_summary=f"host {one.host_id}: the one owner of the host (instance, operations, approvals)",
        )
        try:
            answer = await self.temporal.execute_update_with_start_workflow(
                update,
                body,
                start_workflow_operation=start,
                result_type=OperationAccepted,
                rpc_timeout=UPDATE_TIMEOUT,  # an entity nobody serves: fail the attempt, retry later
            )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            kind = cause.type if isinstance(cause, ApplicationError) else None
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            outcome = {BUSY: "busy", ASSIGNED: "assigned"}.get(kind or "", "refused")
            if outcome == "busy" and (ours := await self._in_flight_for(one)) is not None:
                return ours  # busy with this campaign's own request (an earlier unanswered ask)
            return HostRequestOutcome(host_id=one.host_id, outcome=outcome, message=message)
        return HostRequestOutcome(
            host_id=one.host_id,
            outcome="awaiting-approval" if answer.awaiting_approval else "started",
            workflow_id=answer.workflow_id,
            message=answer.message,
        )

    async def _unanswered(self, one: HostRequestInput) -> HostRequestOutcome:
        """An ask whose entity did not answer within UPDATE_TIMEOUT: taken after all (then it is
        this campaign's operation in flight), else `busy`, so the campaign asks again later."""
        try:
            ours = await self._in_flight_for(one)
        except (RPCError, RPCTimeoutOrCancelledError):  # it does not answer queries either
            ours = None
        if ours is not None:
            return ours
        return HostRequestOutcome(
            host_id=one.host_id,
            outcome="busy",
            message=f"its entity did not answer within {UPDATE_TIMEOUT.total_seconds():g} s "
            "(no worker serving it?): asked again later",
        )

    async def _in_flight_for(self, one: HostRequestInput) -> HostRequestOutcome | None:
        """The entity's operation in flight when this campaign asked for it (its requester)."""
        status = await self._status(one.host_id, rpc_timeout=STATUS_TIMEOUT)
        current = status.current if status is not None else None
        if current is None or current.requested_by != one.requested_by:
            return None
        return HostRequestOutcome(
            host_id=one.host_id,
            outcome="awaiting-approval" if current.outcome == "awaiting-approval" else "started",
            workflow_id=current.workflow_id,
            message="asked earlier: its entity took the request",
        )

    async def _asked_before(self, one: HostRequestInput) -> HostRequestOutcome | None:
        status = await self._status(one.host_id)
        if status is None:
            return None
        records = ([status.current] if status.current else []) + list(reversed(status.recent))
        for record in records:
            if record.requested_by == one.requested_by:
                outcome = "awaiting-approval" if record.outcome == "awaiting-approval" else "started"
                return HostRequestOutcome(
                    host_id=one.host_id,
                    outcome=outcome,
                    workflow_id=record.workflow_id,
                    message="asked by an earlier attempt",
                )
        return None

    async def _status(self, host_id: str, rpc_timeout: timedelta | None = None) -> HostStatus | None:
        handle = self.temporal.get_workflow_handle(names.host_workflow_id(host_id))
        try:
            status: HostStatus = await handle.query(
                STATUS_QUERY, result_type=HostStatus, rpc_timeout=rpc_timeout
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return status

    # -- sweep and abort ----------------------------------------------------------------------------
    @activity.defn(name="sweep_campaign_hosts")
    async def sweep_campaign_hosts(self, request: SweepInput) -> SweepResult:
        """Operations that ended without the campaign hearing of it, with their outcome, and
        running ones that wait for an operator (Phase `manual-intervention-required`).

        A running operation is read from its own workflow (one describe), so an operation whose
        entity is gone (terminated, reset) is still seen to end; its outcome comes from the
        entity's record when the entity runs, else from the operation's close. A request still
        awaiting approval is read from the entity."""
        finished, needs_operator = [], []
        for flight in request.in_flight:
            if flight.awaiting_approval or not flight.workflow_id:
                outcome = await self._approval_outcome(flight)
            else:
                outcome = await self._operation_outcome(flight)
                if outcome is None and (why := await self._operator_needed(flight.workflow_id)):
                    needs_operator.append(Failure(host=flight.host, reason=f"needs an operator: {why}"))
            if outcome is not None:
                finished.append(
                    HostFinished(host_id=flight.host.host_id, workflow_id=flight.workflow_id, outcome=outcome)
                )
        return SweepResult(finished=tuple(finished), needs_operator=tuple(needs_operator))

    async def _operator_needed(self, workflow_id: str) -> str | None:
        """Why the operation waits for an operator, or None when it does not (or cannot be read:
        the next sweep asks again). Every host operation answers `status` with `phase` and
        `manual_intervention_reason`."""
        try:
            status = await self.temporal.get_workflow_handle(workflow_id).query(STATUS_QUERY)
        except (RPCError, WorkflowQueryFailedError) as err:
            activity.logger.info("status of %s not read: %s", workflow_id, err)
            return None
        if not isinstance(status, dict) or status.get("phase") != MANUAL_INTERVENTION_REQUIRED:
            return None
        return str(status.get("manual_intervention_reason") or "manual intervention required")

    async def _approval_outcome(self, flight: InFlight) -> str | None:
        if not await self._entity_runs(flight.host.host_id):
            return "expired: the host's entity ended before the approval"
        status = await self._status(flight.host.host_id)
        if status is not None and status.current and status.current.workflow_id == flight.workflow_id:
            if status.current.outcome != "awaiting-approval":
                flight = flight.model_copy(update={"awaiting_approval": False})  # approved meanwhile
                return await self._operation_outcome(flight)
            return None
        return _recorded(status, flight) or "failed: the host's entity has no record of the operation"

    async def _operation_outcome(self, flight: InFlight) -> str | None:
        handle = self.temporal.get_workflow_handle(flight.workflow_id)
        try:
            described = await handle.describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return "failed: the operation's workflow does not exist"
        if described.status == WorkflowExecutionStatus.RUNNING:
            return None
        if await self._entity_runs(flight.host.host_id):
            recorded = _recorded(await self._status(flight.host.host_id), flight)
            if recorded is not None:
                return recorded
        return await _closed_outcome(handle, described.status)

    async def _entity_runs(self, host_id: str) -> bool:
        try:
            described = await self.temporal.get_workflow_handle(names.host_workflow_id(host_id)).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING

    @activity.defn(name="abort_campaign_hosts")
    async def abort_campaign_hosts(self, request: AbortHostsInput) -> None:
        """Withdraw each request awaiting approval from its host's entity (`withdraw`: it ends
        unstarted, and the entity tells the campaign), then send `abort` to each operation, and
        to a withdrawn one that was approved and started meanwhile. One that already ended or
        refuses is left as it is. Cost: one update per host (two for an approval raced)."""
        body = OperatorRequest(requested_by=request.requested_by, reason=request.reason)
        started = []
        for flight in request.withdraw:
            entity = self.temporal.get_workflow_handle(names.host_workflow_id(flight.host.host_id))
            withdraw = WithdrawRequest(
                requested_by=request.requested_by, reason=request.reason, workflow_id=flight.workflow_id
            )
            try:
                await entity.execute_update(WITHDRAW_UPDATE, withdraw)
            except WorkflowUpdateFailedError as err:
                if isinstance(err.cause, ApplicationError) and err.cause.type == STARTED:
                    started.append(flight.workflow_id)  # approved meanwhile: abort it with the rest
                else:
                    activity.logger.info("request %s not withdrawn: %s", flight.workflow_id, err)
            except RPCError as err:
                activity.logger.info("request %s not withdrawn: %s", flight.workflow_id, err)
        for workflow_id in (*request.workflow_ids, *started):
            handle = self.temporal.get_workflow_handle(workflow_id)
            try:
                await handle.execute_update(ABORT_UPDATE, body)
            except (WorkflowUpdateFailedError, RPCError) as err:
                activity.logger.info("abort of %s not sent: %s", workflow_id, err)


def _recorded(status: HostStatus | None, flight: InFlight) -> str | None:
    """The outcome the entity recorded for this flight's operation (not an older one of that id)."""
    for record in reversed(status.recent if status is not None else ()):
        if record.workflow_id == flight.workflow_id and (
            record.requested_at is None or record.requested_at >= flight.started_at
            or record.finished_at is None or record.finished_at >= flight.started_at
        ):  # fmt: skip
            return record.outcome
    return None


async def _closed_outcome(handle: WorkflowHandle[Any, Any], status: WorkflowExecutionStatus | None) -> str:
    """An operation's outcome from its closed workflow, in the entity's words."""
    if status == WorkflowExecutionStatus.COMPLETED:
        return "completed"
    if status == WorkflowExecutionStatus.CANCELED:
        return "aborted"
    if status == WorkflowExecutionStatus.TERMINATED:
        return "terminated"
    try:
        await handle.result(follow_runs=False)
    except WorkflowFailureError as err:
        cause: BaseException = err
        while getattr(cause, "cause", None) is not None:
            cause = cause.cause  # type: ignore[attr-defined]
        return f"failed: {cause}"
    return f"failed: the operation closed as {status.name if status else 'unknown'}"


def _runs(dpu: dict[str, Any], field: str, value: str) -> bool:
    spec = dpu.get("spec") or {}
    conditions = (dpu.get("status") or {}).get("conditions") or []
    outdated = any(c.get("type") == "Outdated" and c.get("status") == "True" for c in conditions)
    return spec.get(field) == value and not outdated and not dpu["metadata"].get("deletionTimestamp")


def _body(one: HostRequestInput) -> tuple[str, OperationRequest | FirmwareRequest]:
    tags: dict[str, Any] = {
        "requested_by": one.requested_by,
        "campaign": one.campaign,
        "campaign_workflow_id": one.campaign_workflow_id,
        "refuse_if_assigned": one.refuse_if_assigned,
    }
    if one.target.kind == TargetKind.FIRMWARE:
        body = FirmwareRequest(target_version=one.target.value, image_uri=one.target.image_uri, **tags)
        return REQUEST_FIRMWARE_UPDATE, body
    reason = one.reason or f"campaign {one.campaign}: {one.target.describe()}"
    return REQUEST_REPROVISION_UPDATE, OperationRequest(reason=reason, policy=one.host_policy, **tags)
