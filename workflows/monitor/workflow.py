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
4. The monitor's own request awaiting approval whose DPUs are no longer degraded (Ready again,
   or gone) is withdrawn (`withdraw_host_request`, the entity's `withdraw`): an approval given
   later would reprovision a healthy host; `metalflow approve` then says what was withdrawn.
5. While its own reprovision runs the monitor asks for none (the entity tells it how it ends;
   asking meanwhile raced an operator's abort); one deadline after it was last seen running it
   reads the entity's record (`find_host_operation`), in case that end was never told.
6. A reprovision the entity refuses because DPF no longer has the DPUs (its removal took them
   out: `DPUsRemoved`, outcome "gone") is not asked again: those DPUs are forgotten, and the
   pool label follows the DPUs left.
7. An operator's abort is sovereign: the entity tells the monitor how its request ended (signal
   `host_finished`, as it tells a campaign); aborted, terminated or withdrawn by someone else,
   the monitor asks for no reprovision of the host for `policy.hold_back_seconds` (default an
   hour), shows the hold-back and why in its status, and resumes when it ends or an operator
   sends `resume` (`metalflow host monitor HOST --resume`).

Only a fall from `Ready` counts: a DPU passing `Node Effect` while it is provisioned or
reprovisioned is held by design. A recreated DPU (new uid) restarts its degraded clock. These
decisions are the monitor's state's (`state.py`, `MonitorState`); the runbook here asks it, then
calls the activities, sets the search attribute and the phase.

Unplanned resets at rest (the operation's rule, `dpf_barrier.unplanned_change`, on consecutive
states the watcher signals): a DPU that was `Ready` and whose agent restarted
(`agentStatus.lastStartupTime` moved; DPF v26) or that went back to an earlier phase by a move DPF does
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
carrying its state whole (`MonitorMemory`, the state's data); the next run's watcher lists the
world again, and a fall from `Ready` that happened in between is still seen because the last
phases are carried.

Stop with the update `abort`: the monitor reads the world once more, sets the pool label as the
world says (out only while a degraded DPU is still in `Node Effect`) and ends. An abort accepted
while a run hands over to the next is carried in its memory: the next run stops at once. The
final look retries for at most `policy.kube_call_timeout_seconds` (a Kubernetes outage): past
that the monitor stops anyway, its phase and result saying the label was left as last written.
A call in flight when the abort arrives is cancelled and waited for (`Runbook.call`: at most its
attempt in flight, nothing is retried after a cancel), so the monitor ends with no call pending;
the final look's calls, made after the abort, run to their end.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import ClassVar, Final

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import OperationAborted
    from contracts.models.campaign import HOST_FINISHED_SIGNAL, HostFinished
    from contracts.models.control import STATUS_QUERY, OperatorAnswer, OperatorRequest
    from contracts.models.dpf import DPF_STATE_CHANGED_SIGNAL, HostDPFState, HostRef
    from contracts.models.monitor import (
        IN_POOL,
        OUT_OF_POOL,
        RESUME_UPDATE,
        HostMonitorInput,
        HostMonitorResult,
        HostMonitorStatus,
        OwnerOperationInput,
        OwnerReprovisionInput,
        OwnerWithdrawInput,
        SetPoolStateInput,
        UnplannedReset,
    )
    from contracts.wording import iso_z
    from workflows import kernel
    from workflows.kernel import KUBE_READ, KUBE_WRITE, bounded, describe_failure, options
    from workflows.monitor.state import OUT_OF_POOL_PHASE, WATCHING, MonitorState, reset_at_rest
    from workflows.parts.dpf_watch import DPFWatch

__all__ = ["HostMonitorWorkflow", "reset_at_rest"]  # the rule, also named from here (tests)

UNPLANNED_RESET: Final = "unplanned-reset"  # the occurrence the worker's Events report (`kernel.report`)
OWNER_REQUEST: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=60),
    "heartbeat_timeout": KUBE_WRITE["heartbeat_timeout"],
    "retry_policy": KUBE_WRITE["retry_policy"],
}


@workflow.defn(name="HostMonitorWorkflow")
class HostMonitorWorkflow(kernel.Abortable):
    """Take a host out of the pool while a DPU's critical services are down; reprovision past a deadline."""

    ENDED: ClassVar = ("stopped", "failed", "cancelled")

    @workflow.init
    def __init__(self, request: HostMonitorInput) -> None:
        super().__init__()
        self._request = request
        self.state = MonitorState.of(request, workflow.now())
        self.abort_request = self.state.stop  # accepted means done, across runs too
        # This run's own (runtime, not carried): the states the watch took and not yet handled,
        # the watch, and the bound on a call's retries once the final look began (None: none).
        self._pending: list[HostDPFState] = []
        self._watch = DPFWatch(on_taken=self._pending.append)
        self._bound: float | None = None
        self._woken = False  # an operator's answer changed the next deadline: the wait starts over

    @workflow.run
    async def run(self, request: HostMonitorInput) -> HostMonitorResult:
        """Watch, react, continue-as-new; see the module docstring."""
        return await self.to_the_end(lambda: self._runbook(request), self._left_behind)

    async def _left_behind(self, err: BaseException) -> str:
        # The watch is stopped by the runbook; the label stays as last written, which is what the
        # world was when this monitor last looked.
        return f"The pool label is left {self.state.pool_state}"

    async def _runbook(self, request: HostMonitorInput) -> HostMonitorResult:
        workflow.upsert_search_attributes(
            [
                names.HOST_ID.value_set(request.host_id),
                names.OPERATION.value_set(names.MONITOR),
                names.SITE.value_set(request.site),
                names.POOL_STATE.value_set(self.state.pool_state),
            ]
        )
        self.enter(WATCHING, f"run {self.state.runs}; pool state {self.state.pool_state}")
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
        ended = f"stopped by {stop.requested_by}; pool state {self.state.pool_state}"
        await self.finish("stopped", ended + (f"; {failed}" if failed else ""))
        return HostMonitorResult(
            host_id=request.host_id,
            pool_state=self.state.pool_state,
            events_seen=self.state.events_seen,
            runs=self.state.runs,
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
                await self._withdraw_stale()
                await self._check_own_request()
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
                    memory = self.state.handed_over(self.abort_request)
                    # The memo is the run's: the next starts with it, or the UI loses the resets.
                    self.settle_upserts()  # the phase entered in this activation goes with the run
                    workflow.continue_as_new(
                        request.model_copy(update={"memory": memory}), memo=self.state.memo() or None
                    )
        finally:
            await self._watch.stop()

    # -- steps -------------------------------------------------------------------------------------
    # An abort cuts short the calls made before it (`abortable=not self.aborting`: the final look's,
    # after it, run to their end); a call it cut short ends as `OperationAborted`, and the final
    # look decides what it would have.
    async def _adopt_pool_label(self) -> None:
        """A first run continues what an earlier monitor left (`MonitorState.adopt`)."""
        try:
            found = await self.call(
                activity_api.read_host_pool_state,
                self._pool_input(IN_POOL),
                options(KUBE_READ, f"pool label of {self._request.host_id}"),
                abortable=not self.aborting,
            )
        except OperationAborted:
            return
        self.state.adopt(found)

    async def _wait_for_news(self) -> None:
        """Until the watch took a state, Temporal suggests a new run, a reprovision deadline
        passes, or an abort (the loop then handles what came with it and stops)."""
        deadline = self.state.next_deadline()
        timeout = None if deadline is None else max(deadline - workflow.now(), timedelta(0))
        try:
            await self.wait(
                lambda: bool(self._pending) or self._woken or workflow.info().is_continue_as_new_suggested(),
                timeout=None if timeout is None else timeout.total_seconds(),
            )
        except OperationAborted:
            pass
        self._woken = False

    async def _handle(self, dpf: HostDPFState) -> None:
        resets, since = self.state.observe(dpf, workflow.now())
        if resets:
            await self._record_unplanned(resets, since)
        await self._apply_pool_state()

    async def _record_unplanned(self, resets: list[UnplannedReset], since: datetime) -> None:
        """Record resets at rest that no operation of the host explains: the entity is asked
        whether it ran one since the last state (`find_host_operation`); a reboot, reset or
        firmware cycle of metalflow's restarts Ready DPUs too, and an operation records what it
        sees itself. Recorded: the status, the memo (one upsert), one Event, one WARNING line."""
        what = "; ".join(f"DPU {r.dpu_id} {r.change}" for r in resets)
        try:
            owner = await self.call(
                activity_api.find_host_operation,
                OwnerOperationInput(
                    host_id=self._request.host_id, since=since, dpu_ids=tuple(r.dpu_id for r in resets)
                ),
                self._options(OWNER_REQUEST, f"did metalflow reset {self._request.host_id}?"),
                abortable=not self.aborting,
            )
        except OperationAborted:
            return  # stopped while asking: the final look reads the world again
        except ActivityError as err:  # only a bounded call (the final look) gives up: record it
            unknown = f"; metalflow's operations unknown ({describe_failure(err)})"
            resets = [r.model_copy(update={"change": r.change + unknown}) for r in resets]
        else:
            if owner.workflow_id is not None:
                workflow.logger.info("%s, explained by %s (%s)", what, owner.workflow_id, owner.message)
                return
        workflow.upsert_memo({"unplanned_resets": self.state.record_unplanned(resets)})
        kernel.report(
            UNPLANNED_RESET, f"{what}: not by metalflow (no operation of the host since {iso_z(since)})"
        )

    async def _apply_pool_state(self) -> None:
        label = self.state.pool_label()
        if label is None:
            return  # the label was written (or confirmed) this run: no activity per DPF change
        wanted, reason = label
        try:
            written = await self.call(
                activity_api.set_host_pool_state,
                self._pool_input(wanted, reason),
                self._options(KUBE_WRITE, f"{self._request.host_id} {wanted}"),
                abortable=not self.aborting,
            )
        except OperationAborted:
            self.state.label_unconfirmed()  # the final look writes the label the world needs
            return
        if not self.state.labelled(wanted, reason, written, workflow.now()):
            return
        workflow.upsert_search_attributes([names.POOL_STATE.value_set(wanted)])
        self.enter(OUT_OF_POOL_PHASE if wanted == OUT_OF_POOL else WATCHING, reason)

    async def _reprovision_overdue(self) -> None:
        now = workflow.now()
        held = self.state.hold_back is not None
        due = self.state.overdue(now)
        if held and self.state.hold_back is None and not due:  # the hold-back ended: say so
            self.enter(self.state.status().phase, self.state.requests[-1])
        if not due:
            return
        ids = tuple(sorted(d.dpu_id for d in due))
        self.enter("requesting-reprovision", f"DPUs {', '.join(ids)} in Node Effect past the deadline")
        after = self._request.policy.reprovision_after_seconds
        try:
            answer = await self.call(
                activity_api.request_host_reprovision,
                OwnerReprovisionInput(
                    host_id=self._request.host_id,
                    dpu_ids=ids,
                    requested_by=workflow.info().workflow_id,
                    reason=f"critical DPU services down for more than {after:g} s",
                    notify_workflow_id=workflow.info().workflow_id,  # told how it ends: `host_finished`
                ),
                options(OWNER_REQUEST, f"ask host/{self._request.host_id} to reprovision"),
                abortable=not self.aborting,
            )
        except OperationAborted:
            return  # stopped meanwhile: nothing was asked, or the entity's answer is not waited for
        outcome = self.state.reprovision_answered(due, answer, now)
        self.enter(OUT_OF_POOL_PHASE, f"reprovision of {', '.join(ids)}: {outcome}")
        if answer.outcome == "gone":  # DPUs DPF no longer has are degraded no more: the label follows
            await self._apply_pool_state()

    async def _check_own_request(self) -> None:
        """While its own reprovision runs the monitor asks nothing (the entity tells it how it ends:
        asking meanwhile raced an operator's abort); one deadline after it was last seen running,
        the entity's record is read, in case that end was never told (`own_request_seen`)."""
        asked = self.state.own_request_to_check(workflow.now())
        if asked is None:
            return
        try:
            found = await self.call(
                activity_api.find_host_operation,
                OwnerOperationInput(
                    host_id=self._request.host_id,
                    since=asked.asked_at or self.state.began,
                    dpu_ids=asked.dpu_ids,
                ),
                options(OWNER_REQUEST, f"does {asked.workflow_id} still run?"),
                abortable=not self.aborting,
            )
        except OperationAborted:
            return
        words = self.state.own_request_seen(found, workflow.now())
        if words is not None:
            self.enter(self.state.status().phase, words)

    async def _withdraw_stale(self) -> None:
        """The monitor's own request awaiting approval whose DPUs are no longer degraded is
        withdrawn (`MonitorState.stale_request`): an approval given later would reprovision a
        healthy host, and `approve` then says what was withdrawn and why."""
        stale = self.state.stale_request()
        if stale is None:
            return
        workflow_id, why = stale
        dpu_ids = self.state.asked.dpu_ids if self.state.asked is not None else ()
        try:
            answer = await self.call(
                activity_api.withdraw_host_request,
                OwnerWithdrawInput(
                    host_id=self._request.host_id,
                    workflow_id=workflow_id,
                    requested_by=workflow.info().workflow_id,
                    reason=why,
                ),
                options(OWNER_REQUEST, f"withdraw {workflow_id}: {why}"),
                abortable=not self.aborting,
            )
        except OperationAborted:
            return  # stopped meanwhile: the request stays as the entity holds it
        self.enter(
            self.state.status().phase, f"{workflow_id}: {self.state.withdrawal_answered(dpu_ids, answer)}"
        )

    # -- helpers -----------------------------------------------------------------------------------
    def _pool_input(self, state: str, reason: str = "") -> SetPoolStateInput:
        return SetPoolStateInput(
            host_id=self._request.host_id, namespace=self._request.namespace, state=state, reason=reason
        )

    async def _read_dpf_state(self) -> HostDPFState:
        """The final look's read (after the abort: it runs to its end, bounded by `_bound`)."""
        return await self.call(
            activity_api.read_host_dpf_state,
            HostRef(host_id=self._request.host_id, namespace=self._request.namespace),
            self._options(KUBE_READ, f"DPF state of {self._request.host_id}"),
            abortable=False,
        )

    def _options(self, preset: workflow.ActivityConfig, summary: str) -> workflow.ActivityConfig:
        """A call's options; bounded in all by `_bound` once set (the final look)."""
        return options(preset if self._bound is None else bounded(preset, self._bound), summary)

    # -- messages ----------------------------------------------------------------------------------
    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        """From the watcher: the host's DPF state changed (a state taken is queued by `on_taken`)."""
        self._watch.accept(state)

    @workflow.signal(name=HOST_FINISHED_SIGNAL)
    def host_finished(self, finished: HostFinished) -> None:
        """From the host's entity: how the monitor's request ended. An operator's abort or
        withdrawal holds the monitor back (`MonitorState.request_ended`)."""
        words = self.state.request_ended(finished, workflow.now())
        self._woken = True
        if self.state.hold_back is not None:
            self.enter(self.state.status().phase, f"holding back: {words}")
        workflow.logger.info("%s: %s", self._request.host_id, words)

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, request: OperatorRequest) -> OperatorAnswer:
        """An operator ends the hold-back after an abort: the monitor asks again as its deadlines say."""
        words = self.state.resume(request)
        self._woken = True
        self.enter(self.state.status().phase, words)
        return OperatorAnswer(accepted=True, message=words)

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        if self.state.hold_back is None:
            self.state.resume(request)  # raises: nothing to resume (no history written)

    def abort_promise(self) -> str:
        """An abort stops monitoring; the pool label is left as the world says."""
        return f"monitor of {self._request.host_id} stops"

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostMonitorStatus:
        """Pool state, each DPU's phase and time in it, the degraded DPUs and what was asked."""
        return self.state.status()
