"""The rollout watcher: follows one PodCliqueSet, its PodGangs, PodCliques, scaling groups and
pods, and signals the rollout workflow that started it (`PCS_STATE_CHANGED_SIGNAL`, payload
`PCSChange`) with what changed.

One per rollout, five watch streams selected on the server: the PodCliqueSet (field selector
`metadata.name=<pcs>`) and the rest by label `app.kubernetes.io/part-of=<pcs>` (Grove puts it
on every object it makes, pods included [L1]). Changes within `settle_seconds` go as one
signal, holding the summary only when it changed and only the PodGangs whose view (`GangState`:
pods per hash, Ready, gated) changed, plus the names of PodGangs gone; status churn that changes
no view sends nothing. The first signal of an attempt is a full listing (`full=True`). A retried
attempt lists afresh, reconnects when a stream ends; on 410 Gone it lists again, but a stream
whose watch keeps expiring waits (0.5 s doubling to 30 s) before each new list instead of
re-listing in a loop.

Cost per rollout: one activity slot for its duration, five open watch connections, one signal
per settle window in which a view changed: about 2-4 per PodGang rolled, ~250 bytes per PodGang
carried.
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
from contracts.models.grove import PART_OF_LABEL, PCS_STATE_CHANGED_SIGNAL, PCSChange, PCSState, WatchPCSInput
from drivers.grove import kinds, pcs_state

if TYPE_CHECKING:
    import httpx
    from temporalio.client import Client

    from drivers.kube import Kind, Kube

Object = dict[str, Any]
log = logging.getLogger(__name__)
FAILURE_BACKOFF = (0.1, 0.2, 0.5, 1.0, 2.0, 3.0)
RELIST_BACKOFF = (0.5, 30.0)  # first wait, cap: a watch expiring again soon after its list
RELIST_QUIET = 10.0  # a list that lasted this long resets the relist backoff


def delta(before: PCSState | None, after: PCSState) -> PCSChange | None:
    """What changed from `before` to `after` (None: nothing); a full listing without `before`."""
    if before is None:
        return PCSChange(summary=after.summary, gangs=after.gangs, full=True)
    old = {g.name: g for g in before.gangs}
    new = {g.name: g for g in after.gangs}
    changed = tuple(g for n, g in new.items() if old.get(n) != g)
    removed = tuple(sorted(set(old) - set(new)))
    summary = after.summary if after.summary != before.summary else None
    if summary is None and not changed and not removed:
        return None
    return PCSChange(summary=summary, gangs=changed, removed=removed)


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
        selector = f"{PART_OF_LABEL}={pcs.name}"
        streams = [
            _Stream(kinds()[0], field_selector=f"metadata.name={pcs.name}"),
            _Stream(kinds()[1], label_selector=selector),
            _Stream(kinds()[2], label_selector=selector),
            _Stream(kinds()[3], label_selector=selector),
            _Stream(kinds()[4], label_selector=selector),
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
                        await asyncio.sleep(request.settle_seconds)  # let a burst of changes settle
                        changed.clear()
                        state = self._state(pcs.namespace, pcs.name, streams)
                        change = delta(signalled, state)
                        if change is not None:
                            sequence += 1
                            try:
                                await handle.signal(
                                    PCS_STATE_CHANGED_SIGNAL,
                                    change.model_copy(update={"sequence": sequence, "attempt": info.attempt}),
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

    @staticmethod
    def _state(namespace: str, name: str, streams: list[_Stream]) -> PCSState:
        found = next(iter(streams[0].objects.values()), None)
        gangs, pclqs, pcsgs, pods = (list(s.objects.values()) for s in streams[1:])
        return pcs_state(namespace, name, found, gangs, pclqs, pcsgs, pods)

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
        loop = asyncio.get_running_loop()
        relist_wait, listed_at = 0.0, 0.0
        while True:
            try:
                if not stream.listed:
                    if relist_wait:
                        await asyncio.sleep(relist_wait)
                    listed_at = loop.time()
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
                # Expired again soon after a list: back off instead of re-reading in a loop.
                quiet = loop.time() - listed_at >= RELIST_QUIET
                relist_wait = (
                    0.0 if quiet else min(RELIST_BACKOFF[1], max(RELIST_BACKOFF[0], relist_wait * 2))
                )
            except WatchRejected as err:
                raise InvalidInput(f"the API server refused to watch {stream.kind.kind}: {err}") from None
            except WatchFailed as err:
                if failures >= len(FAILURE_BACKOFF):
                    raise KubernetesUnavailable(
                        f"cannot keep the watch of {stream.kind.kind} in {ns}: {err}"
                    ) from None
                await asyncio.sleep(FAILURE_BACKOFF[failures])
                failures += 1
