"""The campaign's I/O, one activity class over five modules: here `CampaignActivities` and the
requests (ask each host's entity for the operation); activities/campaign_select.py, the
selection and the at-target check; activities/campaign_sweep.py, the sweep of in-flight hosts
and the abort of running operations; activities/campaign_deploy.py, the DPUDeployments a BFB or
flavor campaign points; activities/campaign_claims.py, the claims of one campaign per host.

A workflow cannot send an update (the Python SDK's external handle offers signal and cancel), so
the requests to `host/<id>` go through the worker's Temporal client here, by the entity's one
client (`contracts.host_entity.HostEntityClient`): an update-with-start, so the entity is created
on first use on the worker's queue, like `metalflow host ...` does. The entity decides, as for any
operator: busy (`HostBusy`), assigned (`InstanceConflict`, when the campaign skips assigned hosts)
or awaiting approval; its refusals are told apart by their error type.

A retried `request_campaign_hosts` attempt never asks a host twice: before asking, it reads the
entity's status and reports an operation this campaign already asked for (current or recent) as
started. The campaign's ask is recognised by its request id (`HostRequestInput.request_id`,
recorded by the entity with the operation), never by the requester's words, which another
campaign of the same name, or a person, may also use. Cost per host: one update (plus one query
on a retried attempt); the sweep's, abort's and selection's costs are in their modules'
docstrings.

Traces: each host's ask is the root of a trace of its own (`RequestHostOperation`, with the host,
the campaign and the operation as attributes), linked to this activity's span in the campaign's
trace; the entity's update-with-start carries it, so the host's operation, its activities and their
Redfish and Kubernetes requests fall in the host's trace, not the campaign's (at 10,000 hosts one
campaign trace would hold ~500k spans, more than a tracing backend shows). Cost: one span per host
ask while tracing is on; with tracing off the tracer is OpenTelemetry's no-op one.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, assert_never

from opentelemetry import context as otel_context
from opentelemetry import trace
from temporalio import activity
from temporalio.client import Client, RPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from activities.campaign_claims import CampaignClaims
from activities.campaign_deploy import CampaignDeployments
from activities.campaign_select import PARALLEL_REQUESTS, CampaignSelection
from activities.campaign_sweep import CampaignSweep
from activities.heartbeat import heartbeating
from contracts.errors import AutomationHeldBack, HostBusy, InMaintenance, InstanceConflict
from contracts.host_entity import EntityRefused
from contracts.models.campaign import (
    HostRequestInput,
    HostRequestOutcome,
    HostRequestsInput,
    HostRequestsResult,
)
from contracts.models.host import FirmwareRequest, HostWorkflowInput, OperationAccepted, OperationRequest
from contracts.workflow_api import HostWorkflow
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.redfish.client import RedfishClient

UPDATE_TIMEOUT = timedelta(seconds=60)
STATUS_TIMEOUT = timedelta(seconds=10)  # the entity's status, read after an ask went unanswered
ABORT_GRACE_SECONDS = 3.0  # after an abort, how long the asks under way may still answer
REFUSALS = {  # else "refused"
    HostBusy.__name__: "busy",
    InstanceConflict.__name__: "assigned",
    InMaintenance.__name__: "maintenance",
    AutomationHeldBack.__name__: "held-back",  # an operator said no to automation on the host: skipped
}
HOST_REQUEST_SPAN = "RequestHostOperation"  # the root span of a host operation's trace
_tracer = trace.get_tracer("metalflow.campaign")  # the global provider's, once tracing is set up


class CampaignActivities(CampaignSelection, CampaignSweep, CampaignDeployments, CampaignClaims):
    """Holds the worker's inventory, Kubernetes, Temporal and Redfish clients."""

    def __init__(
        self, inventory: Inventory, kube: Kube, temporal: Client, redfish: RedfishClient | None = None
    ) -> None:
        self.inventory = inventory
        self.kube = kube
        self.temporal = temporal
        self.redfish = redfish  # the worker's one client: firmware campaigns read DPU versions

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
        asking = trace.get_current_span().get_span_context()  # this activity's span, if traced

        async def ask(one: HostRequestInput) -> HostRequestOutcome:
            async with gate:
                if stop.is_set():
                    return HostRequestOutcome(host_id=one.host_id, outcome="not-asked")
                with _host_trace(one, asking):
                    return await asked(one)

        async def asked(one: HostRequestInput) -> HostRequestOutcome:
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
        try:
            answer = await self._request(one)
        except EntityRefused as refused:
            outcome = REFUSALS.get(refused.kind or "", "refused")
            if outcome == "busy" and (ours := await self._in_flight_for(one)) is not None:
                return ours  # busy with this campaign's own request (an earlier unanswered ask)
            return HostRequestOutcome(host_id=one.host_id, outcome=outcome, message=str(refused))
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
        """The entity's operation in flight when this campaign asked for it (its request id)."""
        status = await self.entities().status(one.host_id, rpc_timeout=STATUS_TIMEOUT)
        current = status.current if status is not None else None
        if current is None or current.request_id != one.request_id:
            return None
        return HostRequestOutcome(
            host_id=one.host_id,
            outcome="awaiting-approval" if current.outcome == "awaiting-approval" else "started",
            workflow_id=current.workflow_id,
            message="asked earlier: its entity took the request",
        )

    async def _asked_before(self, one: HostRequestInput) -> HostRequestOutcome | None:
        status = await self.entities().status(one.host_id)
        if status is None:
            return None
        records = ([status.current] if status.current else []) + list(reversed(status.recent))
        for record in records:
            if record.request_id == one.request_id:
                outcome = "awaiting-approval" if record.outcome == "awaiting-approval" else "started"
                return HostRequestOutcome(
                    host_id=one.host_id,
                    outcome=outcome,
                    workflow_id=record.workflow_id,
                    message="asked by an earlier attempt",
                )
        return None

    async def _request(self, one: HostRequestInput) -> OperationAccepted:
        """Ask the host's entity for the target kind's request (`KindSpec.request`: a firmware
        update or a reprovision), starting the entity when none runs. An entity nobody serves
        fails the ask after UPDATE_TIMEOUT (the caller puts the host off)."""
        entity = HostWorkflowInput(host_id=one.host_id, site=one.site)
        tags: dict[str, Any] = {
            "requested_by": one.requested_by,
            "campaign": one.campaign,
            "campaign_workflow_id": one.campaign_workflow_id,
            "refuse_if_assigned": one.refuse_if_assigned,
            "request_id": one.request_id,
            "site_check": one.site_check,  # degraded by the kept site check: its status and Event say it
        }
        match one.target.spec.request:
            case "firmware":
                firmware = FirmwareRequest(
                    target_version=one.target.value, image_uri=one.target.image_uri, **tags
                )
                return await self.entities().ask(
                    entity, HostWorkflow.request_firmware_update, firmware, rpc_timeout=UPDATE_TIMEOUT
                )
            case "reprovision":
                reason = one.reason or f"campaign {one.campaign}: {one.target.describe()}"
                reprovision = OperationRequest(reason=reason, policy=one.host_policy, **tags)
                return await self.entities().ask(
                    entity, HostWorkflow.request_reprovision, reprovision, rpc_timeout=UPDATE_TIMEOUT
                )
            case unknown:
                assert_never(unknown)


def _host_trace(one: HostRequestInput, asking: trace.SpanContext) -> AbstractContextManager[trace.Span]:
    """A new trace for the host's operation: its root span, current for the block, linked to the
    campaign activity's span `asking` (no link when the activity is not traced)."""
    return _tracer.start_as_current_span(
        HOST_REQUEST_SPAN,
        context=otel_context.Context(),  # no parent: a trace of its own
        kind=trace.SpanKind.CLIENT,
        links=[trace.Link(asking)] if asking.is_valid else [],
        attributes={
            "metalflow.host_id": one.host_id,
            "metalflow.campaign": one.campaign,
            "metalflow.campaign_workflow_id": one.campaign_workflow_id,
            "metalflow.target": one.target.kind.value,  # reprovision, bfb, flavor or firmware
        },
    )
