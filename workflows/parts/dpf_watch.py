"""One shape for a workflow's wait on a host's DPF objects: join the site's watch, take its
signals, read again, stop.

Every host workflow that waits on DPF (the host operation, firmware, monitor, removal) holds a
`DPFWatch` (composition, not a base class). `start` runs one short `join_site_dpf_watch`
activity: it registers this workflow run for the host with the site's one watch
(`workflows.site_watch.workflow`, started if none runs) and then reads the host's state with its
`as_of`. From then on the site watch signals every change of the host to this workflow's id,
whatever the id is (a test's, a new operation type's). The workflow keeps its own signal handler
(its name, `DPF_STATE_CHANGED_SIGNAL`, is the workflow's contract) and passes each state to
`accept`; `DPFWatch` remembers when each DPU entered its phase (for the status query).

Ordering: states are ordered by `as_of` (per kind the resourceVersion, and the watch's epoch):
per kind, a signal older than what is held is dropped and a newer one taken (`_merge`); a newer
epoch wins whole. Signals that arrive while a read is in flight wait for it, then are merged.
Because the join registers before it reads, every change of the host is in the read or in a
later signal (the argument is in `activities.site_watch`, "Ordering").

`written` takes the workflow's own write of the DPUNode, as its answer gives it (the node as
written and its resourceVersion), as the node's state as of that version: the host operation's
removal of the reboot-required annotation must be seen before DPF's next word, and a signal the
watch sent before the write holds an older node version (the watch applies a resource's events
in resourceVersion order), so `_merge` drops it; DPF's next word comes after the write and is
newer. `restart` reads again instead (joining again, which the registry takes as the same
registration) where the answer gives no version. `stop` ends a read still in flight (and any a
restart replaced) and waits until they have ended, so a completed workflow leaves no pending
activity. It does not deregister: the site watch drops the entry when a signal to this id
answers NotFound (`activities.site_watch`).

Cost per host: 3 events per read (1 at start, 1 per restart; `written` reads nothing) and 1
signal event per change; no activity slot while waiting, no timers, no polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.models.dpf import DPFVersion, DPUNodeState, HostDPFState, HostRef, JoinSiteWatchInput
    from workflows import kernel


class DPUClock:
    """When each DPU entered its current phase, as the workflow saw it (workflow time)."""

    def __init__(self) -> None:
        self.phases: dict[str, tuple[str, datetime]] = {}

    def observe(self, state: HostDPFState, dpu_ids: Iterable[str], now: datetime) -> None:
        """Record phase changes in a new state."""
        for dpu_id in dpu_ids:
            dpu = state.dpu(dpu_id)
            phase = "" if dpu is None else ("Deleting" if dpu.deleting else dpu.phase)
            seen = self.phases.get(dpu_id)
            if seen is None or seen[0] != phase:
                self.phases[dpu_id] = (phase, now)


class DPFWatch:
    """A workflow's wait on one host's DPF objects and the newest state it took.

    Args:
        on_taken: Called with each state taken (the monitor queues them).
    """

    def __init__(self, on_taken: Callable[[HostDPFState], None] | None = None) -> None:
        self.state: HostDPFState | None = None
        self.changes = 0  # states taken: a wait's progress marker
        self.clock = DPUClock()
        self._on_taken = on_taken
        self._host: HostRef | None = None
        self._dpu_ids: tuple[str, ...] = ()
        self._read: workflow.ActivityHandle[HostDPFState] | None = None  # the join in flight
        self._replaced: list[workflow.ActivityHandle[HostDPFState]] = []  # joins a restart cancelled
        self._read_failure: BaseException | None = None
        self._held: list[HostDPFState] = []  # signals that came while the read was in flight

    def start(
        self, host: HostRef, dpu_ids: Iterable[str] = (), *, bound_seconds: float | None = None
    ) -> None:
        """Join the site's watch for `host`; `dpu_ids` are the DPUs whose phase times the clock
        keeps (all of the host's when empty). The join's read is the first state taken: a
        workflow waits for `state` rather than reading again. `bound_seconds`: the first join's
        retries end after that long (then `failure` holds its timeout; `rejoin` tries again)."""
        self._host, self._dpu_ids = host, tuple(dpu_ids)
        self._join(bound_seconds)

    def rejoin(self, bound_seconds: float | None = None) -> None:
        """Join again after the first join failed (`failure`), e.g. once an operator said retry."""
        self._read_failure = None
        self._join(bound_seconds)

    def accept(self, state: HostDPFState) -> bool:
        """Take a signalled state where it is newer than what is held; True when anything new was
        taken. While a read is in flight the state waits for it (False)."""
        if self._read is not None:
            self._held.append(state)
            return False
        return self._merge(state)

    def adopt(self, state: HostDPFState) -> None:
        """Take a state as it is (a read, a merged signal): `adopt_read` orders a read of its own."""
        self.state = state
        self.changes += 1
        ids = self._dpu_ids or tuple(d.dpu_id for d in state.dpus if d.dpu_id is not None)
        self.clock.observe(state, ids, workflow.now())
        if self._on_taken is not None:
            self._on_taken(state)

    def adopt_read(self, state: HostDPFState) -> None:
        """Take a read of the workflow's own (`read_host_dpf_state`), ordered (`ordered_read`)."""
        self.adopt(ordered_read(self.state, state))

    def _merge(self, incoming: HostDPFState) -> bool:
        """Keep, per kind, the newer of the state held and `incoming` (`merge`); True when
        anything newer with other content was taken."""
        state, taken = merge(self.state, incoming)
        if taken:
            self.adopt(state)
        else:
            self.state = state  # nothing new to decide on; at most the versions moved
        return taken

    def _join(self, bound_seconds: float | None = None) -> None:
        """Register with the site's watch and read the host's state; signals wait for the read."""
        assert self._host is not None
        preset = kernel.KUBE_READ
        if bound_seconds is not None:
            preset = kernel.bounded(preset, bound_seconds)
        handle = kernel.start_cancellable(
            activity_api.join_site_dpf_watch,
            JoinSiteWatchInput(host=self._host),
            kernel.options(preset, f"join the site's DPF watch for {self._host.host_id}"),
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

    def written(self, node: DPUNodeState | None, node_version: int) -> bool:
        """Take the workflow's own write of the host's DPUNode (`node` as its answer gave it, at
        `node_version`) as the node's state as of that version, where it is newer than what is
        held; False when it cannot be ordered (no version, no ordered state held, a read in
        flight, whose result would replace it): then `restart`."""
        if self._read is not None:
            return False
        state = as_written(self.state, node, node_version)
        if state is None:
            return False
        if state is not self.state:
            self.adopt(state)
        return True

    def restart(self, baseline: HostDPFState) -> None:
        """Hold `baseline` and read again (a join); signals wait for the new read."""
        assert self._host is not None, "restart of a watch never started"
        self.state = baseline
        if self._read is not None and not self._read.done():
            self._read.cancel()
            self._replaced.append(self._read)
        self._join()

    def failure(self) -> BaseException | None:
        """The error of a read that failed for good (None: none did)."""
        return self._read_failure

    async def stop(self) -> None:
        """End a read still in flight and wait until it has ended (a no-op when none is)."""
        calls = [*self._replaced, *([self._read] if self._read is not None else [])]
        self._read, self._replaced = None, []
        for call in calls:
            await kernel.cancel_and_wait(call)


def ordered_read(held: HostDPFState | None, read: HostDPFState) -> HostDPFState:
    """A read of the workflow's own (`read_host_dpf_state`) to hold: its content is the newest;
    its versions (the DPU list's and each object's resourceVersion; an object's is sound for it:
    it did not change between its version and the read) order later signals, per kind at least
    the versions held, in the epoch held. A read without versions, or with nothing ordered held
    (no epoch to put it in), is held unordered: the next signal is taken whole."""
    if read.as_of is None:
        return read
    if held is None or held.as_of is None:
        return read.model_copy(update={"as_of": None})
    have, new = held.as_of, read.as_of
    version = DPFVersion(
        epoch=have.epoch, dpus=max(have.dpus, new.dpus), node=max(have.node, new.node),
        hold=max(have.hold, new.hold),
    )  # fmt: skip
    return read.model_copy(update={"as_of": version})


def merge(current: HostDPFState | None, incoming: HostDPFState) -> tuple[HostDPFState, bool]:
    """The state to hold after `incoming`, and whether it is news (other content, newer): per
    kind the newer of the two by `as_of`; a newer epoch wins whole, an older one loses; an
    unordered state (no `as_of`) is taken whole."""
    if current is None or current.as_of is None or incoming.as_of is None:
        return incoming, True
    have, new = current.as_of, incoming.as_of
    if new.epoch != have.epoch:
        return (incoming, True) if new.epoch > have.epoch else (current, False)
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
    return merged, merged.content() != current.content()


def as_written(
    current: HostDPFState | None, node: DPUNodeState | None, node_version: int
) -> HostDPFState | None:
    """`current` with the DPUNode as the workflow's own write left it at `node_version` (the
    write's answer), or `current` itself when it already holds that version or a newer one;
    None when the two cannot be ordered (no version, or no ordered state held)."""
    if node_version <= 0 or current is None or current.as_of is None:
        return None
    if current.as_of.node >= node_version:
        return current
    version = current.as_of.model_copy(update={"node": node_version})
    return current.model_copy(update={"node": node, "as_of": version})


def _retrieve(call: asyncio.Future[Any]) -> None:
    # A cancelled read ends with an ActivityError nobody may await: take it, so it is not logged.
    if not call.cancelled():
        call.exception()
