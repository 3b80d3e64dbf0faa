"""The rollout watcher: follows one PodCliqueSet and its PodGangs, and signals the rollout
workflow that started it (`PCS_STATE_CHANGED_SIGNAL`, payload `PCSState`) on every change that
matters.

One per rollout, two watch streams selected on the server: the PodCliqueSet (field selector
`metadata.name=<pcs>`) and its PodGangs (label `app.kubernetes.io/part-of=<pcs>`). A change
matters when `PCSState` without its sequence number changes (a gang's hash, uid, Available or
Ready, the PCS's generation, observed generation, hash, shape or images); status-only churn
(timestamps, resourceVersions) sends nothing. The first state is signalled once both streams
are listed. A retried attempt lists afresh (the state it signals is current, numbered after
the last one it heartbeated), reconnects when a stream ends, lists again on 410 Gone.

Cost per rollout: one activity slot for its duration, two open watch connections, one signal
(O(PodGangs) payload) per change that matters: about two per PodGang rolled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from temporalio import activity

from activities.handover import handing_over_at_shutdown
from activities.heartbeat import stop_quietly_if_workflow_ended
from contracts.errors import InvalidInput, KubernetesUnavailable
from contracts.models.grove import PART_OF_LABEL, PCS_STATE_CHANGED_SIGNAL, PCSState, WatchPCSInput
from drivers.grove import kinds, pcs_state

if TYPE_CHECKING:
    import httpx
    from temporalio.client import Client

    from drivers.kube import Kind, Kube

Object = dict[str, Any]
log = logging.getLogger(__name__)
FAILURE_BACKOFF = (0.1, 0.2, 0.5, 1.0, 2.0, 3.0)


class _Stream:
    def __init__(self, kind: Kind, *, label_selector: str = "", field_selector: str = "") -> None:
        self.kind = kind
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resource_version: str | None = None
        self.objects: dict[str, Object] = {}
        self.listed = False


class RolloutWatcherActivities:
    """The watcher activity; holds the Temporal client it signals with and the Kubernetes client."""

    def __init__(self, kube: Kube, temporal: Client) -> None:
        self.kube = kube
        self.temporal = temporal

    @activity.defn(name="watch_pcs")
    async def watch_pcs(self, request: WatchPCSInput) -> None:
        """Follow one PodCliqueSet and its PodGangs and signal every change; see the module docstring.

        Raises:
            KubernetesUnavailable: The API server could not be reached for a while (retryable).
            InvalidInput: The API server refused the watch for good.
            ApplicationError: `WorkerStopping` (retryable, BENIGN) when the worker begins a graceful
                shutdown: the next attempt resumes at once elsewhere (`activities.handover`).
        """
        try:
            await handing_over_at_shutdown(self._watch(request), "rollout watcher")
        except asyncio.CancelledError:
            stop_quietly_if_workflow_ended("rollout watcher")
            raise

    async def _watch(self, request: WatchPCSInput) -> None:
        # Imported here: workflows reference this activity, and must not load the HTTP client.
        from temporalio.service import RPCError, RPCStatusCode

        from drivers.kube_streams import http_client

        info = activity.info()
        sequence = int(info.heartbeat_details[0]) if info.heartbeat_details else 0
        pcs = request.pcs
        streams = [
            _Stream(kinds()[0], field_selector=f"metadata.name={pcs.name}"),
            _Stream(kinds()[1], label_selector=f"{PART_OF_LABEL}={pcs.name}"),
        ]
        changed = asyncio.Event()
        handle = self.temporal.get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        signalled: PCSState | None = None
        async with http_client(self.kube.configuration) as http:
            tasks = [asyncio.create_task(self._follow(http, pcs.namespace, s, changed)) for s in streams]
            try:
                while True:
                    # `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` drops a cancel
                    # that lands as the event fires, and the activity would never see its cancel.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(request.heartbeat_seconds):
                            await changed.wait()
                    changed.clear()
                    for task in tasks:
                        if task.done():
                            task.result()
                    if all(s.listed for s in streams):
                        found = next(iter(streams[0].objects.values()), None)
                        state = pcs_state(pcs.namespace, pcs.name, found, list(streams[1].objects.values()))
                        if signalled is None or state != signalled.model_copy(update={"sequence": 0}):
                            sequence += 1
                            try:
                                await handle.signal(
                                    PCS_STATE_CHANGED_SIGNAL,
                                    state.model_copy(update={"sequence": sequence, "attempt": info.attempt}),
                                )
                            except RPCError as err:
                                if err.status == RPCStatusCode.NOT_FOUND:
                                    log.info("workflow %s is gone; rollout watcher ends", info.workflow_id)
                                    return
                                raise
                            signalled = state
                    activity.heartbeat(sequence)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(
        self, http: httpx.AsyncClient, ns: str, stream: _Stream, changed: asyncio.Event
    ) -> None:
        from drivers.kube_streams import (
            OPENED,
            WatchExpired,
            WatchFailed,
            WatchRejected,
            list_objects,
            watch_events,
        )

        configuration, failures = self.kube.configuration, 0
        while True:
            try:
                if not stream.listed:
                    listed = await list_objects(
                        http,
                        configuration,
                        stream.kind,
                        ns,
                        label_selector=stream.label_selector,
                        field_selector=stream.field_selector,
                    )
                    stream.objects = {o["metadata"]["name"]: o for o in listed.get("items") or []}
                    stream.resource_version = str(listed["metadata"]["resourceVersion"])
                    stream.listed = True
                    changed.set()
                async for event in watch_events(
                    http,
                    configuration,
                    stream.kind,
                    ns,
                    resource_version=stream.resource_version or "",
                    label_selector=stream.label_selector,
                    field_selector=stream.field_selector,
                ):
                    failures = 0
                    if event.get("type") == OPENED:
                        continue
                    obj = event.get("object") or {}
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        stream.objects[obj["metadata"]["name"]] = obj
                    elif event.get("type") == "DELETED":
                        stream.objects.pop(obj["metadata"]["name"], None)
                    if version := (obj.get("metadata") or {}).get("resourceVersion"):
                        stream.resource_version = str(version)
                    if event.get("type") != "BOOKMARK":
                        changed.set()
            except WatchExpired:
                stream.listed = False
            except WatchRejected as err:
                raise InvalidInput(f"the API server refused to watch {stream.kind.kind}: {err}") from None
            except WatchFailed as err:
                if failures >= len(FAILURE_BACKOFF):
                    raise KubernetesUnavailable(
                        f"cannot keep the watch of {stream.kind.kind} in {ns}: {err}"
                    ) from None
                await asyncio.sleep(FAILURE_BACKOFF[failures])
                failures += 1
