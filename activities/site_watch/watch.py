"""The site watch's activities: the watch of one namespace, and a workflow's join.

`watch_site_dpf` runs one attempt of the watch: the three streams of the site's mirror
(`activities.site_watch.mirror`), the poll that learns the registry (`_poll`, the `next_waiters`
update of its own workflow run), and the flushes that signal each dirty host's state to its
waiters (`activities.site_watch.waiters`) and heartbeat the checkpoint. On handover (the worker
stops, or the workflow continues as new) the next attempt or run resumes from the last checkpoint.
`join_site_dpf_watch` registers the calling workflow, then reads its host's state. The design and
the argument that no change is lost are in `activities.site_watch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.handover import handing_over_at_shutdown
from activities.heartbeat import (
    HeartbeatGate,
    beat_interval,
    beats_while_running,
    stop_quietly_if_workflow_ended,
)
from activities.site_watch.mirror import Restarted, SiteCache, follow_stream, resource_version
from activities.site_watch.start import SiteWatchHandle, register_waiter, watch_epoch
from activities.site_watch.waiters import Waiters, signal_waiters
from contracts import workflow_api
from contracts.converter import DATA_CONVERTER
from contracts.errors import InvalidInput, KubernetesUnavailable
from contracts.models.dpf import (
    DPUNODE_NAME_LABEL,
    SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
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
from drivers.kube import DPU, DPUNODE, MAINTENANCE, Kube
from drivers.kube_streams import WatchExpired, WatchFailed, WatchRejected, http_client, list_objects

log = logging.getLogger("activities.site_watch")

POLL_BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)  # between failed polls for the registry
HANDOVER_BEAT_SECONDS = 1.0
"""How often the watch heartbeats once its registry poll has ended (a cancel is on its way)."""
FLUSH_QUIET_SECONDS = 0.02
"""A flush waits until no change has come for this long (a host's DPUs move together: DPF writes
each DPU's phase apart, milliseconds apart), so a host's changes are one signal per flush."""
FLUSH_GATHER_SECONDS = 0.1
"""...but never longer than this after the first change: the most a flush adds to a reaction."""


async def gather_changes(changed: asyncio.Event, quiet: float, most: float) -> None:
    """Return once `changed` has stayed clear for `quiet` seconds, or `most` seconds after the
    call, whichever comes first; `changed` is clear on return. Each change that comes meanwhile
    joins the flush that follows instead of costing a signal of its own."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + most
    while True:
        changed.clear()
        left = deadline - loop.time()
        if left <= 0:
            return
        try:
            async with asyncio.timeout(min(quiet, left)):
                await changed.wait()
        except TimeoutError:
            return


@dataclass
class _Attempt:
    """What the streams, the flushes and the registry's poll of one attempt share."""

    own: SiteWatchHandle  # this run of the site watch workflow
    cache: SiteCache
    waiters: Waiters
    saved: SiteWatchCheckpoint  # the latest durable checkpoint
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    pong: int = 0  # the workflow's latest ping (`WaiterNews.ping`): the next poll carries it back
    taking_over: bool = False  # replaces an attempt taken for dead (`SiteWatchInput.taking_over`)


class SiteWatchActivities:
    """The site watch and the join; hold the Temporal client they use and the Kubernetes settings."""

    def __init__(
        self,
        kube: Kube,
        temporal: Client,
        heartbeat_timeout_seconds: float = SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
    ) -> None:
        self.kube = kube
        self.temporal = temporal
        self.heartbeat_timeout_seconds = heartbeat_timeout_seconds  # of a watch a join starts

    @activity.defn(name="join_site_dpf_watch")
    @beats_while_running
    async def join_site_dpf_watch(self, request: JoinSiteWatchInput) -> HostDPFState:
        """Register the calling workflow for the host with the site's watch (starting the watch if
        none runs), then read the host's state with its `as_of`, so the workflow can order it
        against the watch's signals. Registered before the read: see `activities.site_watch`,
        "Ordering".

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
                    self.temporal, configuration, host.namespace, info.task_queue, waiter,
                    self.heartbeat_timeout_seconds,
                )  # fmt: skip
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
        rv = resource_version
        version = DPFVersion(epoch=epoch, dpus=rv(dpus), node=rv(nodes), hold=rv(holds))
        return state.model_copy(update={"as_of": version})

    @activity.defn(name="watch_site_dpf")
    async def watch_site_dpf(self, request: SiteWatchInput) -> None:
        """Watch one namespace and route every change to the workflows registered for its host;
        see `activities.site_watch`. Runs until cancelled.

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
        elif request.taking_over:
            checkpoint = await self._replaced_checkpoint() or checkpoint
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
        run = _Attempt(
            own=own,
            cache=cache,
            waiters=Waiters(saved.waiters_seq),
            saved=saved,
            taking_over=request.taking_over,
        )
        poll = asyncio.create_task(self._poll(run), name="site watch: registry poll")
        try:
            configuration = self.kube.configuration
            async with http_client(configuration) as http:
                while True:
                    tasks = [
                        asyncio.create_task(
                            follow_stream(http, configuration, request.namespace, cache, s, run.changed)
                        )
                        for s in cache.streams.values()
                    ]
                    try:
                        await self._route(request, run, [*tasks, poll])
                    except Restarted:
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

    async def _replaced_checkpoint(self) -> SiteWatchCheckpoint | None:
        """The last checkpoint heartbeated by the attempts this one replaces (still pending, their
        cancel requested: a dead worker's attempt stays so until its heartbeat timeout), the
        newest beat first; None when none beat one (1 describe of this workflow run)."""
        info = activity.info()
        own = self.temporal.get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        try:
            pending = (await own.describe()).raw_description.pending_activities
        except RPCError as err:
            log.warning(
                "could not read the replaced attempt's checkpoint (%s): resuming from the last polled", err
            )
            return None
        beaten = [
            p
            for p in pending
            if p.activity_type.name == "watch_site_dpf"
            and p.activity_id != info.activity_id
            and p.heartbeat_details.payloads
        ]
        if not beaten:
            return None
        newest = max(beaten, key=lambda p: p.last_heartbeat_time.ToNanoseconds())
        return DATA_CONVERTER.payload_converter.from_payload(
            newest.heartbeat_details.payloads[0], SiteWatchCheckpoint
        )

    async def _route(self, request: SiteWatchInput, run: _Attempt, tasks: list[asyncio.Task[None]]) -> None:
        """Flush dirty hosts and heartbeat until a stream fails (its error is raised).

        Heartbeats: a new checkpoint at once (the worker's throttle lets it out within 0.2 s);
        the same one only every idle beat (a third of the heartbeat timeout: each beat that
        reaches the server is a billable Action, `SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS`). Once the
        registry's poll has ended (its run hands over, or was cancelled or closed) the cancel is
        near, and it reaches an activity only in a heartbeat's answer: beat every
        `HANDOVER_BEAT_SECONDS` until it comes."""
        cache = run.cache
        timeout = activity.info().heartbeat_timeout
        idle_beat = beat_interval(timeout.total_seconds() if timeout else request.heartbeat_timeout_seconds)
        beat, handing_over = HeartbeatGate(idle_beat), False
        poll = tasks[-1]
        while True:
            wait = HANDOVER_BEAT_SECONDS if poll.done() else idle_beat
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
            # lands as the event fires, and a watch that misses its cancel never lets its worker stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await run.changed.wait()
            run.changed.clear()
            for task in tasks:
                if task.done():
                    task.result()  # raises the stream's (or the poll's) error, or Restarted
            if cache.dirty and not poll.done():
                await gather_changes(run.changed, FLUSH_QUIET_SECONDS, FLUSH_GATHER_SECONDS)
                for task in tasks:
                    if task.done():
                        task.result()
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
                states_to_send = [(host, wid, rid, found[host]) for host, wid, rid in routes]
                await signal_waiters(self.temporal, run.own, run.waiters, states_to_send)
                run.saved = run.saved.model_copy(
                    update={"resource_versions": positions, "epoch": cache.epoch, "waiters_seq": waiters_seq}
                )
            if poll.done() and not handing_over:
                handing_over, beat = True, HeartbeatGate(HANDOVER_BEAT_SECONDS)
            if run.saved.resource_versions:
                beat(run.saved)
            else:  # nothing durable yet: a retry before the first flush lists afresh
                beat()

    async def _poll(self, run: _Attempt) -> None:
        """Learn the registry: all of it first, then each new entry (the `next_waiters` update of
        this attempt's workflow run, long-polling). On handover, poll once more with the latest
        checkpoint (the next run resumes from it), then stop. Each poll carries back the latest
        ping (`WaiterPoll.pong`): when a worker starts, the workflow pings, and an attempt that
        does not poll again with it is taken for dead and replaced."""
        failures = 0
        reported = False
        while True:
            saved = run.saved
            poll = WaiterPoll(
                after=run.waiters.after(),
                checkpoint=saved if saved.resource_versions else None,
                pong=run.pong,
                taking_over=run.taking_over,
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
            run.pong = news.ping  # a worker started: polling again with it says this attempt is alive
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


def _raise_if_cancelled() -> None:
    # The SDK turns a cancel of the waiting task into WorkflowUpdateRPCTimeoutOrCancelledError.
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
