"""The site watch: ONE list+watch of a DPF namespace's DPUs, DPUNodes and DPUNodeMaintenances that
signals each change of a host to the workflows waiting on that host.

How it routes. A change that matters (the `HostDPFState` of the host differs after the event:
phases, uids, conditions, the reboot-required and hold annotations, objects appearing or going)
marks its host dirty. A flush signals each dirty host's state (`DPF_STATE_CHANGED_SIGNAL`,
`as_of` set, `sequence` 0) to the ids `names.dpf_waiter_workflow_ids(host)` (provision,
reprovision, firmware, remove and monitor of that host): the ids are the business keys, so no
registry can lose a subscriber; a closed or unknown id answers NotFound, which is ignored. A
host whose content changes and changes back between two flushes is still signalled, so a
workflow that read the state in between learns it.

Ordering against a workflow's own read (`join_site_dpf_watch`): every state carries `as_of`
(`DPFVersion`): per kind, the resourceVersion up to which it holds every change of that kind,
and the watch's epoch. The workflow (`workflows.dpf_watch`) keeps, per kind, the newer of what
it has and what arrives, so a change between its read and a signal is neither lost (the signal
is newer) nor applied backwards (an older signal loses).

Resuming and relisting. Each attempt heartbeats a `SiteWatchCheckpoint`: per stream, the
resourceVersion up to which every change has been signalled. A retried attempt (a worker that
died) lists to rebuild its cache, then watches from the checkpoint: events up to the listing
only mark their hosts dirty (their objects are older than the listing), later ones apply. 410
Gone lists again and signals the hosts whose state differs from the cache (every host when the
cache is new). When resourceVersions go backwards (a listing or event older than what the
stream saw: the API server restarted on another store), the epoch rises, every stream lists
again, and every host whose state differs is signalled with the new epoch, which a waiting
workflow takes whole.

Starting. Whoever creates the watch (`ensure_site_watch`: a workflow's join, or the worker at
start) first reads the API server's resourceVersions and gives them as `start_from`; the watch's
first attempt resumes from them as from a checkpoint. Every workflow reads its own state after
the watch exists, hence after those versions, so the first listing signals only the hosts that
changed since (a fresh listing used to signal every host: 5 ids each, most of them workflows
that do not exist, ~50,000 signal RPCs at 10,000 hosts and a quarter of the worker's CPU at
2,000). A watch started without `start_from` (older callers), or whose versions the API server
no longer holds (410), signals every host as before. A workflow that starts while nothing
changes gets its first state from its own read, at once.

Cost per site: 3 watch streams and 3 lists at start (each relist: 3 lists). Per change of a
host: 5 signal RPCs (1-2 reach a running workflow, the rest answer NotFound), 1 history event in
each waiting workflow, no events in the site watch's own workflow. Per relist after 410 or a
restart: the same for every host whose state differs. Worker memory: the cache keeps each
object once, slimmed to the fields a state is built from (`slim`): 103 MB measured for 10,000
hosts x 2 DPUs with their DPUNodes (tracemalloc, real simulated objects cloned; holds add about
1 KB per host while they exist), plus one `HostDPFState` per dirty host while a flush runs.
CPU: two `HostDPFState` builds of the host per event. One activity slot per site, not per host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import httpx
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.handover import handing_over_at_shutdown
from activities.heartbeat import stop_quietly_if_workflow_ended
from contracts import metrics, names
from contracts.errors import InvalidInput, KubernetesUnavailable
from contracts.models.dpf import (
    DPF_STATE_CHANGED_SIGNAL,
    DPUNODE_NAME_LABEL,
    HOLD_ANNOTATION,
    REBOOT_REQUIRED_ANNOTATION,
    DPFVersion,
    HostDPFState,
    JoinSiteWatchInput,
    SiteWatchCheckpoint,
    SiteWatchInput,
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
SITE_WATCH_WORKFLOW = "SiteDPFWatchWorkflow"
EPOCH_SIGNAL = "dpf_watch_epoch"
EPOCH_QUERY = "epoch"
EPOCH_MEMO = "epoch"  # workflows.site_watch.EPOCH_MEMO (activities import no workflows)


async def watch_epoch(handle: WorkflowHandle[Any, Any]) -> int:
    """The site watch's epoch: from its memo (a describe, served by the server alone), or by
    query from a watch started before it kept the epoch in its memo."""
    return await _epoch_of(handle, await handle.describe())


async def _epoch_of(handle: WorkflowHandle[Any, Any], described: WorkflowExecutionDescription) -> int:
    epoch: int | None = await described.memo_value(EPOCH_MEMO, None, type_hint=int)
    if epoch is None:
        epoch = await handle.query(EPOCH_QUERY, result_type=int)
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


async def ensure_site_watch(temporal: Client, configuration: Any, namespace: str, task_queue: str) -> int:
    """Make sure the site watch of `namespace` runs; its epoch (0 for a watch started here).

    A running watch is only described (1 RPC). Otherwise the API server's resourceVersions are
    read FIRST and given to the new watch as `start_from`: every workflow reads its own state
    after this returns, hence after those versions, so the watch's first listing signals only
    the hosts that changed since (not 5 ids x every host of the site, most of them workflows that
    do not exist: 50,000 signal RPCs at 10,000 hosts). Two callers racing both read before the
    one start that wins, and each reads its own state after its start returned: both covered.

    Raises:
        WatchFailed, WatchRejected, WatchExpired: reading the resourceVersions failed.
    """
    handle = temporal.get_workflow_handle(names.dpf_watch_workflow_id(namespace, task_queue))
    try:
        described = await handle.describe()
        if described.status == WorkflowExecutionStatus.RUNNING:
            return await _epoch_of(handle, described)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    start_from = await positions_now(configuration, namespace)
    handle = await temporal.start_workflow(
        SITE_WATCH_WORKFLOW,
        SiteWatchInput(namespace=namespace, start_from=start_from),
        id=handle.id,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        static_summary=f"watch the DPF objects of namespace {namespace}",
    )
    return await watch_epoch(handle)  # another caller's watch may have won the start


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


_KEPT_ANNOTATIONS = (REBOOT_REQUIRED_ANNOTATION, HOLD_ANNOTATION)


def slim(obj: Object) -> Object:
    """Only what `HostDPFState` is built from (and the routing reads): a cached object costs
    about a fifth of what the API returned."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in _KEPT_ANNOTATIONS}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k == DPUNODE_NAME_LABEL}
    kept_meta = {k: meta[k] for k in ("name", "uid", "resourceVersion", "deletionTimestamp") if k in meta}
    return {
        "metadata": {**kept_meta, "annotations": annotations, "labels": labels},
        "spec": {k: spec[k] for k in ("dpuNodeName", "dpuDeviceName", "bfb") if k in spec},
        "status": {
            "phase": status.get("phase", ""),
            "conditions": [
                {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
                for c in status.get("conditions") or []
            ],
        },
    }


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


class SiteWatchActivities:
    """The site watch and the join; hold the Temporal client they use and the Kubernetes settings."""

    def __init__(self, kube: Kube, temporal: Client) -> None:
        self.kube = kube
        self.temporal = temporal

    @activity.defn(name="join_site_dpf_watch")
    async def join_site_dpf_watch(self, request: JoinSiteWatchInput) -> HostDPFState:
        """Make sure the host's site is watched (start `dpf-watch/...` if needed), then read the
        host's state with its `as_of`, so the workflow can order it against the watch's signals.

        Cost: 1 describe (a query only for a watch started before its epoch was kept in its
        memo) and 3 list calls; when no watch runs, 3 more lists and 1 start RPC (`ensure_site_watch`).
        """
        info = activity.info()
        host = request.host
        configuration = self.kube.configuration
        node, hold = host.node_name(), host.hold_name()
        async with http_client(configuration) as http:
            try:
                # The epoch before the read: a restart between the two makes the read newer than
                # its epoch says, and the watch's first signal of the new epoch is taken whole anyway.
                epoch = await ensure_site_watch(self.temporal, configuration, host.namespace, info.task_queue)
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
        """Watch one namespace and route every change to the host's waiting workflows; see the
        module docstring. Runs until cancelled.

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
        checkpoint = None
        if info.heartbeat_details:
            checkpoint = SiteWatchCheckpoint.model_validate(info.heartbeat_details[0])
            if len(checkpoint.resource_versions) < 3:  # restarted before it ever flushed
                checkpoint = SiteWatchCheckpoint(epoch=checkpoint.epoch, restarts=checkpoint.restarts)
        fresh_start = checkpoint is None or (checkpoint.epoch == 0 and checkpoint.restarts == 0)
        if fresh_start and not (checkpoint and checkpoint.resource_versions) and len(request.start_from) == 3:
            # Read before the watch existed: resume from there as from a checkpoint, so only the
            # hosts that changed since are signalled (every joiner's own read is newer).
            checkpoint = SiteWatchCheckpoint(resource_versions=dict(request.start_from))
        cache = SiteCache(checkpoint)
        resuming = checkpoint is not None and bool(checkpoint.resource_versions)
        cache.fresh = not resuming
        for stream in cache.streams.values():
            # Resuming: watch from the checkpoint after listing, so what changed meanwhile is found.
            stream.replay_until = -1 if resuming else 0
        saved = checkpoint or SiteWatchCheckpoint(epoch=cache.epoch)
        changed = asyncio.Event()
        own = self.temporal.get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        async with http_client(self.kube.configuration) as http:
            while True:
                tasks = [
                    asyncio.create_task(self._follow(http, request, cache, s, changed))
                    for s in cache.streams.values()
                ]
                try:
                    saved = await self._route(request, cache, tasks, changed, saved)
                except _Restarted:
                    cache.epoch += 1
                    saved = saved.model_copy(update={"epoch": cache.epoch, "restarts": saved.restarts + 1})
                    log.info(
                        "the API server restarted (resourceVersions went backwards): epoch %d, listing again",
                        cache.epoch,
                    )
                    for stream in cache.streams.values():
                        stream.listed, stream.replay_until = False, 0
                        stream.rv = stream.position = 0
                    cache.fresh = not cache.hosts()  # a resumed, still empty cache signals every host
                    await own.signal(EPOCH_SIGNAL, cache.epoch)
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)

    async def _route(
        self, request: SiteWatchInput, cache: SiteCache, tasks: list[asyncio.Task[None]],
        changed: asyncio.Event, saved: SiteWatchCheckpoint,
    ) -> SiteWatchCheckpoint:  # fmt: skip
        """Flush dirty hosts and heartbeat until a stream fails (its error is raised)."""
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
            # lands as the event fires, and a watch that misses its cancel never lets its worker stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(request.heartbeat_seconds):
                    await changed.wait()
            changed.clear()
            for task in tasks:
                if task.done():
                    task.result()  # raises the stream's error (or _Restarted)
            if all(s.listed for s in cache.streams.values()):
                cache.fresh = False
                # Taken together, with no await between: every host dirtied by a change up to
                # these positions is in `dirty`, so once signalled the positions are durable.
                positions = {s.name: s.position for s in cache.streams.values()}
                hosts, cache.dirty = sorted(cache.dirty), set()
                version = cache.version()
                await self._signal(
                    [cache.state(h).model_copy(update={"as_of": version, "sequence": 0}) for h in hosts]
                )
                saved = saved.model_copy(update={"resource_versions": positions, "epoch": cache.epoch})
            if saved.resource_versions:
                activity.heartbeat(saved)
            else:  # nothing durable yet: a retry before the first flush lists afresh
                activity.heartbeat()

    async def _signal(self, found: list[HostDPFState]) -> None:
        limit = asyncio.Semaphore(SIGNALS_IN_FLIGHT)

        async def one(workflow_id: str, state: HostDPFState) -> None:
            async with limit:
                for attempt in range(SIGNAL_ATTEMPTS):
                    try:
                        await self.temporal.get_workflow_handle(workflow_id).signal(
                            DPF_STATE_CHANGED_SIGNAL, state
                        )
                        return
                    except RPCError as err:
                        if err.status == RPCStatusCode.NOT_FOUND:
                            return  # nobody waits under this id now: the cheap, common answer
                        if attempt + 1 == SIGNAL_ATTEMPTS:
                            raise  # the attempt fails; the next resumes from the checkpoint
                        await asyncio.sleep(0.2 * 2**attempt)

        await asyncio.gather(*(one(w, s) for s in found for w in names.dpf_waiter_workflow_ids(s.host_id)))

    async def _follow(
        self, http: httpx.AsyncClient, request: SiteWatchInput, cache: SiteCache, stream: _Stream,
        changed: asyncio.Event,
    ) -> None:  # fmt: skip
        ns, configuration = request.namespace, self.kube.configuration
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
