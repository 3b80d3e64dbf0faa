"""Client side of a host's monitor (`monitor/host-<id>`, `HostMonitorWorkflow`, flow 5): start it
once, read its status and policy, stop it. Used by `metalflow host monitor` and `host status`.

A monitor is started directly, not through the host's entity: it is not an operation (it never
holds the host) and runs beside them. It asks the entity for reprovisions itself, so the
entity's gates (one operation at a time, approval on an assigned host) still decide.

Priority. A monitor runs at Temporal task priority `MONITOR_PRIORITY` (4; unset is 3, what every
other metalflow workflow runs at), inherited by its activities and by every run it continues as
new. Why: a monitor's work is background, an operation's is not. 10,000 monitors started at
once leave 10,000 first workflow tasks, joins (1 describe + 3 lists each) and pool label writes
in the one task queue; at one worker's pace that backlog lasts many minutes, and a reboot asked
meanwhile waited behind all of it (bench/README.md, 10,000 monitors). The matching service keeps a
sub-queue per priority and serves a lower key first, so an operation's tasks pass the backlog;
when nothing is backlogged the key changes nothing. Cost: none per host (a field of the start
request; no queue, worker, poller or history event more). The other side: while operations
keep the queue backlogged, monitors' reactions (a pool label after a DPU's services fall) wait
for them. The dev server (Temporal 1.32) honours the key as is; a server without the priority
matcher (older, or `matching.useNewMatcher` off) ignores it, and monitors then share FIFO order
with operations as before. A monitor started before this kept priority 3 (it still works; it
only does not yield), also across continue-as-new: stop and start it to move it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    QueryRejectCondition,
    SearchAttributePair,
    TypedSearchAttributes,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from contracts import names, priorities, workflow_api
from contracts.host_entity import HostEntityClient, start_unless_running
from contracts.models.control import ABORT_UPDATE, STATUS_QUERY, OperatorAnswer, OperatorRequest
from contracts.models.host import RELEASE_AUTOMATION_UPDATE
from contracts.models.monitor import (
    RESUME_UPDATE,
    HostMonitorInput,
    HostMonitorResult,
    HostMonitorStatus,
    MonitorPolicy,
)
from contracts.with_start import NotAccepted, execute_update
from metalflow.client import no_worker_polls
from metalflow.hosts import (
    ACCEPT_WITHIN,
    COULD_NOT_ASK,
    NOTHING_SENT,
    QUERY_TIMEOUT,
    HostRequestError,
    not_taken,
    send_update,
)
from metalflow.site_name import entity_input

LOOK_POLL_SECONDS = 0.2
# Below the default (3) that operations run at: see the module docstring and `contracts.priorities`.
MONITOR_PRIORITY = priorities.MONITOR_PRIORITY


def describe_policy(policy: MonitorPolicy) -> str:
    """The policy in words: when the monitor asks for a reprovision, if ever."""
    if not policy.auto_reprovision:
        return "automatic reprovision off"
    return (
        f"reprovision after {policy.reprovision_after_seconds:g} s in Node Effect; after an "
        f"operator's abort, none for {policy.hold_back_seconds:g} s"
    )


async def start_monitor(
    client: Client, request: HostMonitorInput, task_queue: str = names.TASK_QUEUE
) -> bool:
    """Start the host's monitor unless one runs (never a second one).

    Returns:
        True when this call started it, False when one was running already.
    """
    return await start_unless_running(
        client,
        workflow_api.HostMonitorWorkflow.run,
        request,
        id=names.monitor_workflow_id(request.host_id),
        task_queue=task_queue,
        priority=MONITOR_PRIORITY,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(names.HOST_ID, request.host_id),
                SearchAttributePair(names.OPERATION, names.MONITOR),
                SearchAttributePair(names.SITE, request.site),
            ]
        ),
        static_summary=f"monitor of host {request.host_id}: out of the pool while a DPU's services are "
        f"down; {describe_policy(request.policy)} (started by {request.requested_by})",
    )


async def monitor_status(client: Client, host_id: str) -> HostMonitorStatus:
    """The running monitor's `status` query.

    Raises:
        HostRequestError: No monitor runs for the host (never started, or ended).
    """
    handle = _handle(client, host_id)
    try:
        status: HostMonitorStatus = await handle.query(
            STATUS_QUERY,
            result_type=HostMonitorStatus,
            reject_condition=QueryRejectCondition.NOT_OPEN,
            rpc_timeout=QUERY_TIMEOUT,
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise HostRequestError(_none_runs(host_id, "no monitor was ever started")) from None
        if err.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED) or no_worker_polls(err):
            raise HostRequestError(
                f"the monitor of {host_id} did not answer within {QUERY_TIMEOUT.total_seconds():g} s "
                f"(no worker serves it, or its worker is stuck). {NOTHING_SENT}",
                status=COULD_NOT_ASK,
            ) from None
        raise
    except WorkflowQueryRejectedError as err:
        ended = err.status.name.lower() if err.status is not None else "closed"
        raise HostRequestError(_none_runs(host_id, f"the last one ended: {ended}")) from None
    return status


async def running_monitor_status(client: Client, host_id: str) -> HostMonitorStatus | None:
    """The monitor's status when one runs and answers; None otherwise (for `host status`)."""
    try:
        return await monitor_status(client, host_id)
    except (HostRequestError, RPCError, WorkflowQueryFailedError):
        return None


async def first_look(client: Client, host_id: str, timeout: float) -> HostMonitorStatus | None:
    """The monitor's status once it has seen DPF's state at least once; None past `timeout`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            status = await monitor_status(client, host_id)
        except WorkflowQueryFailedError:
            status = None  # not initialised yet: ask again
        if status is not None and status.events_seen > 0:
            return status
        if asyncio.get_running_loop().time() > deadline:
            return None
        await asyncio.sleep(LOOK_POLL_SECONDS)


async def monitor_policy(client: Client, host_id: str) -> MonitorPolicy | None:
    """The policy the current run was started with (from its first history event), if readable."""
    async for event in _handle(client, host_id).fetch_history_events(page_size=1):
        attributes = event.workflow_execution_started_event_attributes
        if not attributes.input.payloads:
            return None
        [request] = await client.data_converter.decode(attributes.input.payloads, [HostMonitorInput])
        return request.policy if isinstance(request, HostMonitorInput) else None
    return None


async def stop_monitor(client: Client, host_id: str, request: OperatorRequest) -> HostMonitorResult:
    """Send `abort` and wait for the monitor's end (one last look at DPF, the label set as it is).

    Raises:
        HostRequestError: No monitor runs for the host.
    """
    handle = _handle(client, host_id)
    try:
        await execute_update(
            handle, ABORT_UPDATE, request, result_type=OperatorAnswer, accept_within=ACCEPT_WITHIN
        )
    except NotAccepted as err:
        raise not_taken(host_id, handle.id, ABORT_UPDATE, names.TASK_QUEUE, err.seconds) from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise HostRequestError(_none_runs(host_id, "nothing to stop")) from None
        raise
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        raise HostRequestError(cause.message if isinstance(cause, ApplicationError) else str(cause)) from None
    ended: WorkflowHandle[Any, HostMonitorResult] = client.get_workflow_handle(
        handle.id, result_type=HostMonitorResult
    )
    return await ended.result()


async def resume_monitor(
    client: Client, host_id: str, request: OperatorRequest, task_queue: str = names.TASK_QUEUE
) -> OperatorAnswer:
    """Send `resume`: the monitor ends its hold-back after an operator's abort; and the host's
    entity ends its hold on automation (`release_automation`, the same as `host retry` of the
    idle host), which a monitor restarted since the abort still meets.

    Raises:
        HostRequestError: Neither the monitor nor the entity holds back (or no monitor runs and
            the entity does not hold back).
    """
    released = await _release_entity_hold(client, host_id, request, task_queue)
    try:
        answer: OperatorAnswer = await execute_update(
            _handle(client, host_id), RESUME_UPDATE, request, result_type=OperatorAnswer,
            accept_within=ACCEPT_WITHIN,
        )  # fmt: skip
    except NotAccepted as err:
        monitor = names.monitor_workflow_id(host_id)
        raise not_taken(host_id, monitor, RESUME_UPDATE, task_queue, err.seconds) from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            if released:
                return OperatorAnswer(accepted=True, message=f"no monitor runs; {released}")
            raise HostRequestError(_none_runs(host_id, "nothing to resume")) from None
        raise
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        why = cause.message if isinstance(cause, ApplicationError) else str(cause)
        if released:
            return OperatorAnswer(accepted=True, message=f"{why}; {released}")
        raise HostRequestError(why) from None
    return answer if not released else OperatorAnswer(accepted=True, message=f"{answer.message}; {released}")


async def _release_entity_hold(
    client: Client, host_id: str, request: OperatorRequest, task_queue: str = names.TASK_QUEUE
) -> str:
    """The entity's hold on automation ended (its words), or "" when it holds none (or runs an
    operation: `host abort`/`retry` are that operation's). An entity ended by hand (its last run
    still says the hold) is started again, as every request does (update-with-start): the new one
    takes over the hold from its predecessor, then ends it."""
    status = await HostEntityClient(client).status(host_id)
    if status is None or status.automation_held_back is None or status.current is not None:
        return ""
    entity = entity_input(host_id)
    answer = await send_update(client, entity, RELEASE_AUTOMATION_UPDATE, request, OperatorAnswer, task_queue)
    return answer.message


def _handle(client: Client, host_id: str) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(names.monitor_workflow_id(host_id))


def _none_runs(host_id: str, why: str) -> str:
    return f"no monitor runs for host {host_id} ({why}); start one with: metalflow host monitor {host_id}"
