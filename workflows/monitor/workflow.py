"""`HostMonitorWorkflow` (`monitor/host-<id>`): one per host, long-running (flow 5 of
docs/DOMAIN.md section 2.8).

Runbook, on every change the DPF watcher signals:
1. A DPU that was `Ready` and is now `Node Effect` (its critical DPU services are down) is
   degraded: take the host out of the pool at once (label `metalflow.io/pool=out-of-pool` on its
   DPUNode, search attribute `PoolState`, Phase).
2. A degraded DPU back to `Ready`: when none is left, put the host back in the pool.
3. A DPU degraded for longer than `policy.reprovision_after_seconds`, when
   `policy.auto_reprovision`: ask the host's owner (`host/<id>`, update `request_reprovision`)
   through the `request_host_reprovision` activity, so the entity's gates (one operation at a
   time, approval on an assigned host) decide as for any operator. A refusal (the host is busy,
   or no entity runs) is shown in the status and asked again one deadline later. The monitor
   never starts a reprovision itself: it would bypass those gates and does not know the host's
   boot generation, which only the entity keeps.

Only a fall from `Ready` counts: a DPU passing `Node Effect` while it is provisioned or
reprovisioned is held by design. A recreated DPU (new uid) restarts its degraded clock.

Unplanned resets at rest (the operation's rule, `dpf_barrier.unplanned_change`, on consecutive
states the watcher signals): a DPU that was `Ready` and whose agent restarted
(`agentLastStartupTime` moved; DPF v26) or that went back to an earlier phase by a move DPF does
not make itself. The same reasoning as above: only a DPU at rest counts. A DPU that was not
`Ready` is being moved (provisioned, reprovisioned, recovering) and a recreated DPU (new uid) is a
new object; an operation records what happens to its own DPUs (`HostOperationWorkflow`,
`unplanned_resets`). A reboot, reset or firmware cycle metalflow runs on a host at rest restarts
its Ready DPUs too, so before recording, the monitor asks the host's entity
(`find_host_operation`, its `status` query) for an operation running or ended since the state
before: one found explains the reset and nothing is recorded. Recorded: the status
(`unplanned_resets`, the newest `UNPLANNED_KEPT`, with time and what changed; `unplanned_total`),
the memo `unplanned_resets` (one line each, shown in the Temporal UI), a WARNING line, and the
Kubernetes Event `UnplannedReset` (Warning) about the host's DPUNode (`kernel.report`: no phase
change, no history event). Carried across continue-as-new (`MonitorMemory`: the list, the total,
each DPU's last agent start time, when the last state was handled), so a reset is recorded once.

Priority: `metalflow.monitors.start_monitor` starts it at Temporal task priority 4, below the
operations' default 3, and its activities and continued runs inherit it: thousands of monitors
starting at once do not delay a reboot (the reasoning and its cost are in that module).

History stays small: at most ~10 events per DPF change (the signal, its workflow task, a pool
label write when the state changes), so a run's worst case is about 20 + 10 x
`policy.events_per_run` (default 500: ~5,000 events, under a tenth of Temporal's limit). A
reset at rest adds, per state that shows one (several DPUs in one state: one), the entity's
check (an activity and its workflow task, 6 events) and, when recorded, one memo upsert: 7 more,
so a state with a reset costs at most ~17 and the bound stays 20 + 17 x `events_per_run`; the
memo holds at most `UNPLANNED_KEPT` lines (~2 KB). Per host at rest: no activity, no timer while
nothing changes; the entity's check only when a Ready DPU resets. After
`policy.events_per_run` changes (the read that starts a run is not one), or when Temporal
suggests it, the monitor cancels its watcher, waits for its handlers and continues-as-new
carrying its memory (`MonitorMemory`); the next run's watcher lists the world again, and a
fall from `Ready` that happened in between is still seen because the last phases are carried.

Stop with the update `abort`: the monitor reads the world once more, sets the pool label as the
world says (out only while a degraded DPU is still in `Node Effect`) and ends. An abort accepted
while a run hands over to the next is carried in its memory: the next run stops at once. The
final look retries for at most `policy.kube_call_timeout_seconds` (a Kubernetes outage): past
that the monitor stops anyway, its phase and result saying the label was left as last written.
A call in flight when the abort arrives is cancelled and waited for (at most its attempt in
flight: nothing is retried after a cancel), so the monitor ends with no call pending.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import ClassVar, Final, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.control import STATUS_QUERY
    from contracts.models.dpf import (
        DPF_STATE_CHANGED_SIGNAL,
        PHASE_NODE_EFFECT,
        PHASE_READY,
        DPUProgress,
        DPUState,
        HostDPFState,
        HostRef,
    )
    from contracts.models.monitor import (
        IN_POOL,
        OUT_OF_POOL,
        DegradedDPU,
        HostMonitorInput,
        HostMonitorResult,
        HostMonitorStatus,
        MonitorMemory,
        OwnerOperationInput,
        OwnerReprovisionInput,
        PoolChange,
        SetPoolStateInput,
        UnplannedReset,
    )
    from contracts.wording import iso_z
    from workflows import kernel
    from workflows.kernel import KUBE_READ, KUBE_WRITE, bounded, describe_failure, options
    from workflows.parts import dpf_barrier
    from workflows.parts.dpf_watch import DPFWatch

HISTORY_KEPT: Final = 20  # pool changes shown in the status and carried across runs
UNPLANNED_KEPT: Final = 20  # unplanned resets shown in the status and memo, carried across runs
UNPLANNED_RESET: Final = "unplanned-reset"  # the occurrence the worker's Events report (`kernel.report`)
OWNER_REQUEST: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=60),
    "retry_policy": KUBE_WRITE["retry_policy"],
}
WATCHING: Final = "watching"
ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


def reset_at_rest(before: tuple[str, str, str] | None, dpu: DPUState) -> str | None:
    """What changed on a DPU that was `Ready` (`before`: its uid, phase and agent start time as
    last seen) by a move DPF does not make itself (`dpf_barrier.unplanned_change`), or None: a new
    DPU object, or one not `Ready` before (metalflow or DPF is moving it), is not at rest."""
    if before is None or before[0] != dpu.uid or before[1] != PHASE_READY:
        return None
    found = dpf_barrier.unplanned_change(before, dpu)
    if found == "restarted":
        return f"restarted (agentLastStartupTime {before[2]} -> {dpu.agent_started_at}) in {dpu.phase}"
    return found


@workflow.defn(name="HostMonitorWorkflow")
class HostMonitorWorkflow(kernel.Abortable):
    """Take a host out of the pool while a DPU's critical services are down; reprovision past a deadline."""

    ENDED: ClassVar = ("stopped", "failed", "cancelled")

    @workflow.init
    def __init__(self, request: HostMonitorInput) -> None:
        super().__init__()
        self._request = request
        memory = request.memory or MonitorMemory(started_at=workflow.now())
        self._pool = memory.pool_state
        self._phases = dict(memory.last_phases)
        self._uids = dict(memory.last_uids)
        self._started = dict(memory.last_started)  # dpu_id -> agentLastStartupTime last seen ("" unknown)
        self._unplanned = list(memory.unplanned)
        self._unplanned_total = memory.unplanned_total
        self._looked_at = memory.looked_at  # when the last state was handled: a reset came after it
        self._since = dict(memory.since)
        self._degraded = {d.dpu_id: d for d in memory.degraded}
        self._history = list(memory.history)
        self._events = memory.events_seen
        self._runs = memory.runs
        self._reprovisions = memory.reprovisions_requested
        self._requests = list(memory.requests)
        self._started_at = memory.started_at or workflow.now()
        self._pending: list[HostDPFState] = []
        self._watch = DPFWatch(on_taken=self._pending.append)
        self.abort_request = memory.stop  # accepted means done, across runs too
        self._label_checked = False  # the label is confirmed once per run, then written on changes
        self._adopting = False  # the first state may confirm an out-of-pool label an earlier monitor left
        self._bound: float | None = None  # seconds a call may retry in all (the final look); None: no bound

    @workflow.run
    async def run(self, request: HostMonitorInput) -> HostMonitorResult:
        """Watch, react, continue-as-new; see the module docstring."""
        try:
            return await self._runbook(request)
        except (FailureError, asyncio.CancelledError) as err:
            # The watch is stopped by the runbook; the label stays as last written, which is
            # what the world was when this monitor last looked.
            await self.end_early(err, f"The pool label is left {self._pool}")
            raise

    async def _runbook(self, request: HostMonitorInput) -> HostMonitorResult:
        workflow.upsert_search_attributes(
            [
                names.HOST_ID.value_set(request.host_id),
                names.OPERATION.value_set(names.MONITOR),
                names.SITE.value_set(request.site),
                names.POOL_STATE.value_set(self._pool),
            ]
        )
        self.enter(WATCHING, f"run {self._runs}; pool state {self._pool}")
        if request.memory is None:
            await self._adopt_pool_label()
        if self.abort_request is None:  # not carried over: watch until an abort
            await self._watch_until_stopped(request)
        stop = self.abort_request
        assert stop is not None
        # Stopped: one last look at the world, so the label says what is true now.
        failed: str | None = None
        self._bound = request.policy.kube_call_timeout_seconds
        try:
            await self._handle(await self._read_dpf_state())
        except ActivityError as err:  # Kubernetes stayed away past the bound: stop anyway
            failed = f"the final look failed ({describe_failure(err)}): the label is left as last written"
        self.enter(
            "stopped",
            f"stopped by {stop.requested_by}; pool state {self._pool}" + (f"; {failed}" if failed else ""),
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        return HostMonitorResult(
            host_id=request.host_id,
            pool_state=self._pool,
            events_seen=self._events,
            runs=self._runs,
            stopped_by=stop.requested_by,
            finished_at=workflow.now(),
            final_look_failed=failed,
        )

    async def _watch_until_stopped(self, request: HostMonitorInput) -> None:
        """React to every change until an abort; continue-as-new when the history grows."""
        self._watch.start(HostRef(host_id=request.host_id, namespace=request.namespace))
        # A run's first state is the read that joins the site watch: what the world is, not a
        # change. Counted, it would make every run hand over at once with `events_per_run=1` (a
        # run per read, forever, with nothing changing).
        uncounted = 1
        events_this_run = 0
        try:
            while True:
                await self._wait_for_news()
                while self._pending:
                    await self._handle(self._pending.pop(0))
                    if uncounted:
                        uncounted -= 1
                    else:
                        events_this_run += 1
                await self._reprovision_overdue()
                if self.aborting:
                    break
                if (
                    events_this_run >= request.policy.events_per_run
                    or workflow.info().is_continue_as_new_suggested()
                ):
                    await self._watch.stop()
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    # An abort accepted during these awaits travels in the memory (`stop`).
                    workflow.continue_as_new(
                        request.model_copy(update={"memory": self._memory(next_run=True)})
                    )
        finally:
            await self._watch.stop()

    # -- steps -------------------------------------------------------------------------------------
    async def _adopt_pool_label(self) -> None:
        """A first run continues what an earlier monitor left: a host labelled out stays out while a
        DPU is still in Node Effect (`_handle` of the first state decides)."""
        found = await self._abortable(
            activity_api.read_host_pool_state,
            self._pool_input(IN_POOL),
            options(KUBE_READ, f"pool label of {self._request.host_id}"),
        )
        if found is not None and found.state == OUT_OF_POOL:
            self._pool = OUT_OF_POOL
            self._adopting = True

    async def _wait_for_news(self) -> None:
        deadline = self._next_deadline()
        timeout = None if deadline is None else max(deadline - workflow.now(), timedelta(0))
        try:
            await workflow.wait_condition(
                lambda: (
                    bool(self._pending) or self.aborting or workflow.info().is_continue_as_new_suggested()
                ),
                timeout=timeout,
            )
        except TimeoutError:
            pass  # a reprovision deadline passed

    async def _handle(self, state: HostDPFState) -> None:
        now = workflow.now()
        self._events += 1
        adopting, self._adopting = self._adopting, False
        looked_at, self._looked_at = self._looked_at, now
        resets: list[UnplannedReset] = []
        for dpu in state.dpus:
            if dpu.dpu_id is None or dpu.deleting:
                continue
            found = self._reset_at_rest(dpu)
            if found is not None:
                resets.append(UnplannedReset(at=now, dpu_id=dpu.dpu_id, change=found))
            dpu_id, previous = dpu.dpu_id, self._phases.get(dpu.dpu_id)
            if self._uids.get(dpu_id) not in (None, dpu.uid):
                previous = None  # recreated: its history starts again
                if dpu_id in self._degraded:  # being reprovisioned: its deadline starts again
                    self._degraded[dpu_id] = self._degraded[dpu_id].model_copy(
                        update={"uid": dpu.uid, "since": now}
                    )
            if previous != dpu.phase:
                self._since[dpu_id] = now
            fell = previous == PHASE_READY or (adopting and previous is None)
            if dpu.phase == PHASE_NODE_EFFECT and fell and dpu_id not in self._degraded:
                self._degraded[dpu_id] = DegradedDPU(dpu_id=dpu_id, uid=dpu.uid, since=now)
            elif dpu.phase == PHASE_READY:
                self._degraded.pop(dpu_id, None)
            self._phases[dpu_id], self._uids[dpu_id] = dpu.phase, dpu.uid
        if state.node is None:
            self._degraded.clear()  # the DPUNode is gone (removed): nothing left to take out of the pool
        if resets:
            await self._record_unplanned(resets, looked_at or self._started_at)
        await self._apply_pool_state()

    def _reset_at_rest(self, dpu: DPUState) -> str | None:
        """`reset_at_rest` against this DPU as last seen; remembers its agent's start time."""
        assert dpu.dpu_id is not None
        dpu_id = dpu.dpu_id
        before = None
        if dpu_id in self._uids:
            before = (self._uids[dpu_id], self._phases.get(dpu_id, ""), self._started.get(dpu_id, ""))
        same = before is not None and before[0] == dpu.uid
        # A state without the agent's start time (before DPF v26) keeps the last known.
        self._started[dpu_id] = dpu.agent_started_at or (before[2] if before is not None and same else "")
        return reset_at_rest(before, dpu)

    async def _record_unplanned(self, resets: list[UnplannedReset], since: datetime) -> None:
        """Record resets at rest that no operation of the host explains: the entity is asked
        whether it ran one since the last state (`find_host_operation`); a reboot, reset or
        firmware cycle of metalflow's restarts Ready DPUs too, and an operation records what it
        sees itself. Recorded: the status, the memo (one upsert), one Event, one WARNING line."""
        what = "; ".join(f"DPU {r.dpu_id} {r.change}" for r in resets)
        try:
            owner = await self._abortable(
                activity_api.find_host_operation,
                OwnerOperationInput(
                    host_id=self._request.host_id, since=since, dpu_ids=tuple(r.dpu_id for r in resets)
                ),
                self._options(OWNER_REQUEST, f"did metalflow reset {self._request.host_id}?"),
            )
        except ActivityError as err:  # only a bounded call (the final look) gives up: record it
            unknown = f"; metalflow's operations unknown ({describe_failure(err)})"
            resets = [r.model_copy(update={"change": r.change + unknown}) for r in resets]
        else:
            if owner is None:
                return  # stopped while asking: the final look reads the world again
            if owner.workflow_id is not None:
                workflow.logger.info("%s, explained by %s (%s)", what, owner.workflow_id, owner.message)
                return
        self._unplanned = [*self._unplanned, *resets][-UNPLANNED_KEPT:]
        self._unplanned_total += len(resets)
        workflow.upsert_memo({"unplanned_resets": [r.line() for r in self._unplanned]})
        kernel.report(
            UNPLANNED_RESET, f"{what}: not by metalflow (no operation of the host since {iso_z(since)})"
        )

    async def _apply_pool_state(self) -> None:
        wanted = OUT_OF_POOL if self._degraded else IN_POOL
        if wanted == self._pool and self._label_checked:
            return  # the label was written (or confirmed) this run: no activity per DPF change
        self._label_checked = True
        reason = (
            "critical DPU services down on " + ", ".join(sorted(self._degraded))
            if self._degraded
            else "every DPU's services are up"
        )
        result = await self._abortable(
            activity_api.set_host_pool_state,
            self._pool_input(wanted, reason),
            self._options(KUBE_WRITE, f"{self._request.host_id} {wanted}"),
        )
        if result is None:  # stopped meanwhile: the final look writes the label the world needs
            self._label_checked = False
            return
        if wanted == self._pool and not result.changed:
            return
        if wanted != self._pool:
            self._history = [*self._history, PoolChange(at=workflow.now(), state=wanted, reason=reason)][
                -HISTORY_KEPT:
            ]
        self._pool = wanted
        workflow.upsert_search_attributes([names.POOL_STATE.value_set(wanted)])
        phase = "host-out-of-pool" if wanted == OUT_OF_POOL else WATCHING
        self.enter(phase, reason)

    async def _reprovision_overdue(self) -> None:
        policy = self._request.policy
        if not policy.auto_reprovision:
            return
        now = workflow.now()
        due = [d for d in self._degraded.values() if self._due_at(d) <= now]
        if not due:
            return
        ids = tuple(sorted(d.dpu_id for d in due))
        self.enter("requesting-reprovision", f"DPUs {', '.join(ids)} in Node Effect past the deadline")
        answer = await self._abortable(
            activity_api.request_host_reprovision,
            OwnerReprovisionInput(
                host_id=self._request.host_id,
                dpu_ids=ids,
                requested_by=workflow.info().workflow_id,
                reason=f"critical DPU services down for more than {policy.reprovision_after_seconds:g} s",
            ),
            options(OWNER_REQUEST, f"ask host/{self._request.host_id} to reprovision"),
        )
        if answer is None:
            return  # stopped meanwhile: nothing was asked, or the entity's answer is not waited for
        outcome = f"{answer.outcome}: {answer.workflow_id or answer.message}"
        if answer.outcome in ("accepted", "awaiting-approval"):
            self._reprovisions += 1
        self._requests = [*self._requests, f"{', '.join(ids)}: {outcome}"][-HISTORY_KEPT:]
        for dpu in due:
            self._degraded[dpu.dpu_id] = dpu.model_copy(
                update={"reprovision_asked_at": now, "reprovision_outcome": outcome}
            )
        self.enter("host-out-of-pool", f"reprovision of {', '.join(ids)}: {outcome}")

    # -- helpers -----------------------------------------------------------------------------------
    def _due_at(self, dpu: DegradedDPU) -> datetime:
        wait = timedelta(seconds=self._request.policy.reprovision_after_seconds)
        return max(dpu.since, dpu.reprovision_asked_at or dpu.since) + wait

    def _next_deadline(self) -> datetime | None:
        if not self._request.policy.auto_reprovision or not self._degraded:
            return None
        return min(self._due_at(d) for d in self._degraded.values())

    def _pool_input(self, state: str, reason: str = "") -> SetPoolStateInput:
        return SetPoolStateInput(
            host_id=self._request.host_id, namespace=self._request.namespace, state=state, reason=reason
        )

    def _memory(self, *, next_run: bool) -> MonitorMemory:
        return MonitorMemory(
            pool_state=self._pool,
            last_phases=self._phases,
            last_uids=self._uids,
            since=self._since,
            degraded=tuple(self._degraded.values()),
            history=tuple(self._history),
            events_seen=self._events,
            runs=self._runs + (1 if next_run else 0),
            reprovisions_requested=self._reprovisions,
            requests=tuple(self._requests),
            started_at=self._started_at,
            stop=self.abort_request,
            last_started=self._started,
            unplanned=tuple(self._unplanned),
            unplanned_total=self._unplanned_total,
            looked_at=self._looked_at,
        )

    async def _abortable(
        self, call: Callable[[ArgT], Awaitable[ResultT]], arg: ArgT, config: workflow.ActivityConfig
    ) -> ResultT | None:
        """An activity that an `abort` arriving while it runs (or retries, e.g. in a Kubernetes
        outage) cancels and waits for: None then (`kernel.await_unless`: at most the attempt in
        flight, so the final look never races a write and the monitor never ends with a call
        pending). Called after the abort (the final look), it just runs."""
        stopped_before = self.aborting
        handle = kernel.start_cancellable(call, arg, config)
        if not await kernel.await_unless(handle, lambda: not stopped_before and self.aborting):
            return None  # an answer that came anyway is unused: the final look decides
        return await handle

    async def _read_dpf_state(self) -> HostDPFState:
        state: HostDPFState = await workflow.execute_activity(
            activity_api.read_host_dpf_state,
            HostRef(host_id=self._request.host_id, namespace=self._request.namespace),
            **self._options(KUBE_READ, f"DPF state of {self._request.host_id}"),
        )
        return state

    def _options(self, preset: workflow.ActivityConfig, summary: str) -> workflow.ActivityConfig:
        """A call's options; bounded in all by `_bound` once set (the final look)."""
        return options(preset if self._bound is None else bounded(preset, self._bound), summary)

    # -- messages ----------------------------------------------------------------------------------
    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        """From the watcher: the host's DPF state changed (a state taken is queued by `on_taken`)."""
        self._watch.accept(state)

    def abort_promise(self) -> str:
        """An abort stops monitoring; the pool label is left as the world says."""
        return f"monitor of {self._request.host_id} stops"

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostMonitorStatus:
        """Pool state, each DPU's phase and time in it, the degraded DPUs and what was asked."""
        dpus = tuple(
            DPUProgress(dpu_id=i, phase=p, since=self._since.get(i, self._started_at))
            for i, p in self._phases.items()
        )
        deadline = self._next_deadline()
        if deadline is not None:
            degraded = ", ".join(sorted(self._degraded))
            waiting = f"recovery of {degraded}, or the reprovision deadline {iso_z(deadline)}"
        elif self._degraded:
            waiting = f"recovery of {', '.join(sorted(self._degraded))} (automatic reprovision is off)"
        else:
            waiting = "a Ready DPU falling to Node Effect"
        return HostMonitorStatus(
            host_id=self._request.host_id,
            pool_state=self._pool,
            phase="host-out-of-pool" if self._degraded else WATCHING,
            waiting_for=waiting,
            dpus=dpus,
            degraded=tuple(self._degraded.values()),
            history=tuple(self._history),
            events_seen=self._events,
            runs=self._runs,
            reprovisions_requested=self._reprovisions,
            requests=tuple(self._requests),
            started_at=self._started_at,
            unplanned_resets=tuple(self._unplanned),
            unplanned_total=self._unplanned_total,
        )
