"""Starting the site watch, and registering a waiter with it (see `activities.site_watch`, "Starting").

Whoever creates the watch (a join's signal-with-start, or the worker at start:
`ensure_site_watch`) first reads the API server's resourceVersions and gives them as
`start_from`; the watch's first attempt resumes from them as from a checkpoint. Every workflow
reads its own state after it registered, so the first listing signals only the registered hosts
that changed since, plus each registration's welcome. One watch per namespace and task queue,
however many race to start it (`USE_EXISTING`).
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.site_watch.mirror import resource_version
from contracts import names, workflow_api
from contracts.models.dpf import (
    DPF_WAITER_SIGNAL,
    EPOCH_MEMO,
    SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
    DPFWaiter,
    SiteWatchInput,
)
from drivers.kube import DPU, DPUNODE, MAINTENANCE
from drivers.kube_streams import http_client, list_objects

SiteWatchHandle = WorkflowHandle[workflow_api.SiteDPFWatchWorkflow, None]
# A name no DPF object has: a list selecting it returns no items, only the resourceVersion.
_NO_OBJECT = "metalflow-resource-version-probe"


async def watch_epoch(handle: WorkflowHandle[Any, Any]) -> int:
    """The site watch's epoch, from its memo (a describe, served by the server alone)."""
    return await _epoch_of(await handle.describe())


async def _epoch_of(described: WorkflowExecutionDescription) -> int:
    # No memo yet: a watch just started, whose first workflow task has not run: epoch 0.
    epoch: int = await described.memo_value(EPOCH_MEMO, 0, type_hint=int)
    return epoch


async def positions_now(configuration: Any, namespace: str) -> dict[str, int]:
    """Per stream of the site watch, the resourceVersion of the API server now (3 lists that
    select nothing, so cheap at any site size)."""
    # One call per kind, written out: tests/test_deploy_static.py reads each call's kind to check
    # the worker's RBAC grants exactly what it lists.
    nothing = f"metadata.name={_NO_OBJECT}"
    async with http_client(configuration) as http:
        dpus = await list_objects(http, configuration, DPU, namespace, field_selector=nothing)
        node = await list_objects(http, configuration, DPUNODE, namespace, field_selector=nothing)
        hold = await list_objects(http, configuration, MAINTENANCE, namespace, field_selector=nothing)
    return {"dpus": resource_version(dpus), "node": resource_version(node), "hold": resource_version(hold)}


def _site_watch(temporal: Client, namespace: str, task_queue: str) -> SiteWatchHandle:
    return temporal.get_workflow_handle_for(
        workflow_api.SiteDPFWatchWorkflow.run, names.dpf_watch_workflow_id(namespace, task_queue)
    )


async def _start_site_watch(
    temporal: Client,
    configuration: Any,
    namespace: str,
    task_queue: str,
    waiter: DPFWaiter | None,
    heartbeat_timeout_seconds: float,
) -> SiteWatchHandle:
    """Start the watch (USE_EXISTING: one however many race), with `waiter` as its start signal.

    The API server's resourceVersions are read FIRST and given as `start_from`: every waiter
    reads its own state after it registered, hence after those versions."""
    start_from = await positions_now(configuration, namespace)
    signal: dict[str, Any] = {}
    if waiter is not None:
        signal = {"start_signal": DPF_WAITER_SIGNAL, "start_signal_args": [waiter]}
    return await temporal.start_workflow(
        workflow_api.SiteDPFWatchWorkflow.run,
        SiteWatchInput(
            namespace=namespace, start_from=start_from, heartbeat_timeout_seconds=heartbeat_timeout_seconds
        ),
        id=names.dpf_watch_workflow_id(namespace, task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        memo={EPOCH_MEMO: 0},
        static_summary=f"watch the DPF objects of namespace {namespace}",
        **signal,
    )


async def ensure_site_watch(
    temporal: Client,
    configuration: Any,
    namespace: str,
    task_queue: str,
    heartbeat_timeout_seconds: float = SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
) -> int:
    """Make sure the site watch of `namespace` runs (the worker at start); its epoch. A watch
    started here gets `heartbeat_timeout_seconds` (`SiteWatchInput`); a running one keeps its own.

    A running watch is described (1 RPC) and, when its watch activity runs (on some worker),
    signalled `worker_started` (1 RPC): a worker that died holding the attempt may be the one
    this worker replaces, and the watch then replaces a silent attempt within
    `SITE_WATCH_PROBE_SECONDS` instead of at its heartbeat timeout. Otherwise 3 lists and 1
    start (`_start_site_watch`).

    Raises:
        WatchFailed, WatchRejected, WatchExpired: reading the resourceVersions failed.
    """
    handle = _site_watch(temporal, namespace, task_queue)
    try:
        described = await handle.describe()
        if described.status == WorkflowExecutionStatus.RUNNING:
            if _attempt_running(described):
                await handle.signal(workflow_api.SiteDPFWatchWorkflow.worker_started)
            return await _epoch_of(described)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    handle = await _start_site_watch(
        temporal, configuration, namespace, task_queue, None, heartbeat_timeout_seconds
    )
    return await watch_epoch(handle)  # another caller's watch may have won the start


def _attempt_running(described: WorkflowExecutionDescription) -> bool:
    """The watch's activity has started on a worker (one whose death the heartbeat timeout alone
    would notice); an attempt not started yet, or waiting to retry, goes to a live worker anyway."""
    return any(
        pending.activity_type.name == "watch_site_dpf"
        and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for pending in described.raw_description.pending_activities
    )


async def register_waiter(
    temporal: Client,
    configuration: Any,
    namespace: str,
    task_queue: str,
    waiter: DPFWaiter,
    heartbeat_timeout_seconds: float = SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
) -> SiteWatchHandle:
    """Register `waiter` with the site watch of `namespace`, starting the watch if none runs.

    A running watch takes one signal RPC; when none runs (the signal answers NotFound), a
    signal-with-start (3 lists first, `_start_site_watch`): a plain signal-with-start would read
    the resourceVersions on every join.

    Raises:
        WatchFailed, WatchRejected, WatchExpired: reading the resourceVersions failed.
    """
    handle = _site_watch(temporal, namespace, task_queue)
    try:
        await handle.signal(workflow_api.SiteDPFWatchWorkflow.dpf_waiter, waiter)
        return handle
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    return await _start_site_watch(
        temporal, configuration, namespace, task_queue, waiter, heartbeat_timeout_seconds
    )
