"""The site watch: ONE list+watch of a DPF namespace's DPUs, DPUNodes and DPUNodeMaintenances that
signals each change of a host to the workflows registered for that host.

Registration. A workflow that waits on a host's DPF objects (`workflows.parts.dpf_watch.DPFWatch`)
runs `join_site_dpf_watch`, which first registers the workflow's run for the host with the site
watch workflow (signal `dpf_waiter`; a signal-with-start when no watch runs), then reads the
host's state. The registry is that workflow's state (`workflows.site_watch.workflow`); the watch activity
learns it through a long-poll update on its own workflow (`next_waiters`), in a background task
beside its streams: the whole registry when an attempt starts (before its first flush), then each
new entry as it is added. Any workflow id can register: the routing knows no id forms.

How it routes. A change that matters (the `HostDPFState` of the host differs after the event:
phases, uids, conditions, the reboot-required and hold annotations, objects appearing or going)
marks its host dirty. A flush signals each dirty host's state (`DPF_STATE_CHANGED_SIGNAL`,
`as_of` set, `sequence` 0) to the workflow ids registered for it, by id (the run now current);
a dirty host nobody waits on is dropped, its objects stay cached. A host whose content changes
and changes back between two flushes is still signalled, so a workflow that read the state in
between learns it. A signal that answers NotFound (the workflow has closed) removes the entry
here and in the workflow (signal `dpf_waiter` with `gone`), so the registry does not grow for
ever. A workflow's `DPFWatch.stop` does not deregister: that would cost every run an activity
or an external signal, and the removal on NotFound costs one RPC at the host's next change,
which every operation on the host brings; a newer run of the same id replaces the entry anyway.

Ordering: why no change is lost between a workflow's read and its registration. Every state
carries `as_of` (`DPFVersion`): per kind, the resourceVersion up to which it holds every change
of that kind, and the watch's epoch; the workflow keeps, per kind, the newer of what it has and
what arrives, so an older signal never undoes a newer read and vice versa. The join registers
BEFORE it lists. The activity learns of the registration at some moment L, and at L (no await
between) adds the entry and marks the host dirty, so the next flush sends the host's cached
state to the new waiter (its welcome signal). Take a change C of the host:
- C before the join's list: the read holds it.
- C after the list, applied to the cache before L: the welcome signal (sent after L) holds it.
- C applied after L: it marks the host dirty after the entry exists, and the flush that takes
  that mark routes to the registry of its own moment, which holds the entry.
So every change is in the read, in the welcome signal, or in a later signal. Flushes pair each
dirty set with the registry of the same moment, and a checkpoint records the registry's
sequence number of its flush (`waiters_seq`): a new attempt or run marks dirty the hosts of the
entries newer than its checkpoint, so a welcome lost with a dead worker is sent again.

Resuming and relisting. Each attempt heartbeats a `SiteWatchCheckpoint`: per stream, the
resourceVersion up to which every change has been signalled. A retried attempt (a worker that
died) lists to rebuild its cache, then watches from the checkpoint: events up to the listing
only mark their hosts dirty (their objects are older than the listing), later ones apply. 410
Gone lists again and signals the hosts whose state differs from the cache (every host when the
cache is new). When resourceVersions go backwards (a listing or event older than what the
stream saw: the API server restarted on another store), the epoch rises, every stream lists
again, and every host whose state differs is signalled with the new epoch, which a waiting
workflow takes whole. The workflow's next run (continue-as-new) resumes from the checkpoint the
activity last reported in its poll.

Starting. Whoever creates the watch (a join's signal-with-start, or the worker at start:
`ensure_site_watch`) first reads the API server's resourceVersions and gives them as
`start_from`; the watch's first attempt resumes from them as from a checkpoint. Every workflow
reads its own state after it registered, so the first listing signals only the registered hosts
that changed since, plus each registration's welcome.

Cost per site: 3 watch streams and 3 lists at start (each relist: 3 lists), one poll update in
flight. Per change of a host: 1 signal RPC per workflow registered for it (typically 1-2: the
operation and the monitor), 1 history event in each, no events in the site watch workflow. Per
registration: the join's 1 signal RPC (plus 3 lists and a start when no watch runs), 1 signal
RPC for its welcome, and the site watch workflow's events (`workflows.site_watch.workflow`); per closed
workflow 1 NotFound answer and 1 removal signal, at its host's next change. Per relist after 410
or a restart: one signal per waiter of every host whose state differs. Worker memory: the cache
keeps each object once, slimmed to the fields a state is built from (`slim`): 103 MB measured
for 10,000 hosts x 2 DPUs with their DPUNodes (tracemalloc, real simulated objects cloned; holds
add about 1 KB per host while they exist), the registry (~420 bytes per entry), plus one
`HostDPFState` per dirty host with a waiter while a flush runs. CPU: two `HostDPFState` builds of
the host per event. One activity slot per site, not per host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.handover import handing_over_at_shutdown
from activities.heartbeat import stop_quietly_if_workflow_ended
from contracts import metrics, names, workflow_api
from contracts.errors import InvalidInput, KubernetesUnavailable
from contracts.models.dpf import (
    DPF_STATE_CHANGED_SIGNAL,
    DPF_WAITER_SIGNAL,
    DPUNODE_NAME_LABEL,
    EPOCH_MEMO,
    DPFVersion,
    DPFWaiter,
    HostDPFState,
    JoinSiteWatchInput,
    SiteWatchCheckpoint,
    SiteWatchInput,
    WaiterNews,
    WaiterPoll,
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
SIGNALS_IN_FLIGHT = 64  # concurrent signal RPCs of one flush
SIGNAL_ATTEMPTS = 4
POLL_BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)  # between failed polls for the registry
SiteWatchHandle = WorkflowHandle[workflow_api.SiteDPFWatchWorkflow, None]


async def watch_epoch(handle: WorkflowHandle[Any, Any]) -> int:
    """The site watch's epoch, from its memo (a describe, served by the server alone)."""
    return await _epoch_of(await handle.describe())


async def _epoch_of(described: WorkflowExecutionDescription) -> int:
    # No memo yet: a watch just started, whose first workflow task has not run: epoch 0.
    epoch: int = await described.memo_value(EPOCH_MEMO, 0, type_hint=int)
    return epoch


# A name no DPF object has: a list selecting it returns no items, only the resourceVersion.
_NO_OBJECT = "metalflow-resource-version-probe"


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
    return {"dpus": _rv(dpus), "node": _rv(node), "hold": _rv(hold)}


def _site_watch(temporal: Client, namespace: str, task_queue: str) -> SiteWatchHandle:
    return temporal.get_workflow_handle_for(
        workflow_api.SiteDPFWatchWorkflow.run, names.dpf_watch_workflow_id(namespace, task_queue)
    )


async def _start_site_watch(
    temporal: Client, configuration: Any, namespace: str, task_queue: str, waiter: DPFWaiter | None
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
        SiteWatchInput(namespace=namespace, start_from=start_from),
        id=names.dpf_watch_workflow_id(namespace, task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        memo={EPOCH_MEMO: 0},
        static_summary=f"watch the DPF objects of namespace {namespace}",
        **signal,
    )


async def ensure_site_watch(temporal: Client, configuration: Any, namespace: str, task_queue: str) -> int:
    """Make sure the site watch of `namespace` runs (the worker at start); its epoch.

    A running watch is only described (1 RPC); otherwise 3 lists and 1 start (`_start_site_watch`).

    Raises:
        WatchFailed, WatchRejected, WatchExpired: reading the resourceVersions failed.
    """
    handle = _site_watch(temporal, namespace, task_queue)
    try:
        described = await handle.describe()
        if described.status == WorkflowExecutionStatus.RUNNING:
            return await _epoch_of(described)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    handle = await _start_site_watch(temporal, configuration, namespace, task_queue, None)
    return await watch_epoch(handle)  # another caller's watch may have won the start


async def register_waiter(
    temporal: Client, configuration: Any, namespace: str, task_queue: str, waiter: DPFWaiter
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
    return await _start_site_watch(temporal, configuration, namespace, task_queue, waiter)


class _Restarted(Exception):
    """A stream saw resourceVersions go backwards: the API server restarted on another store."""


@dataclass
class _Stream:
    name: str  # "dpus", "node", "hold": the `DPFVersion` field it sets
    kind: Kind
    rv: int = 0  # every change up to this is in the cache
    position: int = 0  # every change up to this has been seen (and marked dirty): the checkpoint
    replay_until: int = 0  # resuming: events up to this (the listing) only mark hosts dirty
    listed: bool = False
    objects: dict[str, Object] = field(default_factory=dict)


def _rv(obj: Object) -> int:
    return int((obj.get("metadata") or {}).get("resourceVersion") or 0)


def slim(obj: Object) -> Object:
    """Only what `HostDPFState` is built from (and the routing reads), DPF v26's fields included
    (`drivers.dpf.watched`): a cached object costs about a fifth of what the API returned."""
    return states.watched(obj)


def host_of(stream: str, obj: Object) -> str | None:
    """The host an object belongs to: DPUNode `node-<host>`, hold `node-<host>-hold`, a DPU by its
    `spec.dpuNodeName` (or DPF's label); None for objects that are no host's."""
    if stream == "dpus":
        node = (obj.get("spec") or {}).get("dpuNodeName") or (
            (obj.get("metadata") or {}).get("labels") or {}
        ).get(DPUNODE_NAME_LABEL, "")
    else:
        node = (obj.get("metadata") or {}).get("name", "")
        if stream == "hold":
            if not node.endswith("-hold"):
                return None
            node = node[: -len("-hold")]
    return node[len("node-") :] if node.startswith("node-") and len(node) > len("node-") else None


class SiteCache:
    """The objects of one namespace, indexed by host, and the hosts whose state changed."""

    def __init__(self, checkpoint: SiteWatchCheckpoint | None = None) -> None:
        self.streams = {
            s.name: s for s in (_Stream("dpus", DPU), _Stream("node", DPUNODE), _Stream("hold", MAINTENANCE))
        }
        self.dpus_of: dict[str, set[str]] = {}
        self.dirty: set[str] = set()
        self.epoch = checkpoint.epoch if checkpoint else 0
        self.fresh = True  # no listing yet: the first one signals every host
        if checkpoint is not None:
            for name, rv in checkpoint.resource_versions.items():
                if name in self.streams:
                    self.streams[name].rv = self.streams[name].position = rv

    def state(self, host_id: str) -> HostDPFState:
        node = self.streams["node"].objects.get(f"node-{host_id}")
        hold = self.streams["hold"].objects.get(f"node-{host_id}-hold")
        dpus = self.streams["dpus"].objects
        return states.host_state(
            host_id, node, [dpus[n] for n in sorted(self.dpus_of.get(host_id, ()))], hold
        )

    def version(self) -> DPFVersion:
        s = self.streams
        return DPFVersion(epoch=self.epoch, dpus=s["dpus"].rv, node=s["node"].rv, hold=s["hold"].rv)

    def hosts(self) -> set[str]:
        found = set(self.dpus_of)
        for name in ("node", "hold"):
            found |= {h for o in self.streams[name].objects.values() if (h := host_of(name, o))}
        return found

    def _put(self, stream: _Stream, name: str, obj: Object | None) -> set[str]:
        """Store (or drop) one object; the hosts it touched."""
        old = stream.objects.pop(name, None)
        touched = {h for o in (old, obj) if o is not None and (h := host_of(stream.name, o))}
        if obj is not None:
            stream.objects[name] = obj = slim(obj)
        if stream.name == "dpus":
            for host in touched:
                self.dpus_of.get(host, set()).discard(name)
            owner = host_of("dpus", obj) if obj is not None else None
            if owner is not None:
                self.dpus_of.setdefault(owner, set()).add(name)
        return touched

    def apply(self, stream: _Stream, event_type: str, obj: Object) -> None:
        """One watch event; a host whose state changed becomes dirty."""
        name = obj["metadata"]["name"]
        touched = {
            h for o in (stream.objects.get(name), obj) if o is not None and (h := host_of(stream.name, o))
        }
        before = {h: self.state(h).content() for h in touched}
        self._put(stream, name, None if event_type == "DELETED" else obj)
        self.dirty |= {h for h in touched if self.state(h).content() != before[h]}

    def replace(self, stream: _Stream, items: list[Object], *, resuming: bool = False) -> None:
        """A listing of one stream: hosts whose state differs become dirty (all, when fresh;
        none when resuming: replaying the events since the checkpoint finds them)."""
        before = {h: self.state(h).content() for h in self.hosts()}
        stream.objects = {}
        if stream.name == "dpus":
            self.dpus_of = {}
        for obj in items:
            self._put(stream, obj["metadata"]["name"], obj)
        after = self.hosts()
        if resuming:
            return
        if self.fresh:
            self.dirty |= after
        else:
            self.dirty |= {h for h in after | set(before) if self.state(h).content() != before.get(h)}


class Waiters:
    """The registry as this attempt knows it: host -> {workflow id: run id}, and the registry's
    sequence number it has applied (`seq`; `synced` once the whole registry was fetched)."""

    def __init__(self, known: int = 0) -> None:
        self.by_host: dict[str, dict[str, str]] = {}
        self.seq = known  # entries up to this have had their welcome (the checkpoint's waiters_seq)
        self.synced = False

    def after(self) -> int:
        """What to poll for: everything (-1) until the registry was fetched, then the news."""
        return self.seq if self.synced else -1

    def apply(self, news: WaiterNews, cache: SiteCache) -> None:
        """Take a poll's answer; the hosts of new entries become dirty (their welcome signal)."""
        if news.full:
            self.by_host = {}
        for waiter in news.waiters:
            entries = self.by_host.setdefault(waiter.host_id, {})
            entries[waiter.workflow_id] = waiter.run_id
            if not news.full or waiter.seq > self.seq:
                cache.dirty.add(waiter.host_id)
        self.seq = max(self.seq, news.seq) if not news.full else news.seq
        self.synced = True

    def routes(self, hosts: set[str]) -> list[tuple[str, str, str]]:
        """`(host, workflow id, run id)` for each waiter of `hosts`."""
        return [(h, wid, run) for h in sorted(hosts) for wid, run in self.by_host.get(h, {}).items()]

    def forget(self, waiter: DPFWaiter) -> None:
        """Drop an entry whose workflow has closed (unless a newer run replaced it meanwhile)."""
        entries = self.by_host.get(waiter.host_id, {})
        if entries.get(waiter.workflow_id) == waiter.run_id:
            del entries[waiter.workflow_id]
            if not entries:
                del self.by_host[waiter.host_id]


@dataclass
class _Attempt:
    """What the streams, the flushes and the registry's poll of one attempt share."""

    own: SiteWatchHandle  # this run of the site watch workflow
    cache: SiteCache
    waiters: Waiters
    saved: SiteWatchCheckpoint  # the latest durable checkpoint
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class SiteWatchActivities:
    """The site watch and the join; hold the Temporal client they use and the Kubernetes settings."""

    def __init__(self, kube: Kube, temporal: Client) -> None:
        self.kube = kube
        self.temporal = temporal

    @activity.defn(name="join_site_dpf_watch")
    async def join_site_dpf_watch(self, request: JoinSiteWatchInput) -> HostDPFState:
        """Register the calling workflow for the host with the site's watch (starting the watch if
        none runs), then read the host's state with its `as_of`, so the workflow can order it
        against the watch's signals. Registered before the read: see "Ordering" above.

        Cost: 1 signal and 1 describe RPC, 3 list calls; when no watch runs, 3 more lists and 1
        signal-with-start.

        Raises:
            InvalidInput: not called by a workflow, or the API server refused the list.
            KubernetesUnavailable: the API server could not be reached (retryable).
        """
        info = activity.info()
        host = request.host
        if not info.workflow_id or not info.workflow_run_id:
            raise InvalidInput("join_site_dpf_watch registers its calling workflow: call it from one")
        waiter = DPFWaiter(host_id=host.host_id, workflow_id=info.workflow_id, run_id=info.workflow_run_id)
        configuration = self.kube.configuration
        node, hold = host.node_name(), host.hold_name()
        async with http_client(configuration) as http:
            try:
                watch = await register_waiter(
                    self.temporal, configuration, host.namespace, info.task_queue, waiter
                )
                # The epoch before the read: a restart between the two makes the read newer than
                # its epoch says, and the watch's first signal of the new epoch is taken whole anyway.
                epoch = await watch_epoch(watch)
                dpus = await list_objects(http, configuration, DPU, host.namespace,
                                          label_selector=f"{DPUNODE_NAME_LABEL}={node}")  # fmt: skip
                nodes = await list_objects(http, configuration, DPUNODE, host.namespace,
                                           field_selector=f"metadata.name={node}")  # fmt: skip
                holds = await list_objects(http, configuration, MAINTENANCE, host.namespace,
                                           field_selector=f"metadata.name={hold}")  # fmt: skip
            except WatchRejected as err:
                raise InvalidInput(
                    f"the API server refused to list the DPF objects of {host.host_id}: {err}"
                ) from None
            except (WatchFailed, WatchExpired) as err:
                raise KubernetesUnavailable(f"cannot read the DPF objects of {host.host_id}: {err}") from None
        state = states.host_state(
            host.host_id,
            next(iter(nodes.get("items") or []), None),
            list(dpus.get("items") or []),
            next(iter(holds.get("items") or []), None),
        )
        version = DPFVersion(epoch=epoch, dpus=_rv(dpus), node=_rv(nodes), hold=_rv(holds))
        return state.model_copy(update={"as_of": version})

    @activity.defn(name="watch_site_dpf")
    async def watch_site_dpf(self, request: SiteWatchInput) -> None:
        """Watch one namespace and route every change to the workflows registered for its host;
        see the module docstring. Runs until cancelled.

        Raises:
            KubernetesUnavailable: The API server could not be reached for a while (retryable:
                the next attempt resumes from the checkpoint).
            InvalidInput: The API server refused the watch for good (RBAC, a bad namespace).
            ApplicationError: `WorkerStopping` (retryable, BENIGN) when the worker begins a graceful
                shutdown: the next attempt resumes at once elsewhere (`activities.handover`).
        """
        try:
            await handing_over_at_shutdown(self._watch(request), "site watch")
        except asyncio.CancelledError:
            stop_quietly_if_workflow_ended("site watch")
            raise

    async def _watch(self, request: SiteWatchInput) -> None:
        info = activity.info()
        checkpoint = request.resume_from
        if info.heartbeat_details:
            checkpoint = SiteWatchCheckpoint.model_validate(info.heartbeat_details[0])
        if checkpoint is not None and len(checkpoint.resource_versions) < 3:  # restarted before it flushed
            checkpoint = SiteWatchCheckpoint(
                epoch=checkpoint.epoch, restarts=checkpoint.restarts, waiters_seq=checkpoint.waiters_seq
            )
        fresh_start = checkpoint is None or (checkpoint.epoch == 0 and checkpoint.restarts == 0)
        if fresh_start and not (checkpoint and checkpoint.resource_versions) and len(request.start_from) == 3:
            # Read before the watch existed: resume from there as from a checkpoint, so only the
            # hosts that changed since are signalled (every joiner's own read is newer).
            known = checkpoint.waiters_seq if checkpoint else 0
            checkpoint = SiteWatchCheckpoint(resource_versions=dict(request.start_from), waiters_seq=known)
        cache = SiteCache(checkpoint)
        resuming = checkpoint is not None and bool(checkpoint.resource_versions)
        cache.fresh = not resuming
        for stream in cache.streams.values():
            # Resuming: watch from the checkpoint after listing, so what changed meanwhile is found.
            stream.replay_until = -1 if resuming else 0
        saved = checkpoint or SiteWatchCheckpoint(epoch=cache.epoch)
        own = self.temporal.get_workflow_handle_for(
            workflow_api.SiteDPFWatchWorkflow.run, info.workflow_id or "", run_id=info.workflow_run_id
        )
        run = _Attempt(own=own, cache=cache, waiters=Waiters(saved.waiters_seq), saved=saved)
        poll = asyncio.create_task(self._poll(run), name="site watch: registry poll")
        try:
            async with http_client(self.kube.configuration) as http:
                while True:
                    tasks = [
                        asyncio.create_task(self._follow(http, request, run, s))
                        for s in cache.streams.values()
                    ]
                    try:
                        await self._route(request, run, [*tasks, poll])
                    except _Restarted:
                        cache.epoch += 1
                        run.saved = run.saved.model_copy(
                            update={"epoch": cache.epoch, "restarts": run.saved.restarts + 1}
                        )
                        log.info("the API server restarted (resourceVersions went backwards): epoch %d, "
                                 "listing again", cache.epoch)  # fmt: skip
                        for stream in cache.streams.values():
                            stream.listed, stream.replay_until = False, 0
                            stream.rv = stream.position = 0
                        cache.fresh = not cache.hosts()  # a resumed, still empty cache signals every host
                        await own.signal(workflow_api.SiteDPFWatchWorkflow.epoch_raised, cache.epoch)
                    finally:
                        for task in tasks:
                            task.cancel()
                        await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            poll.cancel()
            await asyncio.gather(poll, return_exceptions=True)

    async def _route(self, request: SiteWatchInput, run: _Attempt, tasks: list[asyncio.Task[None]]) -> None:
        """Flush dirty hosts and heartbeat until a stream fails (its error is raised)."""
        cache = run.cache
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
            # lands as the event fires, and a watch that misses its cancel never lets its worker stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(request.heartbeat_seconds):
                    await run.changed.wait()
            run.changed.clear()
            for task in tasks:
                if task.done():
                    task.result()  # raises the stream's (or the poll's) error, or _Restarted
            if all(s.listed for s in cache.streams.values()) and run.waiters.synced:
                cache.fresh = False
                # Taken together, with no await between: every host dirtied by a change up to
                # these positions, and by an entry up to this registry sequence number, is in
                # `dirty`, so once signalled they are durable. Hosts nobody waits on are dropped.
                positions = {s.name: s.position for s in cache.streams.values()}
                routes, cache.dirty = run.waiters.routes(cache.dirty), set()
                waiters_seq = run.waiters.seq
                version = cache.version()
                found = {
                    h: cache.state(h).model_copy(update={"as_of": version, "sequence": 0})
                    for h in {host for host, _, _ in routes}
                }
                await self._signal(run, [(host, wid, rid, found[host]) for host, wid, rid in routes])
                run.saved = run.saved.model_copy(
                    update={"resource_versions": positions, "epoch": cache.epoch, "waiters_seq": waiters_seq}
                )
            if run.saved.resource_versions:
                activity.heartbeat(run.saved)
            else:  # nothing durable yet: a retry before the first flush lists afresh
                activity.heartbeat()

    async def _signal(self, run: _Attempt, routes: list[tuple[str, str, str, HostDPFState]]) -> None:
        """Signal each state to its waiter; a waiter that answers NotFound is removed."""
        limit = asyncio.Semaphore(SIGNALS_IN_FLIGHT)
        gone: list[DPFWaiter] = []

        async def one(host: str, workflow_id: str, run_id: str, state: HostDPFState) -> None:
            async with limit:
                for attempt in range(SIGNAL_ATTEMPTS):
                    try:
                        await self.temporal.get_workflow_handle(workflow_id).signal(
                            DPF_STATE_CHANGED_SIGNAL, state
                        )
                        return
                    except RPCError as err:
                        if err.status == RPCStatusCode.NOT_FOUND:  # the workflow has closed
                            gone.append(
                                DPFWaiter(host_id=host, workflow_id=workflow_id, run_id=run_id, gone=True)
                            )
                            return
                        if attempt + 1 == SIGNAL_ATTEMPTS:
                            raise  # the attempt fails; the next resumes from the checkpoint
                        await asyncio.sleep(0.2 * 2**attempt)

        await asyncio.gather(*(one(*route) for route in routes))
        for waiter in gone:
            run.waiters.forget(waiter)
            try:
                await run.own.signal(workflow_api.SiteDPFWatchWorkflow.dpf_waiter, waiter)
            except RPCError as err:  # this run has closed: the next run's registry drops it at its NotFound
                log.info(
                    "could not remove the closed waiter %s of %s: %s", waiter.workflow_id, waiter.host_id, err
                )

    async def _poll(self, run: _Attempt) -> None:
        """Learn the registry: all of it first, then each new entry (the `next_waiters` update of
        this attempt's workflow run, long-polling). On handover, poll once more with the latest
        checkpoint (the next run resumes from it), then stop."""
        failures = 0
        reported = False
        while True:
            saved = run.saved
            poll = WaiterPoll(
                after=run.waiters.after(), checkpoint=saved if saved.resource_versions else None
            )
            try:
                news = await self._ask(run.own, poll)
            except WorkflowUpdateFailedError as err:
                log.info("the site watch refused the registry poll (%s): it is handing over", err.cause)
                return
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return  # this run has closed: the cancel of this attempt follows
                log.warning("polling the site watch's registry failed: %s", err)
                await asyncio.sleep(POLL_BACKOFF_SECONDS[min(failures, len(POLL_BACKOFF_SECONDS) - 1)])
                failures += 1
                continue
            failures = 0
            run.waiters.apply(news, run.cache)
            run.changed.set()
            if news.handover:
                if reported:
                    return
                reported = True

    async def _ask(self, own: SiteWatchHandle, poll: WaiterPoll) -> WaiterNews:
        """One poll; an RPC that times out while it waits is sent again (the same update id)."""
        update_id = f"next-waiters-{uuid.uuid4()}"
        while True:
            try:
                handle = await own.start_update(
                    workflow_api.SiteDPFWatchWorkflow.next_waiters,
                    poll,
                    id=update_id,
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                )
                while True:
                    try:
                        return await handle.result()
                    except WorkflowUpdateRPCTimeoutOrCancelledError:
                        _raise_if_cancelled()
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                _raise_if_cancelled()

    async def _follow(
        self, http: httpx.AsyncClient, request: SiteWatchInput, run: _Attempt, stream: _Stream
    ) -> None:
        ns, configuration, cache, changed = request.namespace, self.kube.configuration, run.cache, run.changed
        failures = 0
        watch_from = stream.rv
        while True:
            try:
                if not stream.listed:
                    listed = await list_objects(http, configuration, stream.kind, ns)
                    rv = _rv(listed)
                    if rv < stream.rv:
                        raise _Restarted(f"{stream.name}: listed at {rv}, after {stream.rv}")
                    cache.replace(stream, list(listed.get("items") or []), resuming=stream.replay_until == -1)
                    if stream.replay_until == -1:  # resuming: replay from the checkpoint
                        stream.replay_until, watch_from = rv, stream.position
                    else:
                        stream.replay_until, watch_from, stream.position = 0, rv, rv
                    stream.rv, stream.listed = rv, True
                    changed.set()
                async for event in watch_events(
                    http, configuration, stream.kind, ns, resource_version=str(watch_from)
                ):
                    failures = 0
                    kind = event.get("type")
                    if kind == OPENED:
                        continue
                    obj = event.get("object") or {}
                    rv = _rv(obj)
                    if rv and rv < stream.position:
                        raise _Restarted(f"{stream.name}: event at {rv}, after {stream.position}")
                    if rv <= stream.replay_until:  # older than the listing: only its host counts
                        if kind != "BOOKMARK" and (host := host_of(stream.name, obj)) is not None:
                            cache.dirty.add(host)
                    elif kind in ("ADDED", "MODIFIED", "DELETED"):
                        cache.apply(stream, kind, obj)
                        stream.rv = rv
                    elif kind == "BOOKMARK":
                        stream.rv = max(stream.rv, rv)
                    stream.position = watch_from = max(stream.position, rv)
                    changed.set()
                metrics.activity_dpf_watch_reconnect()  # the server ended the stream: resume
            except WatchExpired:
                log.info("site watch of %s expired (410); listing again", stream.kind.plural)
                if stream.replay_until == -1 or stream.replay_until > 0:
                    cache.dirty |= cache.hosts()  # what changed since the checkpoint is unknown
                stream.listed, stream.replay_until = False, 0
            except WatchRejected as err:
                raise InvalidInput(f"the API server refused to watch {stream.kind.kind}: {err}") from None
            except WatchFailed as err:
                if failures >= len(FAILURE_BACKOFF):
                    raise KubernetesUnavailable(
                        f"cannot keep the site watch of {stream.kind.kind}: {err}"
                    ) from None
                await asyncio.sleep(FAILURE_BACKOFF[failures])
                failures += 1
                metrics.activity_dpf_watch_reconnect()


def _raise_if_cancelled() -> None:
    # The SDK turns a cancel of the waiting task into WorkflowUpdateRPCTimeoutOrCancelledError.
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
