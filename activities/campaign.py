"""The campaign's I/O: select hosts from the inventory, check which already run the target, ask
each host's entity for the operation, sweep in-flight hosts, abort running operations.

A workflow cannot send an update (the Python SDK's external handle offers signal and cancel), so
the requests to `host/<id>` go through the worker's Temporal client here, as an update-with-start
(the entity is created on first use, like `metalflow host ...` does). The entity decides, as for
any operator: busy, assigned (when the campaign skips assigned hosts) or awaiting approval.

A retried `request_campaign_hosts` attempt never asks a host twice: before asking, it reads the
entity's status and reports an operation this campaign already asked for (current or recent) as
started. Cost per host: one update (plus one query on a retried attempt); per sweep two queries
per in-flight host (its entity, then its operation's phase: one waiting for an operator is
reported); selection reads the site file once (or lists the DPUNodes once).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.dpf.kube import DPU, DPUNODE, Kube
from activities.inventory import Inventory
from metalflow import names
from metalflow.errors import InvalidInput
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
    FirmwareRequest,
    HostStatus,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
    OperatorRequest,
)
from metalflow.models.inventory import HostInventory

UPDATE_TIMEOUT = timedelta(seconds=60)
PARALLEL_REQUESTS = 20  # updates in flight at once from one activity
BUSY, ASSIGNED = "HostBusy", "InstanceConflict"  # the entity's error types (workflows/host.py)


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
    """Holds the worker's inventory, Kubernetes client and Temporal client."""

    def __init__(self, inventory: Inventory, kube: Kube, temporal: Client) -> None:
        self.inventory = inventory
        self.kube = kube
        self.temporal = temporal

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
        """Hosts whose every DPU already runs the target BFB or flavor and is not Outdated."""
        target = request.target
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

    # -- requests -----------------------------------------------------------------------------------
    @activity.defn(name="request_campaign_hosts")
    async def request_campaign_hosts(self, request: HostRequestsInput) -> HostRequestsResult:
        """Ask every host's entity (at most PARALLEL_REQUESTS at once); one outcome per host."""
        retried = activity.info().attempt > 1
        gate = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def ask(one: HostRequestInput) -> HostRequestOutcome:
            async with gate:
                if retried and (earlier := await self._asked_before(one)) is not None:
                    return earlier
                return await self._ask(one)

        outcomes = await asyncio.gather(*(ask(one) for one in request.requests))
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
            return HostRequestOutcome(host_id=one.host_id, outcome=outcome, message=message)
        return HostRequestOutcome(
            host_id=one.host_id,
            outcome="awaiting-approval" if answer.awaiting_approval else "started",
            workflow_id=answer.workflow_id,
            message=answer.message,
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

    async def _status(self, host_id: str) -> HostStatus | None:
        handle = self.temporal.get_workflow_handle(names.host_workflow_id(host_id))
        try:
            status: HostStatus = await handle.query(STATUS_QUERY, result_type=HostStatus)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return status

    # -- sweep and abort ----------------------------------------------------------------------------
    @activity.defn(name="sweep_campaign_hosts")
    async def sweep_campaign_hosts(self, request: SweepInput) -> SweepResult:
        """Operations the entities no longer run (their outcome from the entity's recent records),
        and running ones that wait for an operator (Phase `manual-intervention-required`)."""
        finished, needs_operator = [], []
        for flight in request.in_flight:
            status = await self._status(flight.host.host_id)
            if status is not None and status.current and status.current.workflow_id == flight.workflow_id:
                if not flight.awaiting_approval and (why := await self._operator_needed(flight.workflow_id)):
                    needs_operator.append(Failure(host=flight.host, reason=f"needs an operator: {why}"))
                continue
            outcome = "failed: the host's entity has no record of the operation"
            if status is not None:
                for record in reversed(status.recent):
                    if record.workflow_id == flight.workflow_id and (
                        record.requested_at is None or record.requested_at >= flight.started_at
                        or record.finished_at is None or record.finished_at >= flight.started_at
                    ):  # fmt: skip
                        outcome = record.outcome
                        break
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

    @activity.defn(name="abort_campaign_hosts")
    async def abort_campaign_hosts(self, request: AbortHostsInput) -> None:
        """Send `abort` to each operation; one that already ended or refuses is left as it is."""
        body = OperatorRequest(requested_by=request.requested_by, reason=request.reason)
        for workflow_id in request.workflow_ids:
            handle = self.temporal.get_workflow_handle(workflow_id)
            try:
                await handle.execute_update(ABORT_UPDATE, body)
            except (WorkflowUpdateFailedError, RPCError) as err:
                activity.logger.info("abort of %s not sent: %s", workflow_id, err)


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
