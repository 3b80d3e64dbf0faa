"""The DPF watcher: follows one host's DPUs, DPUNode and hold, and signals the workflow that
started it (`DPF_STATE_CHANGED_SIGNAL`, payload `HostDPFState`) on every change that matters.

Superseded by the site watch (`activities.site_watch`: one watch per site, not per host); kept
registered for runs started before it (their histories schedule this activity) and for runs
under ids the site watch does not route to (see `workflows.dpf_watch`).

Three watch streams, selected on the server so the watcher sees only its host:
- DPUs: label `provisioning.dpu.nvidia.com/dpunode-name=node-<host>` (DPF labels every DPU it
  creates); `spec.dpuNodeName` is checked again on arrival (CRDs offer no field selector on spec).
- DPUNode: field selector `metadata.name=node-<host>`.
- DPUNodeMaintenance: field selector `metadata.name=node-<host>-hold` (the hold of DOMAIN.md).

A change matters when the state workflows decide on changes (`HostDPFState` without its
sequence number): a DPU's phase, uid or deletion, any condition's status, reason or message, the
reboot-required and hold annotations, an object appearing or going. A write that changes only
the resourceVersion, managedFields or other fields produces no signal. Events that arrive
together are folded into one signal. The first state is signalled once all three streams have
been listed, so a workflow never misses what happened before the watcher started.

Each stream resumes from its last resourceVersion (kept in heartbeat details, so a retried
attempt resumes too), reconnects at once when the server ends or drops a stream, lists again on
410 Gone, and retries a failing API briefly; past that it fails with `KubernetesUnavailable`
(retryable: the workflow keeps its state and the next attempt resumes). It runs until cancelled
(the workflow cancels it when done) or until the workflow is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import httpx
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.handover import handing_over_at_shutdown
from activities.heartbeat import HeartbeatGate, stop_quietly_if_workflow_ended
from contracts import metrics
from contracts.errors import InvalidInput, KubernetesUnavailable
from contracts.models.dpf import (
    DPF_STATE_CHANGED_SIGNAL,
    DPUNODE_NAME_LABEL,
    HOLD_ANNOTATION,
    REBOOT_REQUIRED_ANNOTATION,
    HostDPFState,
    HostRef,
    WatchCheckpoint,
    WatchHostInput,
)
from drivers import dpf as states
from drivers.kube import DPU, DPUNODE, MAINTENANCE, Kind, Kube
from drivers.kube_streams import (
    OPENED,
    WatchExpired,
    WatchFailed,
    WatchRejected,
    http_client,
    list_objects,
    watch_events,
)

log = logging.getLogger(__name__)

Object = dict[str, Any]
FAILURE_BACKOFF = (0.1, 0.2, 0.5, 1.0, 2.0, 3.0)  # seconds between failed attempts of one stream


@dataclass
class _Stream:
    name: str  # "dpus", "node", "hold"
    kind: Kind
    label_selector: str = ""
    field_selector: str = ""
    resource_version: str | None = None
    listed: bool = False
    objects: dict[str, Object] = field(default_factory=dict)  # name -> last object seen


class _HostWatch:
    """The state of one watcher attempt: its streams and what it last signalled."""

    def __init__(self, host: HostRef, checkpoint: WatchCheckpoint | None) -> None:
        node = host.node_name()
        self.host = host
        self.streams = [
            _Stream("dpus", DPU, label_selector=f"{DPUNODE_NAME_LABEL}={node}"),
            _Stream("node", DPUNODE, field_selector=f"metadata.name={node}"),
            _Stream("hold", MAINTENANCE, field_selector=f"metadata.name={host.hold_name()}"),
        ]
        self.signalled: HostDPFState | None = None
        self.relists = self.reconnects = 0
        self.changed = asyncio.Event()
        if checkpoint is not None and checkpoint.state is not None:
            self.signalled = checkpoint.state
            self.relists, self.reconnects = checkpoint.relists, checkpoint.reconnects
            for stream in self.streams:
                stream.resource_version = checkpoint.resource_versions.get(stream.name)
                stream.listed = stream.resource_version is not None
            self._restore(checkpoint.state)

    def _restore(self, state: HostDPFState) -> None:
        # The objects are rebuilt from the signalled state in the shape `states` reads back.
        def conds(cs: Any) -> list[Object]:
            return [c.model_dump() for c in cs]

        by_name = {s.name: s for s in self.streams}
        for dpu in state.dpus:
            meta: Object = {"name": dpu.name, "uid": dpu.uid}
            if dpu.deleting:
                meta["deletionTimestamp"] = "restored"
            by_name["dpus"].objects[dpu.name] = {
                "metadata": meta,
                "spec": {"dpuNodeName": self.host.node_name(), "bfb": dpu.bfb,
                         "dpuDeviceName": f"device-{dpu.dpu_id}" if dpu.dpu_id else ""},
                "status": {"phase": dpu.phase, "conditions": conds(dpu.conditions)},
            }  # fmt: skip
        if state.node is not None:
            n = state.node
            annotations = {} if n.reboot_required is None else {REBOOT_REQUIRED_ANNOTATION: n.reboot_required}
            meta = {"name": n.name, "uid": n.uid, "annotations": annotations}
            if n.deleting:
                meta["deletionTimestamp"] = "restored"
            status = {"conditions": conds(n.conditions)}
            by_name["node"].objects[n.name] = {"metadata": meta, "status": status}
        if state.hold is not None:
            h = state.hold
            annotations = {} if h.hold is None else {HOLD_ANNOTATION: h.hold}
            by_name["hold"].objects[h.name] = {
                "metadata": {"name": h.name, "annotations": annotations},
                "status": {"conditions": conds(h.conditions)},
            }

    @property
    def ready(self) -> bool:
        return all(s.listed for s in self.streams)

    def state(self) -> HostDPFState:
        by_name = {s.name: s for s in self.streams}
        node = next(iter(by_name["node"].objects.values()), None)
        hold = next(iter(by_name["hold"].objects.values()), None)
        return states.host_state(self.host.host_id, node, list(by_name["dpus"].objects.values()), hold)

    def checkpoint(self) -> WatchCheckpoint:
        versions = {s.name: s.resource_version for s in self.streams if s.resource_version and s.listed}
        return WatchCheckpoint(resource_versions=versions, state=self.signalled, relists=self.relists,
                               reconnects=self.reconnects)  # fmt: skip


class WatcherActivities:
    """The watcher activity; holds the Temporal client it signals with and the Kubernetes settings."""

    def __init__(self, kube: Kube, temporal: Client) -> None:
        self.kube = kube
        self.temporal = temporal

    @activity.defn(name="watch_host_dpf")
    async def watch_host_dpf(self, request: WatchHostInput) -> None:
        """Follow one host's DPF objects and signal every change; see the module docstring.

        Raises:
            KubernetesUnavailable: The API server could not be reached for a while (retryable).
            InvalidInput: The API server refused the watch for good (RBAC, a bad namespace).
            ApplicationError: `WorkerStopping` (retryable, BENIGN) when the worker begins a graceful
                shutdown: the next attempt resumes at once elsewhere (`activities.handover`).
        """
        try:
            await handing_over_at_shutdown(self._watch(request), "watcher")
        except asyncio.CancelledError:
            stop_quietly_if_workflow_ended("watcher")
            raise

    async def _watch(self, request: WatchHostInput) -> None:
        info = activity.info()
        checkpoint = request.resume_from
        if info.heartbeat_details:
            checkpoint = WatchCheckpoint.model_validate(info.heartbeat_details[0])
        watch = _HostWatch(request.host, checkpoint)
        # A new checkpoint goes out at once; an unchanged one as often as the SDK's default
        # throttle sent it (0.8 x the heartbeat timeout), not every `heartbeat_seconds` under the
        # worker's short throttle: a run older than the site watch holds one watcher per host.
        timeout = info.heartbeat_timeout
        beat = HeartbeatGate(interval=None if timeout is None else 0.8 * timeout.total_seconds())
        handle = self.temporal.get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        configuration = self.kube.configuration
        async with http_client(configuration) as http:
            tasks = [asyncio.create_task(self._follow(http, watch, s)) for s in watch.streams]
            try:
                while True:
                    # `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` drops a cancel
                    # that lands as the event fires, and the activity would never see its cancel.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(request.heartbeat_seconds):
                            await watch.changed.wait()
                    watch.changed.clear()
                    for task in tasks:
                        if task.done():
                            task.result()  # a stream gave up: raise its error
                    if watch.ready:
                        current = watch.state()
                        if watch.signalled is None or current.content() != watch.signalled.content():
                            sequence = (watch.signalled.sequence if watch.signalled else 0) + 1
                            current = current.model_copy(update={"sequence": sequence})
                            try:
                                await handle.signal(DPF_STATE_CHANGED_SIGNAL, current)
                            except RPCError as err:
                                if err.status == RPCStatusCode.NOT_FOUND:
                                    log.info("workflow %s is gone; watcher ends", info.workflow_id)
                                    return
                                raise
                            watch.signalled = current
                    beat(watch.checkpoint())
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, http: httpx.AsyncClient, watch: _HostWatch, stream: _Stream) -> None:
        ns, configuration = watch.host.namespace, self.kube.configuration
        failures = 0
        while True:
            try:
                if stream.resource_version is None or not stream.listed:
                    async with self.kube.limit(watch.host.host_id):
                        listed = await list_objects(http, configuration, stream.kind, ns,
                                                    label_selector=stream.label_selector,
                                                    field_selector=stream.field_selector)  # fmt: skip
                    stream.objects = {o["metadata"]["name"]: o for o in listed.get("items") or []}
                    stream.resource_version = str(listed["metadata"]["resourceVersion"])
                    stream.listed = True
                    watch.changed.set()
                async for event in watch_events(
                    http, configuration, stream.kind, ns, resource_version=stream.resource_version,
                    label_selector=stream.label_selector, field_selector=stream.field_selector,
                ):  # fmt: skip
                    failures = 0
                    if event.get("type") == OPENED:
                        continue
                    obj = event.get("object") or {}
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        stream.objects[obj["metadata"]["name"]] = obj
                    elif event.get("type") == "DELETED":
                        stream.objects.pop(obj["metadata"]["name"], None)
                    if version:
                        stream.resource_version = str(version)
                    if event.get("type") != "BOOKMARK":
                        watch.changed.set()
                watch.reconnects += 1  # the server ended the stream: resume where it stopped
                metrics.activity_dpf_watch_reconnect()
            except WatchExpired:
                log.info("watch of %s for %s expired (410); listing again", stream.name, watch.host.host_id)
                watch.relists += 1
                stream.listed = False
            except WatchRejected as err:
                raise InvalidInput(f"the API server refused to watch {stream.kind.kind}: {err}") from None
            except WatchFailed as err:
                if failures >= len(FAILURE_BACKOFF):
                    raise KubernetesUnavailable(
                        f"cannot keep the watch of {stream.kind.kind} for host {watch.host.host_id}: {err}"
                    ) from None
                await asyncio.sleep(FAILURE_BACKOFF[failures])
                failures += 1
                watch.reconnects += 1
                metrics.activity_dpf_watch_reconnect()
