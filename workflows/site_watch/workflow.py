"""SiteDPFWatchWorkflow: the one DPF watch of a site, `dpf-watch/<namespace>` (see
`contracts.names.dpf_watch_workflow_id`), and the registry of the workflows waiting on its hosts.

Started by the first workflow that waits on a host of the site (its `join_site_dpf_watch`
activity registers it with a signal-with-start, so there is one however many join), or by the
worker at start (`activities.site_watch.start.ensure_site_watch`). It runs one `watch_site_dpf`
activity: the activity heartbeats its checkpoint (resourceVersions), so when its worker dies the
retry resumes on another worker from where it was; it is retried without limit.

The registry, `{host: {workflow id: DPFWaiter}}`, is this workflow's state:
- `dpf_waiter` (signal): a join registers its workflow run for a host. A newer run of the same
  workflow id replaces the older entry (one id has one running run), so a continued-as-new
  monitor or a repeated operation leaves no stale entry of its own id. Each new entry takes the
  next sequence number `seq`. With `gone` the activity removes an entry whose workflow answered
  NotFound (closed); a removal of a run the registry no longer holds does nothing, so it never
  removes a newer run that registered meanwhile. A removal wakes no poll (the activity that sent
  it already forgot the entry). A registration already held (a `restart` joins again) changes
  nothing.
- `next_waiters` (update): the activity's long poll. The handler waits (a `wait_condition`, no
  timer) until the registry has an entry newer than the poll's `after`, or the run hands over,
  and answers with the entries added since (`WaiterNews`), or with the whole registry when the
  poll asks for it (`after` -1: a new attempt) or is older than the changes kept. Changes up to
  a poll's `after` are known to the activity and dropped from memory.

History stays bounded: past `history_events_per_run` events, or when Temporal suggests it, the
run hands over. Pending polls answer `handover`; the activity polls once more with its latest
durable checkpoint (`WaiterPoll.checkpoint`, waited for up to `HANDOVER_WAIT`); the run cancels
the activity and waits until it has ended, waits until every handler has finished, and continues
as new carrying the registry, its `seq`, the epoch and that checkpoint (`resume_from`): the next
run's activity resumes from the checkpoint (only the hosts that changed since are signalled) and
gives a welcome signal to the registrations the checkpoint had not yet served. Registrations
that arrive meanwhile are carried (Temporal delivers a signal that races a continue-as-new to the
run before it closes).

It keeps the watch's epoch (raised by the activity, by signal, when the API server restarted) in
its memo `epoch`, which a join reads with a describe (served by the server alone: a query would
need a workflow task here for every join, and 200 joins at once timed out on a busy worker,
bench/README.md).

Limitation: the registry lives in this workflow only. Terminating it loses every registration;
a waiting workflow registers again only at its next join (`DPFWatch.restart`), so until then it
learns of changes only from its own reads. Leave it running (it never ends on its own).

Cost per site: one activity slot; idle, one heartbeat a third of the heartbeat timeout (150 s by
default, `SiteWatchInput.heartbeat_timeout_seconds`): 1,728 Actions a day, and a dead worker's
watch resumes elsewhere within 160 s (`contracts.models.dpf.site_watch_takeover_seconds`), or
sooner when a worker starts (a restarted one, most often): the worker signals `worker_started`
(`ensure_site_watch`), the pending polls answer with a new ping (`WaiterNews.ping`), and an
attempt that does not poll again with it within `SITE_WATCH_PROBE_SECONDS` is taken for dead:
the next attempt starts at once from its last heartbeated checkpoint (`SiteWatchInput.taking_over`),
and the silent one is cancelled, the run never waiting for a dead worker's answer (`_retire`).
Per worker start: 1 signal; with a live attempt about 12 history events (its workflow task, the
ping's answer and the next poll, the probe's timer), with a dead one a few more (the cancel, the
new activity).
History: about 20 events per run; per registration that comes
alone 9 (its signal, the poll's completion and the next poll's acceptance, each in a workflow
task of 3 events), per removal 4 (its signal and workflow task); in a burst (100 registrations
at once, measured) about 2 each, and as much for their removals. With the default bound that
is one continue-as-new per ~750 lone operations (registration and removal), per ~2,500 in
bursts. Per API server restart 2 events (signal, memo). No events per DPF change. Memory: the
registry, ~1 KB per entry in the worker running this workflow (tracemalloc, 10,000 entries: one
host each, 1 waiter), ~130 bytes per entry in the continue-as-new input and in a full answer:
Temporal's 2 MB payload limit bounds one site to ~15,000 waiting runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Final

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.dpf import (
        DPF_WAITER_SIGNAL,
        EPOCH_MEMO,
        EPOCH_QUERY,
        EPOCH_SIGNAL,
        NEXT_WAITERS_UPDATE,
        SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
        SITE_WATCH_PROBE_SECONDS,
        SITE_WATCH_RETRY_MAX_SECONDS,
        WAITERS_QUERY,
        WORKER_STARTED_SIGNAL,
        DPFWaiter,
        SiteWatchCheckpoint,
        SiteWatchInput,
        WaiterNews,
        WaiterPoll,
    )
    from workflows import kernel

SITE_WATCH: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(days=30),
    # A dead worker's watch resumes elsewhere within this plus the retry backoff; the input's
    # `heartbeat_timeout_seconds` replaces it (`site_watch_options`).
    "heartbeat_timeout": timedelta(seconds=SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=200),
        maximum_interval=timedelta(seconds=SITE_WATCH_RETRY_MAX_SECONDS),
        non_retryable_error_types=[],  # a refused watch (RBAC) is retried too: it may be granted
    ),
}


def site_watch_options(request: SiteWatchInput) -> workflow.ActivityConfig:
    """`SITE_WATCH` with the input's heartbeat timeout (its idle beat and takeover time)."""
    return {**SITE_WATCH, "heartbeat_timeout": timedelta(seconds=request.heartbeat_timeout_seconds)}


HANDOVER_WAIT: Final = timedelta(seconds=30)
"""How long a handover waits for the activity's last checkpoint (a dead worker's activity never
sends it: the run then carries the last one it reported)."""


@workflow.defn(name="SiteDPFWatchWorkflow")
class SiteDPFWatchWorkflow:
    """Keep the site's DPF watch running and its registry of waiters; see the module docstring."""

    @workflow.init
    def __init__(self, request: SiteWatchInput) -> None:
        self._epoch = request.epoch
        self._registry: dict[str, dict[str, DPFWaiter]] = {}
        for waiter in request.waiters:
            self._registry.setdefault(waiter.host_id, {})[waiter.workflow_id] = waiter
        self._seq = request.waiters_seq  # the newest entry's sequence number
        self._added: list[DPFWaiter] = []  # entries added after `_known`, in order
        self._known = request.waiters_seq  # entries up to this are not in `_added`
        self._checkpoint: SiteWatchCheckpoint | None = request.resume_from
        self._handing_over = False
        self._reported = False  # a poll came after the handover began: its checkpoint is the last
        self._closed = False  # the activity has ended: no more polls
        self._probe_asked = False  # a worker started: check that the running attempt is alive
        self._ping = 0  # pings sent to the attempt (`WaiterNews.ping`)
        self._pong = 0  # the highest ping a poll carried back (`WaiterPoll.pong`)
        self._taken_over = False  # the attempt that replaced a silent one has polled
        self._retiring: list[asyncio.Task[None]] = []  # attempts taken for dead (`_retire`)

    @workflow.run
    async def run(self, request: SiteWatchInput) -> None:
        """Run the site watch until cancelled or terminated, continuing as new when its history grows."""
        workflow.upsert_search_attributes(
            [names.OPERATION.value_set(names.DPF_WATCH), names.SITE.value_set(request.namespace)]
        )
        kernel.set_details("watching", f"the DPUs, DPUNodes and holds of namespace {request.namespace}")
        workflow.upsert_memo({EPOCH_MEMO: self._epoch})
        # The activity polls for the registry: its input (in history with every attempt) stays small.
        self._attempt = kernel.start_cancellable(
            activity_api.watch_site_dpf,
            request.model_copy(update={"waiters": ()}),
            kernel.options(site_watch_options(request), f"watch DPF objects of {request.namespace}"),
        )
        try:
            # The activity never ends on its own: a timeout is retried with its heartbeat details.
            while True:
                await workflow.wait_condition(
                    lambda: self._attempt.done() or self._hand_over_due(request) or self._probe_asked
                )
                if self._attempt.done() or self._hand_over_due(request):
                    break
                self._probe_asked = False
                if not await self._answers(self._attempt):
                    self._attempt = self._replace(self._attempt, request)
            if self._attempt.done():
                await self._attempt  # failed for good: the run fails with its error
                return
            self._handing_over = True
            try:
                await workflow.wait_condition(
                    lambda: self._reported or self._attempt.done(),
                    timeout=HANDOVER_WAIT,
                    timeout_summary="handover: wait for the watch's last checkpoint",
                )
            except TimeoutError:
                pass  # carry the last checkpoint reported
        except asyncio.CancelledError:
            # Pending polls answer `handover`: the activity then beats at once and learns of the
            # cancel (it reaches an activity only in a heartbeat's answer), not an idle beat later.
            self._handing_over = True
            await kernel.cancel_and_wait(self._attempt)
            raise
        await kernel.cancel_and_wait(self._attempt)
        self._closed = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self._next_run(request), memo={EPOCH_MEMO: self._epoch})

    async def _answers(self, watch: workflow.ActivityHandle[None]) -> bool:
        """Whether the running attempt polls again with a new ping within `SITE_WATCH_PROBE_SECONDS`
        (pending polls answer at once with it): False when its worker died holding it."""
        self._ping += 1
        ping = self._ping
        try:
            await workflow.wait_condition(
                lambda: self._pong >= ping or watch.done(),
                timeout=timedelta(seconds=SITE_WATCH_PROBE_SECONDS),
                timeout_summary="a worker started: is the watch's attempt alive?",
            )
        except TimeoutError:
            return False
        return True

    def _replace(
        self, watch: workflow.ActivityHandle[None], request: SiteWatchInput
    ) -> workflow.ActivityHandle[None]:
        """Start the next attempt at once, resuming from the last checkpoint the silent one
        heartbeated (`SiteWatchInput.taking_over`), and retire the silent one (`_retire`)."""
        workflow.logger.info(
            "the site watch's attempt did not answer within %g s of a worker's start: "
            "its worker died holding it; starting the next attempt now",
            SITE_WATCH_PROBE_SECONDS,
        )
        self._taken_over = False
        self._retiring.append(asyncio.create_task(self._retire(watch)))
        return kernel.start_cancellable(
            activity_api.watch_site_dpf,
            self._next_run(request).model_copy(update={"waiters": (), "taking_over": True}),
            kernel.options(site_watch_options(request), f"watch DPF objects of {request.namespace}"),
        )

    async def _retire(self, watch: workflow.ActivityHandle[None]) -> None:
        """Cancel an attempt taken for dead once the next has polled (it has read the dead one's
        heartbeat details by then: a cancel would drop them, the server ending at once an attempt
        that waits to retry), or after `HANDOVER_WAIT`. The run never waits for this: a dead worker
        never answers the cancel; the server ends the attempt at its heartbeat timeout, no retry."""
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: self._taken_over or watch.done(),
                timeout=HANDOVER_WAIT,
                timeout_summary="retire the silent attempt of the watch",
            )
        watch.cancel()
        with contextlib.suppress(ActivityError, asyncio.CancelledError):
            await watch

    def _hand_over_due(self, request: SiteWatchInput) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() >= request.history_events_per_run
        )

    def _next_run(self, request: SiteWatchInput) -> SiteWatchInput:
        checkpoint = self._checkpoint
        return request.model_copy(
            update={
                "epoch": self._epoch,
                "waiters": self._entries(),
                "waiters_seq": self._seq,
                "resume_from": checkpoint,
                # A checkpoint supersedes the versions read before the first run existed.
                "start_from": {} if checkpoint is not None else request.start_from,
            }
        )

    def _entries(self) -> tuple[DPFWaiter, ...]:
        return tuple(w for host in sorted(self._registry) for w in self._registry[host].values())

    # -- the registry ------------------------------------------------------------------------------
    @workflow.signal(name=DPF_WAITER_SIGNAL)
    def dpf_waiter(self, waiter: DPFWaiter) -> None:
        """Register a workflow run for a host, or (`gone`) remove it; see the module docstring."""
        entries = self._registry.setdefault(waiter.host_id, {})
        held = entries.get(waiter.workflow_id)
        if waiter.gone:
            if held is not None and held.run_id == waiter.run_id:
                del entries[waiter.workflow_id]
            if not entries:
                del self._registry[waiter.host_id]
            return
        if held is not None and held.run_id == waiter.run_id:
            return  # registered already (a restart's join)
        self._seq += 1
        added = waiter.model_copy(update={"seq": self._seq})
        entries[waiter.workflow_id] = added
        self._added.append(added)

    @workflow.update(name=NEXT_WAITERS_UPDATE)
    async def next_waiters(self, poll: WaiterPoll) -> WaiterNews:
        """The registrations after `poll.after`, once there are (or the run hands over)."""
        if poll.checkpoint is not None:
            self._checkpoint = poll.checkpoint
        if self._handing_over:
            self._reported = True
        self._taken_over = self._taken_over or poll.taking_over
        pong = poll.pong
        if pong is not None:
            self._pong = max(self._pong, pong)
        # A poll sent before the latest ping answers at once: its attempt polls again with the ping.
        await workflow.wait_condition(
            lambda: self._seq > poll.after or self._handing_over or (pong is not None and pong < self._ping)
        )
        ping, handover = self._ping, self._handing_over
        if poll.after < self._known or poll.after > self._seq:
            return WaiterNews(seq=self._seq, full=True, waiters=self._entries(), handover=handover, ping=ping)
        # The activity knows every entry up to `after`: keep only the newer ones.
        self._added = [w for w in self._added if w.seq > poll.after]
        self._known = poll.after
        return WaiterNews(seq=self._seq, waiters=tuple(self._added), handover=handover, ping=ping)

    @next_waiters.validator
    def _validate_poll(self, poll: WaiterPoll) -> None:
        if self._closed:
            raise ValueError("this run of the site watch is handing over to the next")

    @workflow.query(name=WAITERS_QUERY)
    def waiters(self) -> list[DPFWaiter]:
        """The registry: every workflow run waiting on a host of the site."""
        return list(self._entries())

    @workflow.signal(name=WORKER_STARTED_SIGNAL)
    def worker_started(self) -> None:
        """A worker of this task queue started (`activities.site_watch.start.ensure_site_watch`):
        check that the running attempt is alive (`_answers`), unless handing over."""
        if not self._handing_over:
            self._probe_asked = True

    # -- the epoch ---------------------------------------------------------------------------------
    @workflow.signal(name=EPOCH_SIGNAL)
    def epoch_raised(self, epoch: int) -> None:
        """The activity saw the API server restart (resourceVersions went backwards)."""
        if epoch > self._epoch:
            self._epoch = epoch
            workflow.upsert_memo({EPOCH_MEMO: self._epoch})

    @workflow.query(name=EPOCH_QUERY)
    def epoch(self) -> int:
        """The watch's epoch: a read tagged with it is ordered against the watch's signals."""
        return self._epoch
