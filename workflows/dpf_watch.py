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
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from metalflow import activity_api
    from metalflow.models.dpf import HostDPFState, HostRef, WatchCheckpoint, WatchHostInput
    from workflows import common
    from workflows.host_status import DPUClock

TRY_CANCEL = workflow.ActivityCancellationType.TRY_CANCEL
WAIT_CANCELLATION_COMPLETED = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED


class DPFWatch:
    """The DPF watcher of one host and the newest state it signalled.

    Args:
        cancellation: How `stop` ends the activity: `WAIT_CANCELLATION_COMPLETED` waits until
            the watcher has let go (the default); `TRY_CANCEL` only asks (the host operation's
            recorded histories stop it so, and a replaced watcher's late signals are dropped by
            their sequence anyway).
        summary: The watcher's summary in the UI; `{host}` is replaced by the host id.
    """

    def __init__(
        self,
        *,
        cancellation: workflow.ActivityCancellationType = WAIT_CANCELLATION_COMPLETED,
        summary: str = "watch DPF of {host}",
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

    def start(self, host: HostRef, dpu_ids: Iterable[str] = (), baseline: HostDPFState | None = None) -> None:
        """Start watching `host`; `dpu_ids` are the DPUs whose phase times the clock keeps (all
        of the host's when empty); a `baseline` is what the watcher compares its first listing to."""
        self._host, self._dpu_ids = host, tuple(dpu_ids)
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

    def accept(self, state: HostDPFState) -> bool:
        """Take a signalled state, unless a watcher this one replaced sent it; True when taken.

        A retried attempt of the current watcher may number from an older checkpoint, but its
        listing is fresh, so it is taken."""
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

    def restart(self, baseline: HostDPFState) -> None:
        """Watch again from `baseline` (numbered above every state seen so far); the replaced
        watcher's signals are dropped from now on."""
        assert self._host is not None, "restart of a watcher never started"
        self._base = max(self._base, baseline.sequence, self.state.sequence if self.state else 0) + 1_000_000
        renumbered = baseline.model_copy(update={"sequence": self._base})
        self.state = renumbered
        self._cancel()
        self.start(self._host, self._dpu_ids, renumbered)

    def failure(self) -> BaseException | None:
        """The watcher's error when it ended on its own (it runs until cancelled)."""
        handle = self._handle
        if handle is None or not handle.done() or handle.cancelled():
            return None
        return handle.exception()

    async def stop(self) -> None:
        """Stop the watcher (a no-op when it is not running)."""
        handle = self._cancel()
        if handle is None or self._cancellation == TRY_CANCEL:
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
