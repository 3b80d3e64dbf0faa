"""One shape for a workflow's DPF watcher: start it, take its signals, restart it, stop it.

Every host workflow that waits on DPF (the host operation, firmware, monitor, removal) holds a
`DPFWatch` (composition, not a base class): it starts the `watch_host_dpf` activity for one host,
takes the states the watcher signals (dropping those of a watcher it replaced), remembers when
each DPU entered its phase (for the status query), and stops the watcher when the workflow is
done with it. The workflow keeps its own signal handler (its name is the workflow's contract)
and passes each state to `accept`.

Cost per host: one long-running activity slot on a worker while watching (the activity holds
no watch of its own: one site watch routes to it), one ScheduleActivityTask and one
ActivityTaskStarted event per watcher started, one RequestCancel (and, with
`WAIT_CANCELLATION_COMPLETED`, one ActivityTaskCanceled) per stop, one signal event per DPF
change; no timers, no polling.

Since `SITE_WATCH_PATCH` (new runs under the ids `contracts.names.dpf_waiter_workflow_ids`):
no watcher activity per host. `start` runs one short `join_site_dpf_watch` activity (it makes
sure the site's one watch, `workflows.site_watch`, runs, and reads the host's state with its
`as_of`), and the site watch signals every later change to this workflow's id. States are
ordered by `as_of` (per kind the resourceVersion, and the watch's epoch), so a signal older than
the read is dropped and a newer one taken; signals arriving while a read is in flight wait for
it. `restart` reads again (our own annotation removal must be seen before DPF's next word).
`stop` only ends a read still in flight, so a completed workflow leaves no pending activity.
Cost per host: 3 events per read (1 at start, 1 per acknowledged reboot) and 1 signal event
per change; no activity slot while waiting. A run under another id (a test's or a script's)
keeps the per-host watcher: the site watch routes by id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Final

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.dpf import (
        DPFVersion,
        HostDPFState,
        HostRef,
        JoinSiteWatchInput,
        WatchCheckpoint,
        WatchHostInput,
    )
    from workflows import common
    from workflows.host_status import DPUClock

TRY_CANCEL = workflow.ActivityCancellationType.TRY_CANCEL
WAIT_CANCELLATION_COMPLETED = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
SITE_WATCH_PATCH: Final = "dpf-site-watch"


class DPFWatch:
    """The DPF watcher of one host and the newest state it signalled.

    Args:
        cancellation: How `stop` ends the activity: `WAIT_CANCELLATION_COMPLETED` waits until
            the watcher has let go (the default); `TRY_CANCEL` only asks (the host operation's
            recorded histories stop it so, and a replaced watcher's late signals are dropped by
            their sequence anyway).
        summary: The watcher's summary in the UI; `{host}` is replaced by the host id.
        on_taken: Called with each state taken (the monitor queues them).
        wait_from_patch: With `TRY_CANCEL`: a patch id from which runs wait instead, so a
            run never ends with its watcher still pending (`CANCEL_REQUESTED` in the UI); runs
            recorded before the patch keep `TRY_CANCEL`. Consulted when a per-host watcher
            starts (the site watch's read is always waited for).
    """

    def __init__(
        self,
        *,
        cancellation: workflow.ActivityCancellationType = WAIT_CANCELLATION_COMPLETED,
        summary: str = "watch DPF of {host}",
        on_taken: Callable[[HostDPFState], None] | None = None,
        wait_from_patch: str | None = None,
    ) -> None:
        self.state: HostDPFState | None = None
        self.changes = 0  # states taken: a wait's progress marker
        self.clock = DPUClock()
        self._cancellation = cancellation
        self._summary = summary
        self._host: HostRef | None = None
        self._dpu_ids: tuple[str, ...] = ()
        self._handle: workflow.ActivityHandle[None] | None = None
        self._base = 0  # states numbered at or below this come from a replaced watcher
        self._on_taken = on_taken
        self._wait_from_patch = wait_from_patch
        self._replaced: list[workflow.ActivityHandle[None]] = []  # cancelled by a restart
        self._site = False  # routed by the site watch (SITE_WATCH_PATCH)
        self._read: workflow.ActivityHandle[HostDPFState] | None = None  # the join in flight
        self._read_failure: BaseException | None = None
        self._held: list[HostDPFState] = []  # signals that came while the read was in flight

    def start(self, host: HostRef, dpu_ids: Iterable[str] = (), baseline: HostDPFState | None = None) -> None:
        """Start watching `host`; `dpu_ids` are the DPUs whose phase times the clock keeps (all
        of the host's when empty); a `baseline` is what the watcher compares its first listing to."""
        self._host, self._dpu_ids = host, tuple(dpu_ids)
        # A live run decides by its id (the site watch routes by id); a replay by the marker in
        # its history, so a history replayed under another id (tools, tests) decides the same.
        routed = workflow.info().workflow_id in names.dpf_waiter_workflow_ids(host.host_id)
        if self._site or ((routed or workflow.unsafe.is_replaying()) and workflow.patched(SITE_WATCH_PATCH)):
            self._site = True
            self._join()
            return
        patch = self._wait_from_patch
        if self._cancellation == TRY_CANCEL and patch and workflow.patched(patch):
            self._cancellation = WAIT_CANCELLATION_COMPLETED
        options = common.options(
            common.WATCHER, self._summary.format(host=host.host_id), cancellation_type=self._cancellation
        )
        checkpoint = None if baseline is None else WatchCheckpoint(state=baseline)
        self._handle = workflow.start_activity(
            activity_api.watch_host_dpf,
            WatchHostInput(
                host=host, heartbeat_seconds=common.WATCHER_HEARTBEAT_SECONDS, resume_from=checkpoint
            ),
            **options,
        )

    @property
    def site_routed(self) -> bool:
        """True when the site watch routes this host's changes: the first state is then the read
        that joined it, taken whether or not anything changed."""
        return self._site

    def accept(self, state: HostDPFState) -> bool:
        """Take a signalled state, unless a watcher this one replaced sent it; True when taken.

        A retried attempt of the current watcher may number from an older checkpoint, but its
        listing is fresh, so it is taken."""
        if self._site:
            if self._read is not None:
                self._held.append(state)
                return False
            return self._merge(state)
        if state.sequence <= self._base:
            return False
        self.adopt(state)
        return True

    def adopt(self, state: HostDPFState) -> None:
        """Take a state read by the workflow itself (e.g. `read_host_dpf_state`)."""
        self.state = state
        self.changes += 1
        ids = self._dpu_ids or tuple(d.dpu_id for d in state.dpus if d.dpu_id is not None)
        self.clock.observe(state, ids, workflow.now())
        if self._on_taken is not None:
            self._on_taken(state)

    def _merge(self, incoming: HostDPFState) -> bool:
        """Keep, per kind, the newer of the state held and `incoming` (by `as_of`); True when
        anything newer with other content was taken. A newer epoch wins whole, an older loses."""
        current = self.state
        if current is None or current.as_of is None or incoming.as_of is None:
            self.adopt(incoming)
            return True
        have, new = current.as_of, incoming.as_of
        if new.epoch != have.epoch:
            if new.epoch > have.epoch:
                self.adopt(incoming)
            return new.epoch > have.epoch
        parts: dict[str, Any] = {}
        if new.dpus > have.dpus:
            parts["dpus"] = incoming.dpus
        if new.node > have.node:
            parts["node"] = incoming.node
        if new.hold > have.hold:
            parts["hold"] = incoming.hold
        version = DPFVersion(
            epoch=have.epoch, dpus=max(have.dpus, new.dpus), node=max(have.node, new.node),
            hold=max(have.hold, new.hold),
        )  # fmt: skip
        merged = current.model_copy(update={**parts, "as_of": version})
        if merged.content() == current.content():
            self.state = merged  # nothing new to decide on; only the versions moved
            return False
        self.adopt(merged)
        return True

    def _join(self) -> None:
        """Read the host's state (and make sure its site is watched); signals wait for the read."""
        assert self._host is not None
        options = common.options(
            common.KUBE_READ,
            f"join the site's DPF watch for {self._host.host_id}",
            cancellation_type=WAIT_CANCELLATION_COMPLETED,
        )
        handle = workflow.start_activity(
            activity_api.join_site_dpf_watch, JoinSiteWatchInput(host=self._host), **options
        )
        self._read = handle
        handle.add_done_callback(lambda done: self._joined(handle))

    def _joined(self, handle: workflow.ActivityHandle[HostDPFState]) -> None:
        if handle is not self._read:
            _retrieve(handle)  # a read replaced by a newer one
            return
        self._read = None
        if handle.cancelled() or handle.exception() is not None:
            if not handle.cancelled():
                self._read_failure = handle.exception()
            return
        # The read is the truth when it was taken: it replaces what was held; signals that came
        # meanwhile are then kept only where newer.
        self.adopt(handle.result())
        held, self._held = self._held, []
        for state in held:
            self._merge(state)

    def restart(self, baseline: HostDPFState) -> None:
        """Watch again from `baseline` (numbered above every state seen so far); the replaced
        watcher's signals are dropped from now on."""
        assert self._host is not None, "restart of a watcher never started"
        if self._site:
            self.state = baseline
            if self._read is not None:
                self._read.cancel()
            self._join()
            return
        self._base = max(self._base, baseline.sequence, self.state.sequence if self.state else 0) + 1_000_000
        renumbered = baseline.model_copy(update={"sequence": self._base})
        self.state = renumbered
        replaced = self._cancel()
        if replaced is not None and self._cancellation != TRY_CANCEL:
            self._replaced.append(replaced)
        self.start(self._host, self._dpu_ids, renumbered)

    def failure(self) -> BaseException | None:
        """The watcher's error when it ended on its own (it runs until cancelled); with the
        site watch, the error of a read that failed for good."""
        if self._site:
            return self._read_failure
        handle = self._handle
        if handle is None or not handle.done() or handle.cancelled():
            return None
        return handle.exception()

    async def stop(self) -> None:
        """Stop the watcher (a no-op when it is not running)."""
        if self._site:
            read, self._read = self._read, None
            if read is not None and not read.done():
                read.cancel()
                await asyncio.gather(read, return_exceptions=True)
            return
        handle = self._cancel()
        if self._cancellation == TRY_CANCEL:
            return
        # Watchers a restart replaced were cancelled and not waited for: wait for them too (each
        # has ended long before, at its next heartbeat), so the run ends with none pending.
        replaced, self._replaced = self._replaced, []
        await asyncio.gather(*(h for h in replaced if not h.done()), return_exceptions=True)
        if handle is None:
            return
        try:
            await handle
        except ActivityError as err:
            if not isinstance(err.cause, CancelledError):
                workflow.logger.warning("the DPF watcher ended with %s", err.cause)

    def _cancel(self) -> workflow.ActivityHandle[None] | None:
        handle, self._handle = self._handle, None
        if handle is None or handle.done():
            return None
        handle.cancel()
        handle.add_done_callback(_retrieve)
        return handle


def _retrieve(watcher: asyncio.Future[Any]) -> None:
    # A cancelled watcher ends with an ActivityError nobody may await: take it, so it is not logged.
    if not watcher.cancelled():
        watcher.exception()
